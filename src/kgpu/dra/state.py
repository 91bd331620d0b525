"""What other claims already hold: kube-scheduler's ``AllocatedState``.

From every allocated ResourceClaim: devices held exclusively (results without ``shareID``), and,
for devices that allow multiple allocations, the capacity each share consumes (results with a
``shareID``, summed per device). Results with ``adminAccess`` hold nothing: admin access never
keeps a device from others. With DRAConsumableCapacity off every result counts as exclusive,
as upstream counts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kgpu.dra.capacity import Key
from kgpu.quantity import parse_quantity

Obj = dict[str, Any]
DeviceID = tuple[str, str, str]


def results_of(claim: Mapping[str, Any]) -> list[Obj]:
    """The device results of a claim's allocation (empty when not allocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def result_id(res: Mapping[str, Any]) -> DeviceID:
    return (str(res.get("driver")), str(res.get("pool")), str(res.get("device")))


def _cap_key(name: str, driver: str) -> Key:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def allocated_devices(claims: Iterable[Obj]) -> set[DeviceID]:
    """Devices held exclusively by allocated claims (admin access and shares excluded)."""
    out: set[DeviceID] = set()
    for claim in claims:
        for res in results_of(claim):
            if res.get("adminAccess") or res.get("shareID"):
                continue
            out.add(result_id(res))
    return out


@dataclass
class AllocatedState:
    """Devices in use: exclusive ones, and the capacity consumed of shared ones."""

    dedicated: set[DeviceID] = field(default_factory=set)
    capacity: dict[DeviceID, dict[Key, Decimal]] = field(default_factory=dict)

    @classmethod
    def of(cls, claims: Iterable[Obj], consumable_capacity: bool = True) -> AllocatedState:
        state = cls()
        for claim in claims:
            state.add(claim, consumable_capacity)
        return state

    def _walk(
        self, claim: Mapping[str, Any], consumable_capacity: bool, sign: int
    ) -> set[DeviceID]:
        changed: set[DeviceID] = set()
        for res in results_of(claim):
            if res.get("adminAccess"):
                continue
            dev = result_id(res)
            if consumable_capacity and res.get("shareID"):
                used = self.capacity.setdefault(dev, {})
                for name, value in (res.get("consumedCapacity") or {}).items():
                    key = _cap_key(str(name), dev[0])
                    used[key] = used.get(key, Decimal(0)) + sign * parse_quantity(str(value))
                if sign < 0 and all(v == 0 for v in used.values()):
                    del self.capacity[dev]
                changed.add(dev)
                continue
            if sign > 0:
                self.dedicated.add(dev)
            else:
                self.dedicated.discard(dev)
            changed.add(dev)
        return changed

    def add(self, claim: Mapping[str, Any], consumable_capacity: bool = True) -> set[DeviceID]:
        """Count an allocated claim's devices as in use; the device ids it touched."""
        return self._walk(claim, consumable_capacity, +1)

    def remove(self, claim: Mapping[str, Any], consumable_capacity: bool = True) -> set[DeviceID]:
        """Undo :meth:`add` for a claim whose allocation goes away."""
        return self._walk(claim, consumable_capacity, -1)
