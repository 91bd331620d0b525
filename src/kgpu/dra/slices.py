"""The ResourceSlices a node publishes for driver ``gpu.nvidia.com``, from its hardware snapshot:
the devices of :mod:`kgpu.dra.devices` packed into one pool named after the node, the way
NVIDIA's DRA driver packs them for the Kubernetes version it talks to.

* Static devices: one pool, GPUs in PCI bus order, each GPU's devices by name. Upstream puts
  them all in one slice; kgpu splits a pool that would exceed the 128 devices one slice may
  hold (``resourceSliceCount`` says how many make it complete).
* Dynamic MIG on Kubernetes 1.34 (``kubernetes_version`` < 1.35): one slice per GPU holding its
  counter set and the devices that consume it (1.34 requires both in one slice).
* Dynamic MIG on 1.35 and newer: a slice may hold devices or counter sets but not both, so the
  counter sets come first, up to 8 per slice, then one slice of devices per GPU.

:func:`slice_problems` and :func:`pool_problems` are the API server's and the scheduler's checks
of those limits, so what kgpu publishes can be tested against them for each version.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kgpu.dra.api import RESOURCE_API
from kgpu.dra.devices import DRIVER, GpuDevices, gpu_devices, gpus_in_order, taint_devices
from kgpu.hardware.model import Machine

#: The Kubernetes version slices are shaped for when the caller does not know the server's.
DEFAULT_KUBERNETES_VERSION = "1.35"
#: From this version a slice holds devices or counter sets, never both.
SPLIT_COUNTERS_SINCE = (1, 35)
#: v1 limits.
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_WITH_COUNTERS = 64  # 1.35+, when a device consumes counters (or has taints)
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_COUNTERS_PER_SLICE_1_34 = 32  # all counter sets of one slice together
MAX_COUNTERS_PER_DEVICE_1_34 = 32
MAX_DEVICE_COUNTERS_PER_SLICE_1_34 = 1024
MAX_COUNTER_SETS_PER_SLICE = 8  # 1.35+
MAX_COUNTERS_PER_SET = 32  # 1.35+
MAX_CONSUMPTIONS_PER_DEVICE = 2  # 1.35+

Obj = dict[str, Any]

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:[.+-].*)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def kubernetes_minor(version: str) -> tuple[int, int]:
    """``"1.35"``, ``"v1.35.2"``, ``"1.34.1-gke.100"`` -> (1, 35); ValueError otherwise."""
    found = _VERSION.match(version.strip())
    if found is None:
        raise ValueError(
            f"Kubernetes version {version!r}: expected <major>.<minor>, e.g. 1.35 or v1.35.2"
        )
    return int(found[1]), int(found[2])


def counters_apart(version: str) -> bool:
    """Whether counter sets go in slices of their own (Kubernetes 1.35 and newer)."""
    return kubernetes_minor(version) >= SPLIT_COUNTERS_SINCE


def _chunks(items: Sequence[Any], size: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


def slice_name(node_name: str, driver: str, index: int) -> str:
    """``<node>-<driver>-<i>``: publishing finds a pool's slices by these names."""
    return f"{node_name}-{driver}-{index}"


def _slice(
    node_name: str,
    driver: str,
    generation: int,
    index: int,
    count: int,
    devices: list[Obj],
    counter_sets: list[Obj],
) -> Obj:
    spec: Obj = {
        "driver": driver,
        "pool": {"name": node_name, "generation": generation, "resourceSliceCount": count},
        "nodeName": node_name,
    }
    if counter_sets:
        spec["sharedCounters"] = counter_sets
    if devices or not counter_sets:
        spec["devices"] = devices
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node_name, driver, index)},
        "spec": spec,
    }


def node_devices(machine: Machine, *, dynamic_mig: bool = False) -> list[GpuDevices]:
    """Every GPU's devices (and counter set), GPUs in upstream's order."""
    return [gpu_devices(machine, g, dynamic_mig=dynamic_mig) for g in gpus_in_order(machine)]


def resource_slices(
    machine: Machine,
    node_name: str,
    *,
    driver: str = DRIVER,
    generation: int = 1,
    max_devices_per_slice: int = MAX_DEVICES_PER_SLICE,
    partitionable: bool = False,
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
    unhealthy: Mapping[str, str] | None = None,
) -> list[Obj]:
    """The ResourceSlices of one node (see the module docstring for the shapes);
    ``partitionable`` turns dynamic MIG on, ``kubernetes_version`` is the API server's;
    ``unhealthy`` (GPU/MIG UUID -> reason, :mod:`kgpu.node.health`) taints those devices as
    NVIDIA's driver does (:func:`kgpu.dra.devices.taint_devices`)."""
    limit = max(1, min(max_devices_per_slice, MAX_DEVICES_PER_SLICE))
    per_gpu = node_devices(machine, dynamic_mig=partitionable)
    if unhealthy:
        per_gpu = [replace(g, devices=taint_devices(g.devices, unhealthy)) for g in per_gpu]
    groups: list[tuple[list[Obj], list[Obj]]] = []  # (devices, counter sets) per slice
    if not partitionable:
        flat = [d for g in per_gpu for d in g.devices]
        groups = [(chunk, []) for chunk in _chunks(flat, limit)]
    elif not counters_apart(kubernetes_version):
        groups = [(g.devices, [g.counter_set] if g.counter_set else []) for g in per_gpu]
    else:
        sets = [g.counter_set for g in per_gpu if g.counter_set]
        groups = [([], chunk) for chunk in _chunks(sets, MAX_COUNTER_SETS_PER_SLICE)]
        for g in per_gpu:
            size = min(limit, MAX_DEVICES_WITH_COUNTERS) if g.counter_set else limit
            groups += [(chunk, []) for chunk in _chunks(g.devices, size)]
    if not groups:
        groups = [([], [])]
    return [
        _slice(node_name, driver, generation, i, len(groups), devices, sets)
        for i, (devices, sets) in enumerate(groups)
    ]


# -- the API server's and the scheduler's checks ------------------------------------------------


def _too_many(path: str, n: int, most: int) -> str:
    return f"{path}: Too many: {n}: must have at most {most} items"


def _device_problems(device: Obj, where: str, apart: bool, local: dict[str, set[str]]) -> list[str]:
    out: list[str] = []
    name = str(device.get("name", ""))
    if not _DNS_LABEL.match(name):
        out.append(f"{where}.name: {name!r}: must be a DNS label")
    n = len(device.get("attributes") or {}) + len(device.get("capacity") or {})
    if n > MAX_ATTRIBUTES_AND_CAPACITIES:
        out.append(
            f"{where}: the total number of attributes and capacities must not exceed "
            f"{MAX_ATTRIBUTES_AND_CAPACITIES}"
        )
    uses = device.get("consumesCounters") or []
    if apart and len(uses) > MAX_CONSUMPTIONS_PER_DEVICE:
        out.append(_too_many(f"{where}.consumesCounters", len(uses), MAX_CONSUMPTIONS_PER_DEVICE))
    total = sum(len(u.get("counters") or {}) for u in uses)
    if not apart and total > MAX_COUNTERS_PER_DEVICE_1_34:
        out.append(
            f"{where}: the total number of counters must not exceed {MAX_COUNTERS_PER_DEVICE_1_34}"
        )
    for j, use in enumerate(uses):
        path = f"{where}.consumesCounters[{j}]"
        counters = use.get("counters") or {}
        if apart and len(counters) > MAX_COUNTERS_PER_SET:
            out.append(_too_many(f"{path}.counters", len(counters), MAX_COUNTERS_PER_SET))
        if apart:
            continue  # 1.35 checks references across the pool (pool_problems)
        cset = str(use.get("counterSet", ""))
        if cset not in local:
            out.append(
                f"{path}.counterSet: {cset!r}: must reference a counterSet defined in the "
                "ResourceSlice sharedCounters"
            )
            continue
        for counter in counters:
            if counter not in local[cset]:
                out.append(
                    f"{path}.counters: {counter!r}: must reference a counter defined in the "
                    "ResourceSlice sharedCounters"
                )
    return out


def slice_problems(slice_: Obj, kubernetes_version: str) -> list[str]:
    """What the API server of ``kubernetes_version`` refuses in one v1 ResourceSlice, among the
    rules about devices and counters (the schema itself is ``kubernetes-validate``'s job), in
    the API server's words."""
    apart = counters_apart(kubernetes_version)
    spec = slice_.get("spec") or {}
    devices = spec.get("devices") or []
    sets = spec.get("sharedCounters") or []
    out: list[str] = []
    if apart and devices and sets:
        out.append("spec: Invalid value: only one of devices and sharedCounters may be set")
    most = MAX_DEVICES_PER_SLICE
    if apart and any(d.get("consumesCounters") or d.get("taints") for d in devices):
        most = MAX_DEVICES_WITH_COUNTERS
    if len(devices) > most:
        out.append(_too_many("spec.devices", len(devices), most))
    local: dict[str, set[str]] = {}
    for i, cset in enumerate(sets):
        name = str(cset.get("name", ""))
        if name in local:
            out.append(f"spec.sharedCounters[{i}].name: Duplicate value: {name!r}")
        local[name] = set(cset.get("counters") or {})
        if apart and len(local[name]) > MAX_COUNTERS_PER_SET:
            out.append(_too_many(f"spec.sharedCounters[{i}].counters", len(local[name]), 32))
    if apart and len(sets) > MAX_COUNTER_SETS_PER_SLICE:
        out.append(_too_many("spec.sharedCounters", len(sets), MAX_COUNTER_SETS_PER_SLICE))
    shared = sum(len(c.get("counters") or {}) for c in sets)
    if not apart and shared > MAX_COUNTERS_PER_SLICE_1_34:
        out.append(
            "spec.sharedCounters: the total number of shared counters must not exceed "
            f"{MAX_COUNTERS_PER_SLICE_1_34}"
        )
    consumed = sum(
        len(u.get("counters") or {}) for d in devices for u in d.get("consumesCounters") or []
    )
    if not apart and consumed > MAX_DEVICE_COUNTERS_PER_SLICE_1_34:
        out.append(
            "spec.devices: the total number of counters in devices must not exceed "
            f"{MAX_DEVICE_COUNTERS_PER_SLICE_1_34}"
        )
    for i, device in enumerate(devices):
        out += _device_problems(device, f"spec.devices[{i}]", apart, local)
    return out


def pool_problems(slices: Sequence[Obj]) -> list[str]:
    """What makes one pool (the newest generation of its slices) invalid for the scheduler:
    a counter set defined twice, a device consuming a counter set or counter the pool does not
    define, a device name used twice."""
    out: list[str] = []
    sets: dict[str, set[str]] = {}
    for s in slices:
        for cset in (s.get("spec") or {}).get("sharedCounters") or []:
            name = str(cset.get("name", ""))
            if name in sets:
                out.append(f"counter set {name} is defined twice")
            sets[name] = set(cset.get("counters") or {})
    names: set[str] = set()
    for s in slices:
        for device in (s.get("spec") or {}).get("devices") or []:
            name = str(device.get("name", ""))
            if name in names:
                out.append(f"device {name} is published twice")
            names.add(name)
            for use in device.get("consumesCounters") or []:
                cset = str(use.get("counterSet", ""))
                if cset not in sets:
                    out.append(f"device {name} consumes from undefined counter set {cset}")
                    continue
                missing = sorted(set(use.get("counters") or {}) - sets[cset])
                if missing:
                    out.append(f"device {name} consumes undefined counters {missing} of {cset}")
    return out
