"""Kubernetes resource quantities (``100m``, ``64Mi``, ``1e3``, ``2``) as integers.

Parsing is :mod:`kgpu.quantity`'s (shared with the DRA code); this module counts and prints.

The scheduler compares requests with allocatable capacity thousands of times per second, so
quantities become plain ints once, at admission: CPU in millicores, everything else in base
units (bytes for memory, a count for extended resources), rounded up as the API server rounds a
request that is finer than the unit.
"""

from __future__ import annotations

import math

from kgpu.quantity import QuantityError, parse_quantity


def to_units(resource: str, value: object) -> int:
    """The integer the scheduler counts: millicores for ``cpu``, base units otherwise."""
    q = parse_quantity(value)
    if q < 0:
        raise QuantityError(f"{value!r} must not be negative")
    if resource == "cpu":
        q = q * 1000
    return math.ceil(q)


def format_units(resource: str, units: int) -> str:
    """Render a counted amount the way ``kubectl describe node`` does."""
    if resource == "cpu":
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units and units % size == 0:
                return f"{units // size}{suffix}"
    return str(units)


__all__ = ["QuantityError", "format_units", "parse_quantity", "to_units"]
