"""Object names as Kubernetes' controllers make them.

A ReplicaSet is ``<deployment>-<pod-template-hash>`` (an FNV-32a hash of the pod template, in the
controllers' vowel-free alphabet, so it never spells words), and controllers' pods get a
five-character random suffix from the same alphabet. The simulator draws the suffixes from a
seeded generator so every run of a scenario prints the same names.
"""

from __future__ import annotations

import json
import random
from typing import Any

#: The alphabet of k8s.io/apimachinery's rand.String and SafeEncodeString (no vowels, no 0/1/3).
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _fnv32a(data: bytes) -> int:
    h = 0x811C9DC5
    for byte in data:
        h ^= byte
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def safe_encode(text: str) -> str:
    """Map each character onto the alphabet, as the controllers do with hash digits."""
    return "".join(ALPHABET[ord(ch) % len(ALPHABET)] for ch in text)


def template_hash(template: Any) -> str:
    """The ``pod-template-hash`` of a pod template: stable for equal templates."""
    blob = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    return safe_encode(str(_fnv32a(blob)))


class Suffixes:
    """Random-looking five-character suffixes, reproducible from a seed, never repeated."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)
        self._used: set[str] = set()

    def next(self, length: int = 5) -> str:
        while True:
            s = "".join(self._rng.choice(ALPHABET) for _ in range(length))
            if s not in self._used:
                self._used.add(s)
                return s
