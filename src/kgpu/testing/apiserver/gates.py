"""What kube-apiserver drops on write when a feature gate is off (``dropDisabledFields`` in each
kind's registry strategy), for the gates kgpu publishes fields of.

A real API server keeps a gated field out of storage when its gate is off, unless the object
already used it before the write (so turning a gate off does not strip existing objects on
their next update). The schema of an alpha release has the field either way, so checking the
schema alone would keep it; the stand-in applies these rules after the schema check.

Modelled: ``DRAConsumableCapacity`` on ResourceSlices (``dropDisabledDRAConsumableCapacityFields``:
each device's ``allowMultipleAllocations`` and each capacity's ``requestPolicy``). A driver
that publishes shared GPUs to a 1.34-1.35 server without the gate thus sees its GPUs stored
as ordinary, exclusive devices, as on a real cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Obj = dict[str, Any]


def _uses_consumable_capacity(slice_: Mapping[str, Any] | None) -> bool:
    if not slice_:
        return False
    for device in (slice_.get("spec") or {}).get("devices") or []:
        if device.get("allowMultipleAllocations") is not None:
            return True
        if any(
            isinstance(c, Mapping) and c.get("requestPolicy") is not None
            for c in (device.get("capacity") or {}).values()
        ):
            return True
    return False


def drop_disabled(
    kind: str, new: Obj, old: Mapping[str, Any] | None, gate_on: Callable[[str], bool]
) -> Obj:
    """``new`` (the stored form, ``resource.k8s.io/v1`` shape) without the fields whose gate
    is off, unless ``old`` (the object before the write, None on create) used them."""
    if kind != "ResourceSlice":
        return new
    if gate_on("DRAConsumableCapacity") or _uses_consumable_capacity(old):
        return new
    for device in (new.get("spec") or {}).get("devices") or []:
        device.pop("allowMultipleAllocations", None)
        for capacity in (device.get("capacity") or {}).values():
            if isinstance(capacity, dict):
                capacity.pop("requestPolicy", None)
    return new
