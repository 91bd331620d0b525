"""Claim constraints across requests: ``matchAttribute`` (all devices share a value) and
``distinctAttribute`` (no two devices share one, part of consumable capacity upstream).

Both apply to the requests they name (a parent request name covers its subrequests, and
``request/subrequest`` names one alternative) or to all requests when none are named. A device
without the attribute never satisfies either. Values compare by type and value; versions as
strings, since semver requires their minimal form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kgpu.dra.pools import Device


class _Constraint:
    def __init__(self, requests: Sequence[str], attribute: str) -> None:
        self.requests = frozenset(requests)
        self.attribute = attribute

    def applies(self, base: str, sub: str) -> bool:
        if not self.requests:
            return True
        return base in self.requests or (bool(sub) and f"{base}/{sub}" in self.requests)

    def add(self, base: str, sub: str, dev: Device) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def remove(self, base: str, sub: str, dev: Device) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class MatchAttribute(_Constraint):
    """All devices of the named requests share the attribute's value."""

    def __init__(self, requests: Sequence[str], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.value: tuple[str, Any] | None = None
        self.n = 0

    def add(self, base: str, sub: str, dev: Device) -> bool:
        if not self.applies(base, sub):
            return True
        value = dev.attribute(self.attribute)
        if value is None:
            return False
        if self.n == 0:
            self.value = value
        elif value != self.value:
            return False
        self.n += 1
        return True

    def remove(self, base: str, sub: str, dev: Device) -> None:
        if self.applies(base, sub):
            self.n -= 1


class DistinctAttribute(_Constraint):
    """No two devices of the named requests share the attribute's value."""

    def __init__(self, requests: Sequence[str], attribute: str) -> None:
        super().__init__(requests, attribute)
        self.values: list[tuple[str, Any]] = []

    def add(self, base: str, sub: str, dev: Device) -> bool:
        if not self.applies(base, sub):
            return True
        value = dev.attribute(self.attribute)
        if value is None or value in self.values:
            return False
        self.values.append(value)
        return True

    def remove(self, base: str, sub: str, dev: Device) -> None:
        if self.applies(base, sub):
            self.values.pop()


Constraint = MatchAttribute | DistinctAttribute
