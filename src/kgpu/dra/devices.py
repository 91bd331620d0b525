"""The devices driver ``gpu.nvidia.com`` publishes for one GPU, in the model of NVIDIA's current
k8s-dra-driver-gpu (its ``gpu-kubelet-plugin`` on main, May 2026), so DeviceClasses and claims
written for it select the same devices here.

Names: ``gpu-<minor>`` for a full GPU, ``gpu-<parent minor>-mig-<profile without dots>-<GI
profile id>-<placement start>`` for a MIG device (``gpu-0-mig-1g10gb-me-20-3``), both by the
GPU's *minor* number (``/dev/nvidia<minor>``), not its NVML index.

Attributes (driver domain unless qualified): ``type`` (``gpu``/``mig``), ``uuid`` (a MIG device
only once it exists), ``productName``, ``brand``, ``architecture`` (go-nvlib's name, as upstream
publishes it: ``Hopper``, ``Ada Lovelace``; a CEL selector written for NVIDIA's driver compares
against those),
``cudaComputeCapability``/``driverVersion``/``cudaDriverVersion`` (versions), ``addressingMode``
(where the platform reports one), Kubernetes' standard ``resource.kubernetes.io/pciBusID`` and
``resource.kubernetes.io/pcieRoot``; MIG devices also ``parentUUID`` and ``profile``. Upstream
dropped ``index``, ``minor``, ``pcieBusID`` and ``parentIndex``; kgpu dropped them too. kgpu
adds ``cliqueID`` on GPUs of a multi-node NVLink fabric, so claims can ``matchAttribute`` on it.

Capacities: a full GPU has ``memory`` (bytes); a MIG device ``multiprocessors``,
``copyEngines``, ``decoders``, ``encoders``, ``jpegEngines``, ``ofaEngines`` and ``memory``, and a
MIG device that exists also ``memorySlice<N>: 1`` for each memory slice it covers.

Dynamic MIG (partitionable devices, KEP 4815): a GPU publishes its full device and every MIG
placement its geometry allows, all consuming one counter set per GPU,
``gpu-<minor>-counter-set``, holding one counter per capacity (``multiprocessors``,
``copy-engines``, ``decoders``, ``encoders``, ``jpeg-engines``, ``ofa-engines``, ``memory``) and
one ``memory-slice-<N>`` per memory slice. A placement consumes its capacities and its memory
slices, the full GPU all of them, so the scheduler never hands out overlapping placements nor
more engines than the GPU has. As upstream, a GPU takes part when it can change MIG mode
without a reset (Hopper and newer: full GPU and placements, whatever its mode now) or is an
Ampere GPU already in MIG mode (placements only); an Ampere GPU with MIG off publishes its full
GPU alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.dra.engines import Engines, profile_engines
from kgpu.dra.shares import DISABLED_POLICY, SharePolicy, share_device
from kgpu.hardware.mig import MigGeometry, MigProfile, geometry_for
from kgpu.hardware.model import Gpu, Machine, MigDevice
from kgpu.quantity import format_binary

DRIVER = "gpu.nvidia.com"
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
MIB = 2**20
#: kgpu's architecture -> go-nvlib's ``GetArchitectureAsString``, what upstream publishes.
ARCHITECTURE_NAMES = {
    "kepler": "Kepler",
    "maxwell": "Maxwell",
    "pascal": "Pascal",
    "volta": "Volta",
    "turing": "Turing",
    "ampere": "Ampere",
    "ada-lovelace": "Ada Lovelace",
    "hopper": "Hopper",
    "blackwell": "Blackwell",
    "rubin": "Rubin",
}

Obj = dict[str, Any]

#: MIG capacity name -> the shared counter that stands for it (upstream derives the counter name
#: from the capacity name: camelCase to a DNS label).
CAPACITY_COUNTERS: dict[str, str] = {
    "multiprocessors": "multiprocessors",
    "copyEngines": "copy-engines",
    "decoders": "decoders",
    "encoders": "encoders",
    "jpegEngines": "jpeg-engines",
    "ofaEngines": "ofa-engines",
    "memory": "memory",
}


def semver(text: str) -> str:
    """Version attributes as upstream normalises them (Masterminds semver): "570.124.06" ->
    "570.124.6", "12.8" -> "12.8.0"."""
    parts = [str(int(p)) for p in re.findall(r"\d+", text)[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _rfc1123(text: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", text.lower()).strip("-")


def profile_slug(profile: str) -> str:
    """A MIG profile as it appears in device names: ``1g.10gb+me`` -> ``1g10gb-me``."""
    return _rfc1123(profile.replace(".", ""))


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


def gpu_device_name(gpu: Gpu) -> str:
    return f"gpu-{gpu.minor}"


def mig_device_name(parent_minor: int, profile: str, profile_id: int, start: int) -> str:
    return f"gpu-{parent_minor}-mig-{profile_slug(profile)}-{profile_id}-{start}"


def counter_set_name(gpu: Gpu) -> str:
    return f"{gpu_device_name(gpu)}-counter-set"


@dataclass(frozen=True)
class MigName:
    """What a MIG device name says: the parent's minor, the GI profile id, the placement start;
    the profile slug for today's names, the placement size for the names drivers up to 25.8
    published (``gpu-<minor>-mig-<GI profile id>-<start>-<size>``)."""

    parent_minor: int
    profile_id: int
    start: int
    profile: str | None = None
    size: int | None = None


_LEGACY_MIG = re.compile(r"^gpu-(\d+)-mig-(\d+)-(\d+)-(\d+)$")
_MIG = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")


def parse_mig_name(name: str) -> MigName | None:
    """The parts of a MIG device name (today's or the 25.8 one); None for anything else."""
    legacy = _LEGACY_MIG.match(name)
    if legacy:
        minor, pid, start, size = (int(g) for g in legacy.groups())
        return MigName(minor, pid, start, size=size)
    found = _MIG.match(name)
    if found is None:
        return None
    return MigName(int(found[1]), int(found[3]), int(found[4]), profile=found[2])


def pci_bus_id(gpu: Gpu) -> str:
    """The bus id as upstream reads it (go-nvlib): NVML's ``00000000:1B:00.0`` lower-cased with
    the domain cut to four digits, ``0000:1b:00.0``: the extended BDF form Kubernetes'
    standard ``pciBusID`` attribute requires."""
    domain, sep, rest = gpu.pci_bus_id.lower().partition(":")
    return f"{domain[-4:].rjust(4, '0')}{sep}{rest}"


def architecture_name(gpu: Gpu) -> str:
    """The ``architecture`` attribute: go-nvlib's string for the GPU's architecture."""
    return ARCHITECTURE_NAMES.get(gpu.architecture, "Unknown")


def pcie_root(machine: Machine, gpu: Gpu) -> str:
    """The PCIe root complex the GPU hangs off (``pci<domain>:<bus>``): from
    ``machine.extra["pcie_roots"][index]`` when the hardware layer read it from sysfs (the real
    answer, also behind PCIe switches), else named after the GPU's own domain and bus, so GPUs
    that share a bus behind one PCIe switch (the pairs of a p4de.24xlarge) share a root and GPUs
    on buses of their own (DGX H100, GB200) do not."""
    root = machine.host_fact("pcie_roots", gpu.index)
    if root:
        return str(root)
    domain, _, rest = pci_bus_id(gpu).partition(":")
    return f"pci{domain}:{rest.partition(':')[0] or '00'}"


def addressing_mode(machine: Machine, gpu: Gpu) -> str | None:
    """NVML's memory addressing mode (``HMM``, ``ATS``, ``None``) where the hardware layer
    reports one (``machine.extra["addressing_modes"][index]``); platforms without one get no
    attribute, as upstream."""
    mode = machine.host_fact("addressing_modes", gpu.index)
    return str(mode) if mode else None


def _common(machine: Machine, gpu: Gpu) -> dict[str, Obj]:
    """Attributes a GPU and its MIG devices share."""
    attrs: dict[str, Obj] = {
        "productName": {"string": gpu.product_name},
        "brand": {"string": gpu.brand},
        "architecture": {"string": architecture_name(gpu)},
        "cudaComputeCapability": {"version": semver(gpu.cc)},
        "driverVersion": {"version": semver(machine.driver_version)},
        "cudaDriverVersion": {"version": semver(machine.cuda_version)},
    }
    mode = addressing_mode(machine, gpu)
    if mode is not None:
        attrs["addressingMode"] = {"string": mode}
    attrs[PCI_BUS_ID] = {"string": pci_bus_id(gpu)}
    attrs[PCIE_ROOT] = {"string": pcie_root(machine, gpu)}
    if gpu.fabric is not None:
        attrs["cliqueID"] = {"string": gpu.fabric.clique}
    return attrs


def _quantities(values: dict[str, int]) -> dict[str, Obj]:
    return {name: {"value": format_binary(v)} for name, v in values.items()}


def _mig_capacity(multiprocessors: int, engines: Engines | None, memory_mib: int) -> dict[str, int]:
    """A MIG device's capacities in upstream's order; engines only where their counts are known,
    multiprocessors only where the geometry gives them."""
    caps: dict[str, int] = {}
    if multiprocessors:
        caps["multiprocessors"] = multiprocessors
    if engines is not None:
        caps.update(
            copyEngines=engines.copy,
            decoders=engines.decoder,
            encoders=engines.encoder,
            jpegEngines=engines.jpeg,
            ofaEngines=engines.ofa,
        )
    caps["memory"] = memory_mib * MIB
    return caps


def _memory_slices(start: int, size: int) -> range:
    return range(start, start + size)


def gpu_device(machine: Machine, gpu: Gpu) -> Obj:
    """A full GPU, outside dynamic MIG."""
    return {
        "name": gpu_device_name(gpu),
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu.uuid},
            **_common(machine, gpu),
        },
        "capacity": _quantities({"memory": gpu.memory_mib * MIB}),
    }


def mig_device(machine: Machine, gpu: Gpu, mig: MigDevice) -> Obj:
    """A MIG device that exists (static MIG): its own UUID, and its memory slices as
    capacities."""
    geometry = geometry_for(gpu)
    profile = geometry.profiles.get(mig.profile) if geometry is not None else None
    multiprocessors = mig.multiprocessor_count or (
        _profile_multiprocessors(geometry, profile) if geometry and profile else 0
    )
    caps = _quantities(
        _mig_capacity(
            multiprocessors, profile_engines(gpu.product_name, mig.profile), mig.memory_mib
        )
    )
    for i in _memory_slices(mig.placement_start, mig.placement_size):
        caps[f"memorySlice{i}"] = {"value": "1"}
    pid = gi_profile_id(mig.profile, mig.placement_size, geometry)
    return {
        "name": mig_device_name(gpu.minor, mig.profile, pid, mig.placement_start),
        "attributes": {
            "type": {"string": "mig"},
            "uuid": {"string": mig.uuid},
            "parentUUID": {"string": gpu.uuid},
            "profile": {"string": mig.profile},
            **_common(machine, gpu),
        },
        "capacity": caps,
    }


def _profile_multiprocessors(geometry: MigGeometry, profile: MigProfile) -> int:
    return (
        profile.multiprocessor_count or profile.compute_slices * geometry.multiprocessors_per_slice
    )


def resets_for_mig(gpu: Gpu) -> bool:
    """Whether switching the GPU's MIG mode needs a GPU reset (Ampere), which a DRA driver
    never does: such a GPU stays as it is."""
    return gpu.architecture == "ampere"


def dynamic_mig_capable(gpu: Gpu) -> bool:
    """Upstream's rule for a GPU taking part in dynamic MIG: MIG capable, a geometry kgpu knows,
    and either MIG mode can change without a reset or MIG is already on."""
    return geometry_for(gpu) is not None and (not resets_for_mig(gpu) or gpu.mig_enabled)


@dataclass(frozen=True)
class GpuDevices:
    """What one GPU publishes: its devices in upstream's order (by name) and, in dynamic MIG,
    the counter set they consume."""

    devices: list[Obj]
    counter_set: Obj | None = None


def partition_capacities(gpu: Gpu) -> tuple[dict[str, dict[str, int]], dict[str, int]] | None:
    """(capacities per MIG profile, the GPU's counters) for dynamic MIG; None when the GPU has
    no geometry.

    The counters are upstream's: per capacity, the largest any profile has (which is the whole
    GPU's), except that no counter is ever less than what the most instances of one profile
    need, so a table with rows missing can never forbid a layout the GPU accepts (with complete
    tables the two agree). Engine capacities are published only when every profile's engines
    are known: a counter for them would otherwise refuse placements it cannot account for.
    """
    geometry = geometry_for(gpu)
    if geometry is None:
        return None
    profiles = list(geometry.profiles.values())
    engines = {p.name: profile_engines(gpu.product_name, p.name) for p in profiles}
    known = all(e is not None for e in engines.values())
    caps = {
        p.name: _mig_capacity(
            _profile_multiprocessors(geometry, p), engines[p.name] if known else None, p.memory_mib
        )
        for p in profiles
    }
    totals: dict[str, int] = {}
    for p in profiles:
        for name, value in caps[p.name].items():
            totals[name] = max(totals.get(name, 0), value, value * p.max_count)
    order = [n for n in CAPACITY_COUNTERS if n in totals]
    return caps, {n: totals[n] for n in order}


def _counters(caps: dict[str, int], slices: range) -> dict[str, Obj]:
    out = {CAPACITY_COUNTERS[n]: {"value": format_binary(v)} for n, v in caps.items()}
    out.update({f"memory-slice-{i}": {"value": "1"} for i in slices})
    return out


def _dynamic(machine: Machine, gpu: Gpu, geometry: MigGeometry) -> GpuDevices:
    found = partition_capacities(gpu)
    assert found is not None  # the caller checked the geometry
    caps, totals = found
    cset = counter_set_name(gpu)
    everything = _counters(totals, range(geometry.memory_slices))
    devices: list[Obj] = []
    if not resets_for_mig(gpu):
        devices.append(
            {
                "name": gpu_device_name(gpu),
                "attributes": {
                    "type": {"string": "gpu"},
                    "uuid": {"string": gpu.uuid},
                    **_common(machine, gpu),
                },
                "capacity": _quantities(totals),
                "consumesCounters": [{"counterSet": cset, "counters": dict(everything)}],
            }
        )
    for profile in geometry.profiles.values():
        pid = gi_profile_id(profile.name, profile.memory_slices, geometry)
        for start in profile.placements:
            devices.append(
                {
                    "name": mig_device_name(gpu.minor, profile.name, pid, start),
                    "attributes": {
                        "type": {"string": "mig"},
                        "parentUUID": {"string": gpu.uuid},
                        "profile": {"string": profile.name},
                        **_common(machine, gpu),
                    },
                    "capacity": _quantities(caps[profile.name]),
                    "consumesCounters": [
                        {
                            "counterSet": cset,
                            "counters": _counters(
                                caps[profile.name], _memory_slices(start, profile.memory_slices)
                            ),
                        }
                    ],
                }
            )
    devices.sort(key=lambda d: str(d["name"]))
    return GpuDevices(devices, {"name": cset, "counters": everything})


def gpu_devices(
    machine: Machine,
    gpu: Gpu,
    *,
    dynamic_mig: bool = False,
    shares: SharePolicy = DISABLED_POLICY,
) -> GpuDevices:
    """The devices of one GPU: with ``dynamic_mig`` and a capable GPU, the partitionable model;
    otherwise the GPU itself, or its existing MIG devices when it is in MIG mode (a GPU in MIG
    mode is not allocatable whole). ``shares`` publishes a whole GPU outside dynamic MIG for
    consumable shares (:mod:`kgpu.dra.shares`)."""
    geometry = geometry_for(gpu)
    if dynamic_mig and geometry is not None and dynamic_mig_capable(gpu):
        return _dynamic(machine, gpu, geometry)
    if gpu.mig_enabled:
        devices = [mig_device(machine, gpu, m) for m in gpu.mig_devices]
    else:
        devices = [share_device(gpu_device(machine, gpu), gpu.memory_mib, shares)]
    return GpuDevices(sorted(devices, key=lambda d: str(d["name"])))


def gpus_in_order(machine: Machine) -> list[Gpu]:
    """GPUs in the order upstream publishes them: by PCI bus id."""
    return sorted(machine.gpus, key=pci_bus_id)


#: NVIDIA's DRA driver taints (``NVMLDeviceHealthCheck``, cmd/gpu-kubelet-plugin/device_health.go)
TAINT_KEY_XID = "gpu.nvidia.com/xid"
TAINT_KEY_GPU_LOST = "gpu.nvidia.com/gpu-lost"


def health_taint(reason: str) -> Obj:
    """The device taint NVIDIA's driver publishes for one unhealthy device: a critical XID is
    ``gpu.nvidia.com/xid=<xid>:NoSchedule``, a GPU that stopped answering
    ``gpu.nvidia.com/gpu-lost:NoSchedule``. (``reason`` as :mod:`kgpu.node.health` writes it:
    ``xid 79``, ``nvml: ...``.)"""
    kind, _, number = reason.partition(" ")
    if kind == "xid" and number.isdigit():
        return {"key": TAINT_KEY_XID, "value": number, "effect": "NoSchedule"}
    return {"key": TAINT_KEY_GPU_LOST, "effect": "NoSchedule"}


def taint_devices(devices: list[Obj], unhealthy: Mapping[str, str]) -> list[Obj]:
    """``devices`` with the health taint of each one whose UUID is unhealthy, or whose parent
    GPU is (kgpu's health model: an event not attributed to a MIG instance hits the whole GPU,
    dynamic-MIG placements included). Untouched devices are returned as they are."""
    if not unhealthy:
        return devices
    out = []
    for dev in devices:
        attrs = dev.get("attributes") or {}
        reason = None
        for attr in ("uuid", "parentUUID"):
            value = (attrs.get(attr) or {}).get("string")
            if value is not None and value in unhealthy:
                reason = unhealthy[value]
                break
        if reason is None:
            out.append(dev)
            continue
        out.append({**dev, "taints": [*(dev.get("taints") or []), health_taint(reason)]})
    return out
