"""What kube-apiserver drops on write when ``DRAConsumableCapacity`` is off: the rule both
kgpu's API servers apply (the API-server stand-in, :mod:`kgpu.testing.apiserver.gates`, and
the simulator's store), so neither keeps a field a real 1.34-1.35 server would not.

Each kind's registry strategy has a ``dropDisabledFields``: a gated field is cleared from the
object being written while its gate is off, unless the object before the write (None on
create) already used the gate's fields, so switching a gate off does not strip existing objects
on their next update. The schema of an alpha release has the fields either way, so a schema
check alone keeps them. For ``DRAConsumableCapacity`` (KEP-5075, kubernetes PR #132522):

* ResourceSlice: each device's ``allowMultipleAllocations`` and each capacity's
  ``requestPolicy`` (``dropDisabledDRAConsumableCapacityFields`` of the slice strategy);
* ResourceClaim and ResourceClaimTemplate (the template's ``spec.spec``): each request's
  ``capacity`` (``exactly.capacity`` in v1/v1beta2, the request's own in v1beta1) and each
  ``firstAvailable`` subrequest's, each constraint's ``distinctAttribute``, and in a claim's
  status each allocation result's ``shareID`` and ``consumedCapacity``.

A claim that asked for ``memory: 20Gi`` of a shared GPU is thus stored as a plain claim for a
device of its class: the scheduler gives it a whole (exclusive) GPU, as a real cluster without
the gate does, instead of refusing it for capacity requests it can never see.

The functions never change what they are given (a store may share small maps between its
objects): a copy is made along the path of each dropped field only, and an object with nothing
to drop comes back as it was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Obj = dict[str, Any]

GATE = "DRAConsumableCapacity"
#: The kinds whose strategy drops the gate's fields.
KINDS = frozenset({"ResourceSlice", "ResourceClaim", "ResourceClaimTemplate"})


def drop_disabled(
    kind: str, new: Obj, old: Mapping[str, Any] | None, gate_on: Callable[[str], bool]
) -> Obj:
    """``new`` as the API server stores it: without the fields of a gate that is off, unless
    ``old`` (the object before the write, None on create) used them. Any served version's
    shape (v1, v1beta2, v1beta1)."""
    if kind not in KINDS or gate_on(GATE):
        return new
    if kind == "ResourceSlice":
        if uses_slice_fields(old):
            return new
        return drop_slice_fields(new)
    if uses_claim_fields(kind, old):
        return new
    return drop_claim_fields(kind, new)


# -- ResourceSlices ------------------------------------------------------------------------


def _slice_devices(slice_: Mapping[str, Any]) -> list[Any]:
    devices = (slice_.get("spec") or {}).get("devices")
    return devices if isinstance(devices, list) else []


def _device_body(device: Mapping[str, Any]) -> Mapping[str, Any]:
    """The device's fields: v1beta1 wraps them in ``basic``."""
    basic = device.get("basic")
    return basic if isinstance(basic, Mapping) else device


def uses_slice_fields(slice_: Mapping[str, Any] | None) -> bool:
    """Whether a slice has any of the gate's fields."""
    if not slice_:
        return False
    for device in _slice_devices(slice_):
        if not isinstance(device, Mapping):
            continue
        body = _device_body(device)
        if body.get("allowMultipleAllocations") is not None:
            return True
        capacity = body.get("capacity")
        if isinstance(capacity, Mapping) and any(
            isinstance(c, Mapping) and c.get("requestPolicy") is not None for c in capacity.values()
        ):
            return True
    return False


def _strip_device(body: Mapping[str, Any]) -> Obj:
    out = {k: v for k, v in body.items() if k != "allowMultipleAllocations"}
    capacity = body.get("capacity")
    if isinstance(capacity, Mapping):
        out["capacity"] = {
            name: (
                {k: v for k, v in c.items() if k != "requestPolicy"}
                if isinstance(c, Mapping)
                else c
            )
            for name, c in capacity.items()
        }
    return out


def drop_slice_fields(slice_: Obj) -> Obj:
    """``slice_`` without the gate's fields (a new object when any were there)."""
    if not uses_slice_fields(slice_):
        return slice_
    devices = []
    for device in _slice_devices(slice_):
        if not isinstance(device, Mapping):
            devices.append(device)
        elif isinstance(device.get("basic"), Mapping):
            devices.append({**device, "basic": _strip_device(device["basic"])})
        else:
            devices.append(_strip_device(device))
    return {**slice_, "spec": {**slice_["spec"], "devices": devices}}


# -- ResourceClaims and their templates ------------------------------------------------------


def _claim_spec(kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = obj.get("spec") or {}
    if kind == "ResourceClaimTemplate":
        spec = (spec.get("spec") or {}) if isinstance(spec, Mapping) else {}
    return spec if isinstance(spec, Mapping) else {}


def _devices(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    devices = spec.get("devices")
    return devices if isinstance(devices, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _results(obj: Mapping[str, Any]) -> list[Any]:
    status = obj.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, Mapping) else None
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    return _list(devices.get("results")) if isinstance(devices, Mapping) else []


def _request_uses(request: Any) -> bool:
    if not isinstance(request, Mapping):
        return False
    exactly = request.get("exactly")
    if isinstance(exactly, Mapping) and exactly.get("capacity") is not None:
        return True
    if request.get("capacity") is not None:  # v1beta1: the request is the exact one
        return True
    return any(
        isinstance(sub, Mapping) and sub.get("capacity") is not None
        for sub in _list(request.get("firstAvailable"))
    )


def uses_claim_fields(kind: str, obj: Mapping[str, Any] | None) -> bool:
    """Whether a claim (or template) has any of the gate's fields."""
    if not obj:
        return False
    devices = _devices(_claim_spec(kind, obj))
    if any(_request_uses(r) for r in _list(devices.get("requests"))):
        return True
    if any(
        isinstance(c, Mapping) and c.get("distinctAttribute") is not None
        for c in _list(devices.get("constraints"))
    ):
        return True
    return any(
        isinstance(r, Mapping)
        and (r.get("shareID") is not None or r.get("consumedCapacity") is not None)
        for r in _results(obj)
    )


def _without(value: Any, *keys: str) -> Any:
    if not isinstance(value, Mapping) or not any(k in value for k in keys):
        return value
    return {k: v for k, v in value.items() if k not in keys}


def _strip_request(request: Any) -> Any:
    if not _request_uses(request):
        return request
    out = {k: v for k, v in request.items() if k != "capacity"}  # a new map: changed below
    if isinstance(out.get("exactly"), Mapping):
        out["exactly"] = _without(out["exactly"], "capacity")
    if "firstAvailable" in out:
        out["firstAvailable"] = [_without(s, "capacity") for s in _list(out["firstAvailable"])]
    return out


def _strip_spec(spec: Mapping[str, Any]) -> Obj:
    devices = dict(_devices(spec))
    if "requests" in devices:
        devices["requests"] = [_strip_request(r) for r in _list(devices["requests"])]
    if "constraints" in devices:
        devices["constraints"] = [
            _without(c, "distinctAttribute") for c in _list(devices["constraints"])
        ]
    return {**spec, "devices": devices} if "devices" in spec else dict(spec)


def drop_claim_fields(kind: str, obj: Obj) -> Obj:
    """``obj`` (a ResourceClaim or ResourceClaimTemplate) without the gate's fields (a new
    object when any were there)."""
    if not uses_claim_fields(kind, obj):
        return obj
    out = dict(obj)
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        if kind == "ResourceClaimTemplate":
            inner = spec.get("spec")
            if isinstance(inner, Mapping):
                out["spec"] = {**spec, "spec": _strip_spec(inner)}
        else:
            out["spec"] = _strip_spec(spec)
    results = _results(obj)
    if any(isinstance(r, Mapping) and ("shareID" in r or "consumedCapacity" in r) for r in results):
        status = obj["status"]
        allocation = status["allocation"]
        out["status"] = {
            **status,
            "allocation": {
                **allocation,
                "devices": {
                    **allocation["devices"],
                    "results": [_without(r, "shareID", "consumedCapacity") for r in results],
                },
            },
        }
    return out
