"""Fixtures for the metrics tests: machines and text parsing (Prometheus: prometheus_helper)."""

from __future__ import annotations

import re

import pytest

from kgpu.hardware.model import Machine
from kgpu.hardware.profiles import load_machine

SERIES_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_series(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample line of an exposition as (name, labels, value)."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SERIES_RE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = dict(LABEL_RE.findall(match.group(2) or ""))
        out.append((match.group(1), labels, float(match.group(3))))
    return out


def series(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    return [
        (lab, value)
        for n, lab, value in parse_series(text)
        if n == name and all(lab.get(k) == v for k, v in labels.items())
    ]


@pytest.fixture
def h100() -> Machine:
    return load_machine("dgx-h100", hostname="node-a")
