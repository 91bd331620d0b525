"""Node labels compatible with gpu-feature-discovery (GFD).

Names and values follow NVIDIA/k8s-device-plugin ``internal/lm``: the whole-GPU labels
(``nvidia.com/gpu.product``, ``.count``, ``.memory``, ``.family``, ``.compute.*``,
``.replicas``, ``.sharing-strategy``), the MIG labels per strategy (``single`` rewrites the
``nvidia.com/gpu.*`` labels to describe the MIG devices; ``mixed`` adds
``nvidia.com/mig-<profile>.*``), the CUDA driver/runtime versions, ``mig.capable``,
``mps.capable``, the fabric clique, and the host facts a real node's snapshot records:
``gpu.machine`` (the DMI product name, spaces as dashes; ``unknown`` on a real node without
one, as GFD), ``gpu.mode`` (the GPUs' PCI class, as GFD's labeler reads it: ``0x030000``
``graphics``, ``0x030200`` ``compute``, anything else or a mix ``unknown``) and ``vgpu.present``
(``true`` on a vGPU guest; absent otherwise, as GFD). ``gfd.timestamp`` is the agent's to add
when it publishes (:mod:`kgpu.agent.nfd`): a pure function of the snapshot has no clock.
Selectors that users already wrote against GFD's labels
(``nodeSelector: nvidia.com/gpu.product: NVIDIA-GeForce-RTX-2080-Ti``) keep working.

Computed from the finished node view so the labels always agree with what is advertised.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kgpu.config.fields import is_dns_subdomain
from kgpu.config.plugin import DEFAULT_PLUGIN_CONFIG, DevicePluginConfig
from kgpu.hardware.model import Gpu, Machine, MigDevice
from kgpu.node.model import AdvertisedDevice, ResourceView, Sharing
from kgpu.node.sharing import MODES

GPU_RESOURCE = "nvidia.com/gpu"
MAX_LABEL_VALUE = 63

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_UNSAFE = re.compile(r"[^A-Za-z0-9\-_. ]")


def is_valid_label_key(key: str) -> bool:
    """Kubernetes' rule: optional DNS-subdomain prefix (<= 253) '/' name (<= 63)."""
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns_subdomain(prefix):
        return False
    return 0 < len(name) <= MAX_LABEL_VALUE and bool(_LABEL_NAME.fullmatch(name))


def is_valid_label_value(value: str) -> bool:
    return len(value) <= MAX_LABEL_VALUE and bool(_LABEL_VALUE.fullmatch(value))


def sanitize_value(value: str) -> str:
    """GFD's ``sanitise`` (drop unsafe characters, runs of spaces become one dash), then cut to
    a valid label value."""
    cleaned = "-".join(_UNSAFE.sub("", value).split())
    cleaned = cleaned[:MAX_LABEL_VALUE]
    return cleaned.strip("-_.")


def arch_family(major: int, minor: int) -> str:
    """GFD's ``getArchFamily``, extended with Blackwell."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    return {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper"}.get(
        major, "blackwell" if major in (10, 12) else "undefined"
    )


def mig_resource_name(profile: str) -> str:
    """``nvidia.com/mig-<profile>`` with ``+`` turned into ``.``, as the device plugin names it."""
    return f"nvidia.com/mig-{profile.replace('+', '.')}"


def _product(parts: Sequence[str], shared: bool) -> str:
    pieces = ["-".join(_UNSAFE.sub("", p).split()) for p in parts if p]
    if shared:
        pieces.append("SHARED")
    return sanitize_value("-".join(pieces))


class _Usage:
    """How the devices backed by one GPU or MIG device are advertised."""

    __slots__ = ("renamed", "replicas", "sharing")

    def __init__(self) -> None:
        self.replicas = 0
        self.sharing = Sharing.NONE
        self.renamed = False


def _usage(resources: Sequence[ResourceView], mig_strategy: str) -> dict[str, _Usage]:
    out: dict[str, _Usage] = {}
    for res in resources:
        for dev in res.devices:
            use = out.get(dev.backing_uuid)
            if use is None:
                use = out[dev.backing_uuid] = _Usage()
            use.replicas += 1
            use.sharing = dev.sharing
            use.renamed = use.renamed or dev.resource != _base_resource(dev, mig_strategy)
    return out


def _base_resource(dev: AdvertisedDevice, mig_strategy: str) -> str:
    if dev.mig_profile is None or mig_strategy != "mixed":
        return GPU_RESOURCE
    return mig_resource_name(dev.mig_profile)


def _shared_labels(
    prefix: str, use: _Usage | None, count: int, product: list[str]
) -> dict[str, str]:
    replicas = use.replicas if use else 1
    shared = replicas > 1
    return {
        f"{prefix}.product": _product(product, shared and not (use and use.renamed)),
        f"{prefix}.count": str(count),
        f"{prefix}.replicas": str(replicas),
        f"{prefix}.sharing-strategy": str(use.sharing) if use and shared else "none",
    }


def _mig_attributes(prefix: str, mig: MigDevice) -> dict[str, str]:
    """GFD's MIG device attributes: memory, SMs, GPU- and compute-instance slices and the
    engines (copy, decoder, encoder, JPEG, OFA), all as NVML's device attributes give them;
    engine labels are left out when the hardware model does not know the counts."""
    labels = {
        f"{prefix}.memory": str(mig.memory_mib),
        f"{prefix}.multiprocessors": str(mig.multiprocessor_count),
        f"{prefix}.slices.gi": str(mig.compute_slices),
        f"{prefix}.slices.ci": str(mig.ci_slices),
    }
    if mig.engines is not None:
        labels.update(
            {
                f"{prefix}.engines.copy": str(mig.engines.copy),
                f"{prefix}.engines.decoder": str(mig.engines.decoder),
                f"{prefix}.engines.encoder": str(mig.engines.encoder),
                f"{prefix}.engines.jpeg": str(mig.engines.jpeg),
                f"{prefix}.engines.ofa": str(mig.engines.ofa),
            }
        )
    return labels


def _version_labels(machine: Machine) -> dict[str, str]:
    parts = machine.driver_version.split(".")
    major = parts[0] if parts else ""
    minor = parts[1] if len(parts) > 1 else ""
    rev = parts[2] if len(parts) > 2 else ""
    cuda_major, cuda_minor = machine.cuda_driver_version
    return {
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver-version.full": machine.driver_version,
        "nvidia.com/cuda.runtime.major": str(cuda_major),
        "nvidia.com/cuda.runtime.minor": str(cuda_minor),
        "nvidia.com/cuda.runtime-version.major": str(cuda_major),
        "nvidia.com/cuda.runtime-version.minor": str(cuda_minor),
        "nvidia.com/cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
    }


def _whole_gpu_labels(
    machine: Machine, usage: dict[str, _Usage], mig_strategy: str
) -> dict[str, str]:
    # GFD labels one product: whole GPUs win over MIG-enabled ones, which GFD labels without
    # sharing (replicas 0, plain product) under every MIG strategy, even when the device plugin
    # advertises them whole (strategy none) and replicates them.
    whole = [g for g in machine.gpus if not g.mig_enabled]
    if not whole:
        whole = list(machine.gpus)
    first: Gpu = whole[0]
    count = sum(1 for g in machine.gpus if g.product_name == first.product_name)
    labels: dict[str, str]
    if first.mig_enabled:
        labels = {
            "nvidia.com/gpu.product": _product([first.product_name], False),
            "nvidia.com/gpu.count": str(count),
            "nvidia.com/gpu.replicas": "0",
            "nvidia.com/gpu.sharing-strategy": "none",
        }
    else:
        labels = _shared_labels(GPU_RESOURCE, usage.get(first.uuid), count, [first.product_name])
    if first.memory_mib:
        labels["nvidia.com/gpu.memory"] = str(first.memory_mib)
    major, minor = first.compute_capability
    if major:
        labels["nvidia.com/gpu.family"] = arch_family(major, minor)
        labels["nvidia.com/gpu.compute.major"] = str(major)
        labels["nvidia.com/gpu.compute.minor"] = str(minor)
    return labels


def _single_labels(machine: Machine, usage: dict[str, _Usage]) -> dict[str, str]:
    enabled = [g for g in machine.gpus if g.mig_enabled]
    if not enabled:
        return {}
    migs = [m for g in enabled for m in g.mig_devices]
    profiles = {m.profile for m in migs}
    valid = (
        all(g.mig_devices for g in enabled)
        and len(enabled) == len(machine.gpus)
        and len(profiles) == 1
    )
    name = enabled[0].product_name
    if not valid:
        return {
            "nvidia.com/gpu.product": _product([name, "MIG", "INVALID"], False),
            "nvidia.com/gpu.count": "0",
            "nvidia.com/gpu.replicas": "0",
            "nvidia.com/gpu.sharing-strategy": "",
            "nvidia.com/gpu.memory": "0",
        }
    mig = migs[0]
    labels = _shared_labels(
        GPU_RESOURCE, usage.get(mig.uuid), len(migs), [name, "MIG", mig.profile]
    )
    labels.update(_mig_attributes(GPU_RESOURCE, mig))
    return labels


def _mixed_labels(machine: Machine, usage: dict[str, _Usage]) -> dict[str, str]:
    by_profile: dict[str, list[tuple[Gpu, MigDevice]]] = {}
    for gpu in machine.gpus:
        if gpu.mig_enabled:
            for mig in gpu.mig_devices:
                by_profile.setdefault(mig.profile, []).append((gpu, mig))
    labels: dict[str, str] = {}
    for profile, members in by_profile.items():
        prefix = mig_resource_name(profile)
        gpu, mig = members[0]
        labels.update(
            _shared_labels(
                prefix, usage.get(mig.uuid), len(members), [gpu.product_name, "MIG", profile]
            )
        )
        labels.update(_mig_attributes(prefix, mig))
    return labels


def _clique(machine: Machine) -> str | None:
    fabrics = {g.fabric.clique for g in machine.gpus if g.fabric is not None}
    return next(iter(fabrics)) if len(fabrics) == 1 else None


#: GFD's ``newGPUModeLabeler``: the PCI class (as sysfs writes it) -> ``nvidia.com/gpu.mode``.
GPU_MODES = {"0x030000": "graphics", "0x030200": "compute"}


def _host_labels(machine: Machine) -> dict[str, str]:
    out: dict[str, str] = {}
    machine_type = machine.extra.get("machine_type") if machine.extra else None
    if isinstance(machine_type, str) and machine_type:
        out["nvidia.com/gpu.machine"] = sanitize_value(machine_type.replace(" ", "-"))
    elif machine.real:  # GFD could not read machineTypeFile
        out["nvidia.com/gpu.machine"] = "unknown"
    classes = [machine.host_fact("pci_classes", g.index) for g in machine.gpus]
    if any(classes):  # a snapshot that recorded them (every real node's since issue 22)
        kinds = {str(c).lower() for c in classes}  # GPUs of different classes: unknown
        mode = GPU_MODES.get(kinds.pop(), "unknown") if len(kinds) == 1 else "unknown"
        out["nvidia.com/gpu.mode"] = mode
    if any(machine.host_fact("virtualization_modes", g.index) == "vgpu" for g in machine.gpus):
        out["nvidia.com/vgpu.present"] = "true"
    return out


def node_labels(
    machine: Machine,
    resources: Sequence[ResourceView],
    mig_strategy: str,
    config: DevicePluginConfig = DEFAULT_PLUGIN_CONFIG,
) -> dict[str, str]:
    """The labels gpu-feature-discovery would put on this node (plus ``gpu.present``) under the
    device-plugin ``config`` in force."""
    if not machine.gpus:
        return {}
    usage = _usage(resources, mig_strategy)
    labels: dict[str, str] = {"nvidia.com/gpu.present": "true"}
    labels.update(_version_labels(machine))
    labels["nvidia.com/mig.capable"] = (
        "true" if any(g.mig_capable for g in machine.gpus) else "false"
    )
    for mode in MODES:
        labels.update(mode.node_labels(config))
    labels.update(_whole_gpu_labels(machine, usage, mig_strategy))
    if mig_strategy == "single":
        labels["nvidia.com/mig.strategy"] = "single"
        labels.update(_single_labels(machine, usage))
    elif mig_strategy == "mixed":
        labels["nvidia.com/mig.strategy"] = "mixed"
        labels.update(_mixed_labels(machine, usage))
    clique = _clique(machine)
    if clique:
        labels["nvidia.com/gpu.clique"] = sanitize_value(clique)
    labels.update(_host_labels(machine))
    return {k: v for k, v in labels.items() if is_valid_label_key(k) and is_valid_label_value(v)}
