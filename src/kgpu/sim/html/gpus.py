"""One node's GPUs as cells of the cluster map: JSON-shaped, the same for ``kgpu sim`` and
``kgpu plan``.

A cell is one physical GPU. Its ``devices`` are what the device plugin (or a DRA claim) hands
out on it: the whole GPU, or each MIG device at its NVML placement (``start``/``size`` in memory
slices, out of the GPU's ``slices`` from the product's MIG geometry). A shared device has one
``slots`` entry per replica (time-slicing or MPS), holding the pod that has that replica or
``None``; an unshared device has one slot. A device the device plugin does not advertise has no
slots (no plugin running, a refused resource) unless a DRA claim took it.

Schema of a cell::

    {"index": 0, "uuid": "GPU-...", "product": "NVIDIA A100-SXM4-80GB", "memoryMiB": 81920,
     "unhealthy": false, "xid": 79 (the last XID, when there was one),
     "note": "..." (when the drawing needs a word: MIG on, but the GPU handed out whole),
     "mode": "whole" | "time-slicing" | "mps" | "mig" | "none",
     "slices": 8,            # memory slices when MIG is on (or a DRA claim made a MIG device)
     "devices": [{"uuid": "MIG-..." | null, "profile": "3g.40gb" | null, "start": 4, "size": 4,
                  "resource": "nvidia.com/mig-3g.40gb" | null, "sharing": "none",
                  "unhealthy": false, "slots": ["default/pod" | null, ...],
                  "claim": "default/claim" (DRA only)}]}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from kgpu.hardware.mig import geometry_for
from kgpu.hardware.model import Gpu, Machine
from kgpu.node.model import AdvertisedDevice, NodeView

Obj = dict[str, Any]

#: ``mode`` of a GPU no device is advertised for.
NOT_ADVERTISED = "none"


def device_index(view: NodeView | None) -> dict[str, AdvertisedDevice]:
    """Advertised device id -> device (ids are unique on a node)."""
    if view is None:
        return {}
    return {dev.id: dev for res in view.resources for dev in res.devices}


def holders_by_device(
    allocations: Mapping[str, Mapping[str, Sequence[str]]], skip: AbstractSet[str] = frozenset()
) -> dict[str, str]:
    """Device id -> the pod holding it, from ``{"ns/pod": {container: [ids]}}`` (pods in
    ``skip``, e.g. finished ones, hold nothing)."""
    out: dict[str, str] = {}
    for pod, containers in allocations.items():
        if pod in skip:
            continue
        for ids in containers.values():
            for device_id in ids:
                out[device_id] = pod
    return out


def _slices(gpu: Gpu) -> int:
    geometry = geometry_for(gpu)
    if geometry is not None:
        return geometry.memory_slices
    # a GPU whose product kgpu has no table for: as many slices as its devices span
    return max((m.placement_start + m.placement_size for m in gpu.mig_devices), default=1)


def _device(
    uuid: str | None,
    start: int,
    size: int,
    advertised: list[AdvertisedDevice],
    holders: Mapping[str, str],
    unhealthy: bool,
    profile: str | None = None,
) -> Obj:
    ordered = (
        advertised if len(advertised) < 2 else sorted(advertised, key=lambda d: d.replica or 0)
    )
    return {
        "uuid": uuid,
        "profile": profile,
        "start": start,
        "size": size,
        "resource": ordered[0].resource if ordered else None,
        "sharing": str(ordered[0].sharing) if ordered else NOT_ADVERTISED,
        "unhealthy": unhealthy,
        "slots": [holders.get(d.id) for d in ordered],
    }


def gpu_cells(
    machine: Machine,
    view: NodeView | None,
    holders: Mapping[str, str],
    unhealthy: AbstractSet[str] = frozenset(),
    dra: Sequence[Obj] = (),
    xids: Mapping[str, int] | None = None,
) -> list[Obj]:
    """The cells of one node's GPUs (schema in the module docstring).

    ``holders`` maps advertised device ids to pods; ``unhealthy`` holds GPU and MIG UUIDs the
    health code took out; ``dra`` lists devices DRA claims hold on this node, each
    ``{"claim", "pod", "uuid"}`` or, for a MIG device a claim creates on demand,
    ``{"claim", "pod", "parentUUID", "profile", "start", "size"}``, and a share of a GPU
    (consumable capacity) ``share`` (its consumed capacity) and ``capacity`` (the GPU's published
    memory): a GPU with shares gets one slot per share and a ``note``; ``xids`` the last XID
    per GPU UUID (a cell gets ``xid`` when it had one).
    """
    by_backing: dict[str, list[AdvertisedDevice]] = {}
    for dev in device_index(view).values():
        by_backing.setdefault(dev.backing_uuid, []).append(dev)
    dra_by_uuid = {d["uuid"]: d for d in dra if d.get("uuid")}
    shares: dict[str, list[Obj]] = {}  # GPU UUID -> the claims holding shares of it
    for d in dra:
        if d.get("uuid") and d.get("share") is not None:
            shares.setdefault(d["uuid"], []).append(d)
    cells = []
    for gpu in sorted(machine.gpus, key=lambda g: g.index):
        gpu_bad = gpu.uuid in unhealthy
        devices: list[Obj] = []
        # migStrategy none: the device plugin hands out a MIG-enabled GPU whole, as upstream
        whole_anyway = gpu.mig_enabled and bool(by_backing.get(gpu.uuid))
        if gpu.mig_enabled and not whole_anyway:
            for mig in sorted(gpu.mig_devices, key=lambda m: m.placement_start):
                devices.append(
                    _device(
                        mig.uuid,
                        mig.placement_start,
                        mig.placement_size,
                        by_backing.get(mig.uuid, []),
                        holders,
                        gpu_bad or mig.uuid in unhealthy,
                        mig.profile,
                    )
                )
        else:
            devices.append(_device(gpu.uuid, 0, 1, by_backing.get(gpu.uuid, []), holders, gpu_bad))
        dynamic = [d for d in dra if d.get("uuid") is None and d.get("parentUUID") == gpu.uuid]
        for use in dynamic:
            devices.append(
                {
                    "uuid": None,
                    "profile": use.get("profile"),
                    "start": int(use["start"]),
                    "size": int(use["size"]),
                    "resource": None,
                    "sharing": "none",
                    "unhealthy": gpu_bad,
                    "slots": [use.get("pod")],
                    "claim": use["claim"],
                }
            )
        for device in devices:
            held = dra_by_uuid.get(device["uuid"])
            if device["uuid"] in shares:  # one slot per share, every claim named
                uses = shares[device["uuid"]]
                device["claim"] = ", ".join(u["claim"] for u in uses)
                if not device["slots"]:
                    device["slots"] = [u.get("pod") for u in uses]
                    device["sharing"] = "none"
            elif held is not None:
                device["claim"] = held["claim"]
                if not device["slots"]:
                    device["slots"] = [held.get("pod")]
                    device["sharing"] = "none"
        partitioned = (gpu.mig_enabled and not whole_anyway) or bool(dynamic)
        if dynamic:  # the whole-GPU device stays drawn only when nothing partitions it
            devices = [d for d in devices if d["uuid"] != gpu.uuid or d.get("claim")]
        if partitioned:
            mode = "mig"
        elif not devices[0]["slots"]:
            mode = NOT_ADVERTISED
        elif devices[0]["sharing"] == "none":
            mode = "whole"
        else:
            mode = devices[0]["sharing"]
        cell: Obj = {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "product": gpu.product_name,
            "memoryMiB": gpu.memory_mib,
            "unhealthy": gpu_bad,
            "mode": mode,
            "slices": _slices(gpu) if partitioned else 0,
            "devices": devices,
        }
        if whole_anyway:
            layout = ", ".join(m.profile for m in gpu.mig_devices)
            cell["note"] = (
                f"MIG is on ({layout}) but the device plugin advertises the whole GPU "
                "(migStrategy none)"
            )
        if gpu.uuid in shares:
            cell["note"] = share_note(shares[gpu.uuid])
        if xids and xids.get(gpu.uuid):
            cell["xid"] = xids[gpu.uuid]
        cells.append(cell)
    return cells


def share_note(uses: Sequence[Obj]) -> str:
    """A shared GPU's word in the drawing: each claim and the memory its share holds."""
    parts = [f"{u['claim']} {(u.get('share') or {}).get('memory', '?')}" for u in uses]
    capacity = uses[0].get("capacity")
    return "DRA memory shares" + (f" of {capacity}" if capacity else "") + ": " + ", ".join(parts)


def gpus_in_use(cells: Sequence[Obj]) -> int:
    """GPUs with at least one pod on one of their devices."""
    return sum(1 for c in cells if any(s for d in c["devices"] for s in d["slots"]))
