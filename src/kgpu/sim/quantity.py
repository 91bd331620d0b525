"""Kubernetes resource quantities (``100m``, ``64Mi``, ``1e3``, ``2``) as integers.

The scheduler compares requests with allocatable capacity thousands of times per second, so
quantities become plain ints once, at admission: CPU in millicores, everything else in base
units (bytes for memory, a count for extended resources), rounded up as the API server rounds a
request that is finer than the unit.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_RE = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


class QuantityError(ValueError):
    """Not a Kubernetes quantity."""


def parse_quantity(value: object) -> Decimal:
    """The exact value of a quantity (``"64Mi"`` -> 67108864)."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _RE.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a quantity (e.g. 1, 500m, 64Mi, 1Gi)")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation as exc:
        raise QuantityError(f"{value!r} is not a quantity") from exc
    suffix = match.group(2) or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    return number * _DECIMAL[suffix]


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
