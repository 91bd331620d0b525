"""Consumable capacity (KEP-5075): what a request consumes of a shareable device.

A device with ``allowMultipleAllocations`` can be handed to several requests at once, each
getting its own ``shareID`` and consuming part of the device's capacities. What one allocation
consumes of each capacity: the requested amount rounded up to the capacity's ``requestPolicy``
(``validRange`` min/step, or the next of ``validValues``), the policy's ``default`` when the
request names no amount, the whole capacity when there is neither. The sum over allocations
(already allocated plus being allocated) must stay within the capacity's ``value`` and every
amount must satisfy the policy. Capacity names in requests may omit the driver's domain
("memory" and "<driver>/memory" are the same capacity), as upstream resolves them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from kgpu.quantity import BINARY_SUFFIXES, parse_quantity

Key = tuple[str, str]  # (domain, identifier)


class CapacityError(ValueError):
    """A request that cannot be evaluated (a capacity named twice, a negative amount)."""


@dataclass(frozen=True)
class Capacity:
    """One published capacity: its total and request policy."""

    name: str  # as published (used in results)
    value: Decimal
    default: Decimal | None = None
    valid_values: tuple[Decimal, ...] | None = None
    min: Decimal | None = None
    step: Decimal | None = None
    max: Decimal | None = None

    @property
    def has_policy(self) -> bool:
        return (
            self.default is not None
            or self.valid_values is not None
            or self.min is not None
            or self.max is not None
        )

    def consumed(self, requested: Decimal | None) -> Decimal:
        """What one allocation consumes given the requested amount (None: not requested)."""
        if requested is None:
            return self.default if self.default is not None else self.value
        if self.min is not None:
            if requested < self.min:
                return self.min
            if self.step is None or self.step <= 0:
                return requested
            steps = ((requested - self.min) / self.step).to_integral_value(ROUND_CEILING)
            return self.min + self.step * steps
        if self.valid_values is not None:
            for v in self.valid_values:
                if requested <= v:
                    return v
        return requested

    def violates(self, amount: Decimal) -> bool:
        if not self.has_policy:
            return False
        if self.default is not None and amount == self.default:
            return False
        if self.min is not None or self.max is not None or self.step is not None:
            if self.max is not None and amount > self.max:
                return True
            if self.step is not None and self.step > 0 and self.min is not None:
                return (amount - self.min) % self.step != 0
            return False
        if self.valid_values:
            return amount not in self.valid_values
        return False


def _q(v: Any) -> Decimal:
    return parse_quantity(str(v))


def parse_capacity(name: str, raw: Mapping[str, Any]) -> Capacity:
    policy = raw.get("requestPolicy") or {}
    rng = policy.get("validRange") or {}
    values = policy.get("validValues")
    return Capacity(
        name=name,
        value=_q(raw.get("value", "0")),
        default=_q(policy["default"]) if policy.get("default") is not None else None,
        valid_values=tuple(_q(v) for v in values) if values is not None else None,
        min=_q(rng["min"]) if rng.get("min") is not None else None,
        step=_q(rng["step"]) if rng.get("step") is not None else None,
        max=_q(rng["max"]) if rng.get("max") is not None else None,
    )


def _key(name: str, driver: str) -> Key:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def device_capacities(driver: str, raw: Mapping[str, Any]) -> dict[Key, Capacity]:
    """A device's capacities by fully qualified name; an entry qualified with the driver's own
    domain wins over an unqualified one for the same identifier."""
    out: dict[Key, Capacity] = {}
    prefix = driver + "/"
    for name, cap in raw.items():
        if str(name).startswith(prefix):
            out[_key(str(name), driver)] = parse_capacity(str(name), cap or {})
    for name, cap in raw.items():
        if not str(name).startswith(prefix):
            out.setdefault(_key(str(name), driver), parse_capacity(str(name), cap or {}))
    return out


def resolve_requests(
    requests: Mapping[str, Any] | None, driver: str, caps: Mapping[Key, Capacity]
) -> dict[Key, Decimal] | None:
    """The requested amounts by capacity key, None when the device lacks one of them;
    :class:`CapacityError` when one capacity is requested under both spellings."""
    out: dict[Key, Decimal] = {}
    for name, value in (requests or {}).items():
        key = _key(str(name), driver)
        if key not in caps:
            return None
        if key in out:
            raise CapacityError(
                f"capacity {key[1]!r} requested both as {name!r} and under its other spelling"
            )
        amount = _q(value)
        if amount < 0:
            raise CapacityError(f"capacity {name!r}: capacity value is negative")
        out[key] = amount
    return out


def consumption(
    requested: Mapping[Key, Decimal], caps: Mapping[Key, Capacity]
) -> dict[Key, Decimal]:
    """What one allocation consumes of every capacity of the device."""
    return {key: cap.consumed(requested.get(key)) for key, cap in caps.items()}


def fits(
    consumed: Mapping[Key, Decimal],
    caps: Mapping[Key, Capacity],
    *in_use: Mapping[Key, Decimal] | None,
) -> bool:
    """Whether ``consumed`` obeys every policy and fits next to what is already in use."""
    for key, cap in caps.items():
        amount = consumed[key]
        if cap.violates(amount):
            return False
        total = amount + sum((u.get(key, Decimal(0)) for u in in_use if u), Decimal(0))
        if total > cap.value:
            return False
    return True


def format_quantity(d: Decimal) -> str:
    """A Decimal as a Kubernetes quantity string, binary suffix when exact."""
    if d == d.to_integral_value():
        n = int(d)
        for suffix, mult in reversed(BINARY_SUFFIXES.items()):
            if n and n % mult == 0:
                return f"{n // mult}{suffix}"
        return str(n)
    milli = d * 1000
    if milli == milli.to_integral_value():
        return f"{int(milli)}m"
    return format(d.normalize(), "f")
