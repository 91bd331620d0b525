"""ResourceSlices a node publishes for driver ``gpu.nvidia.com``, from its hardware snapshot.

Device names, attribute names and capacities follow NVIDIA's k8s-dra-driver-gpu so existing
DeviceClasses and claims work unchanged: ``gpu-<index>`` for a full GPU,
``gpu-<index>-mig-<profile without dots>-<GI profile id>-<placement start>`` for a MIG device
(upstream's canonical MIG name), attributes ``type`` (gpu|mig), ``uuid``, ``index``, ``minor``,
``productName``, ``brand``, ``architecture``, ``cudaComputeCapability``/``driverVersion``/
``cudaDriverVersion`` (versions), ``pcieBusID``, Kubernetes' standard
``resource.kubernetes.io/pcieRoot``, MIG ``profile``/``parentUUID``/``parentIndex``, and
capacities ``memory`` (bytes), MIG ``multiprocessors`` and ``memorySlice<N>``. kgpu adds
``cliqueID`` (``<clusterUUID>.<cliqueId>``) on GPUs that belong to a multi-node NVLink fabric,
so claims can ``matchAttribute`` on it.

With ``partitionable=True`` (beyond upstream's static MIG devices) every GPU that has a MIG
geometry publishes every possible MIG placement as a device consuming shared counters
(``gpu-<index>-counter-set`` with one ``memory-slice-<N>`` counter per memory slice, upstream's
KEP-4815 naming), and the full GPU consumes all of them: the scheduler then picks a MIG shape on
demand and can never hand out overlapping placements. As Kubernetes 1.35 requires, counter
sets are published in slices of their own (no devices), next to the slices of the devices that
consume them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from kgpu.hardware.mig import MigGeometry, geometry_for
from kgpu.hardware.model import Gpu, Machine, MigDevice

DRIVER = "gpu.nvidia.com"
API_VERSION = "resource.k8s.io/v1"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
#: v1 limits: devices per slice, and counters over all sets of one slice.
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_WITH_COUNTERS = 64
MAX_COUNTERS_PER_SLICE = 32

Obj = dict[str, Any]


def _semver(text: str) -> str:
    """Version attributes as upstream normalises them (Masterminds semver): "570.124.06" ->
    "570.124.6", "12.8" -> "12.8.0"."""
    parts = [str(int(p)) for p in re.findall(r"\d+", text)[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _rfc1123(text: str) -> str:
    text = re.sub(r"[^a-z0-9-]", "-", text.lower().replace(".", ""))
    return text.strip("-")


def gi_profile_id(profile: str, size: int, geometry: MigGeometry | None) -> int:
    """NVML's GPU-instance profile id (what ``nvidia-smi mig -lgip`` lists: 19 for 1g.10gb, 9
    for 3g.40gb, 0 for the whole GPU...). It depends on the memory fraction, the compute
    fraction and media extensions."""
    total = geometry.memory_slices if geometry else 8
    compute_total = geometry.compute_slices if geometry else 7
    eighths = size * 8 // max(total, 1)
    compute = int(profile.split("g.", 1)[0]) if "g." in profile else 1
    me = "+me" in profile
    if eighths >= 8:
        return 0
    if eighths >= 4:
        if compute == 3 and compute_total == 7:
            return 9
        return 6 if me else 5
    if eighths >= 2:
        if compute == 1 and compute_total == 7:
            return 15
        return 21 if me and compute_total == 4 else 14
    return 20 if me else 19


def mig_device_name(gpu_index: int, profile: str, profile_id: int, start: int) -> str:
    return f"gpu-{gpu_index}-mig-{_rfc1123(profile)}-{profile_id}-{start}"


def _pcie_root(machine: Machine, gpu: Gpu) -> str:
    """The PCIe root the GPU hangs off: ``machine.extra["pcie_roots"][index]`` when the hardware
    layer knows it (sysfs on a real node), else named after the GPU's PCI domain and bus
    (``pci<domain>:<bus>``), so GPUs that share a bus behind one PCIe switch (the pairs of a
    p4de.24xlarge) share a root and GPUs on buses of their own (DGX H100, GB200) do not."""
    roots = machine.extra.get("pcie_roots") or {}
    if gpu.index in roots:
        return str(roots[gpu.index])
    domain, _, rest = gpu.pci_bus_id.partition(":")
    bus = rest.partition(":")[0] or "00"
    return f"pci{domain[-4:].lower()}:{bus.lower()}"


def _common(machine: Machine, gpu: Gpu) -> dict[str, Obj]:
    attrs: dict[str, Obj] = {
        "productName": {"string": gpu.product_name},
        "brand": {"string": gpu.brand},
        "architecture": {"string": gpu.architecture},
        "cudaComputeCapability": {"version": _semver(gpu.cc)},
        "driverVersion": {"version": _semver(machine.driver_version)},
        "cudaDriverVersion": {"version": _semver(machine.cuda_version)},
        "pcieBusID": {"string": gpu.pci_bus_id},
        PCIE_ROOT: {"string": _pcie_root(machine, gpu)},
    }
    if gpu.fabric is not None:
        attrs["cliqueID"] = {"string": gpu.fabric.clique}
    return attrs


def _bytes(mib: int) -> str:
    return f"{mib}Mi"


def gpu_device(machine: Machine, gpu: Gpu) -> Obj:
    """The full-GPU device."""
    attrs: dict[str, Obj] = {
        "type": {"string": "gpu"},
        "uuid": {"string": gpu.uuid},
        "index": {"int": gpu.index},
        "minor": {"int": gpu.minor},
        **_common(machine, gpu),
    }
    return {
        "name": f"gpu-{gpu.index}",
        "attributes": attrs,
        "capacity": {"memory": {"value": _bytes(gpu.memory_mib)}},
    }


def _mig_device(
    machine: Machine,
    gpu: Gpu,
    *,
    profile: str,
    start: int,
    size: int,
    memory_mib: int,
    multiprocessors: int,
    geometry: MigGeometry | None,
    uuid: str | None,
    index: int | None,
) -> Obj:
    attrs: dict[str, Obj] = {"type": {"string": "mig"}}
    if uuid is not None:
        attrs["uuid"] = {"string": uuid}
    if index is not None:
        attrs["index"] = {"int": index}
    attrs.update(
        {
            "parentUUID": {"string": gpu.uuid},
            "parentIndex": {"int": gpu.index},
            "profile": {"string": profile},
            **_common(machine, gpu),
        }
    )
    capacity: dict[str, Obj] = {"memory": {"value": _bytes(memory_mib)}}
    if multiprocessors:
        capacity["multiprocessors"] = {"value": str(multiprocessors)}
    for i in range(start, start + size):
        capacity[f"memorySlice{i}"] = {"value": "1"}
    pid = gi_profile_id(profile, size, geometry)
    return {
        "name": mig_device_name(gpu.index, profile, pid, start),
        "attributes": attrs,
        "capacity": capacity,
    }


def mig_device(machine: Machine, gpu: Gpu, mig: MigDevice) -> Obj:
    """A MIG device that exists now (static MIG, as upstream publishes it)."""
    return _mig_device(
        machine,
        gpu,
        profile=mig.profile,
        start=mig.placement_start,
        size=mig.placement_size,
        memory_mib=mig.memory_mib,
        multiprocessors=mig.multiprocessor_count,
        geometry=geometry_for(gpu),
        uuid=mig.uuid,
        index=mig.index,
    )


def counter_set_name(gpu: Gpu) -> str:
    return f"gpu-{gpu.index}-counter-set"


def _slices_counters(start: int, size: int) -> dict[str, Obj]:
    return {f"memory-slice-{i}": {"value": "1"} for i in range(start, start + size)}


def partitionable_devices(machine: Machine, gpu: Gpu) -> tuple[Obj | None, list[Obj]]:
    """(counter set, devices) for one GPU in partitionable mode: the full GPU and every MIG
    placement its geometry allows, each consuming the memory slices it covers."""
    geometry = geometry_for(gpu)
    full = gpu_device(machine, gpu)
    if geometry is None:
        return None, [full]
    cset = counter_set_name(gpu)
    counters = _slices_counters(0, geometry.memory_slices)
    full["consumesCounters"] = [{"counterSet": cset, "counters": counters}]
    devices = [full]
    for profile in geometry.profiles.values():
        for start in profile.placements:
            dev = _mig_device(
                machine,
                gpu,
                profile=profile.name,
                start=start,
                size=profile.memory_slices,
                memory_mib=profile.memory_mib,
                multiprocessors=profile.compute_slices * geometry.multiprocessors_per_slice,
                geometry=geometry,
                uuid=None,
                index=None,
            )
            dev["consumesCounters"] = [
                {"counterSet": cset, "counters": _slices_counters(start, profile.memory_slices)}
            ]
            devices.append(dev)
    return {"name": cset, "counters": dict(counters)}, devices


def node_devices(machine: Machine) -> list[Obj]:
    """Static devices: each GPU without MIG as a full GPU, each existing MIG device (a GPU in
    MIG mode is not allocatable as a whole, as upstream)."""
    devices: list[Obj] = []
    for gpu in sorted(machine.gpus, key=lambda g: g.index):
        if gpu.mig_enabled:
            devices.extend(mig_device(machine, gpu, mig) for mig in gpu.mig_devices)
        else:
            devices.append(gpu_device(machine, gpu))
    return devices


def _chunks(items: list[Any], size: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def slice_name(node_name: str, driver: str, index: int) -> str:
    """``<node>-<driver>-<i>``: publishing finds a pool's slices by these names."""
    return f"{node_name}-{driver}-{index}"


def _slice(
    node_name: str, driver: str, generation: int, index: int, count: int, devices: list[Obj]
) -> Obj:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node_name, driver, index)},
        "spec": {
            "driver": driver,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": count},
            "nodeName": node_name,
            "devices": devices,
        },
    }


def resource_slices(
    machine: Machine,
    node_name: str,
    *,
    driver: str = DRIVER,
    generation: int = 1,
    max_devices_per_slice: int = MAX_DEVICES_PER_SLICE,
    partitionable: bool = False,
) -> list[Obj]:
    """The ResourceSlices of one node: one pool named after the node, split into several
    slices when it has more devices than one slice may hold (``resourceSliceCount`` says how
    many make the pool complete). Partitionable GPUs put their counter sets in counter-only
    slices and the devices consuming them in device slices (1.35's rule), within v1's limits on
    counters and devices per slice."""
    limit = max(1, min(max_devices_per_slice, MAX_DEVICES_PER_SLICE))
    groups: list[tuple[list[Obj], list[Obj]]] = []  # (counter sets, devices)
    if not partitionable:
        groups = [([], chunk) for chunk in _chunks(node_devices(machine), limit)]
    else:
        limit = min(limit, MAX_DEVICES_WITH_COUNTERS)
        sets: list[Obj] = []
        devs: list[Obj] = []
        n_counters = 0
        for gpu in sorted(machine.gpus, key=lambda g: g.index):
            cset, gdevs = partitionable_devices(machine, gpu)
            c = len(cset["counters"]) if cset else 0
            if devs and (len(devs) + len(gdevs) > limit or n_counters + c > MAX_COUNTERS_PER_SLICE):
                groups.append((sets, devs))
                sets, devs, n_counters = [], [], 0
            if cset:
                sets.append(cset)
            devs.extend(gdevs)
            n_counters += c
        if devs:
            groups.append((sets, devs))
    if not groups:
        groups = [([], [])]
    parts: list[tuple[list[Obj], list[Obj]]] = []  # one slice each: (counter sets, devices)
    for sets, devs in groups:
        if sets:
            parts.append((sets, []))
        parts.append(([], devs))
    out = []
    for i, (sets, devs) in enumerate(parts):
        s = _slice(node_name, driver, generation, i, len(parts), devs)
        if sets:
            s["spec"]["sharedCounters"] = sets
            del s["spec"]["devices"]
        out.append(s)
    return out
