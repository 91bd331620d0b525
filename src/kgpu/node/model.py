"""What a node advertises: the output of the pure node view.

The node view (``kgpu.node.view.build_node_view``) turns (hardware snapshot, device-plugin config,
mig-parted layout, node labels) into a :class:`NodeView`. The agent serves it over the kubelet's
device-plugin API, the simulator's kubelets allocate from it, the metrics exporter maps device ids
back to physical GPUs through it, and ``kgpu plan`` prints it. Keeping it a plain frozen value
means every one of those consumers sees the same answer for the same inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from kgpu.hardware.model import Machine
from kgpu.node.sharing import Sharing
from kgpu.node.sharing.mps import MpsLimits


@dataclass(frozen=True)
class AdvertisedDevice:
    """One device id the kubelet sees under one extended resource.

    ``id`` is what ListAndWatch sends and Allocate receives (``GPU-...``, ``MIG-...``, an index
    under ``deviceIDStrategy: index``, and ``<id>::<replica>`` for shared replicas).
    ``visible_id`` is what the container gets in ``NVIDIA_VISIBLE_DEVICES`` (replica suffix
    stripped). ``gpu_index``/``gpu_uuid`` always name the physical GPU behind the device, so a
    health event on a GPU can mark every replica and MIG device of it.
    """

    id: str
    resource: str
    visible_id: str
    gpu_index: int
    gpu_uuid: str
    mig_uuid: str | None = None
    mig_profile: str | None = None
    replica: int | None = None
    sharing: Sharing = Sharing.NONE
    healthy: bool = True
    numa_node: int | None = None
    mps: MpsLimits | None = None

    @property
    def backing_uuid(self) -> str:
        """UUID of the device a container actually touches (MIG device or whole GPU)."""
        return self.mig_uuid or self.gpu_uuid


@dataclass(frozen=True)
class ResourceView:
    """One extended resource (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``, a renamed one...)."""

    name: str
    devices: tuple[AdvertisedDevice, ...]
    sharing: Sharing = Sharing.NONE
    replicas: int = 1
    fail_requests_greater_than_one: bool = False

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def healthy_count(self) -> int:
        return sum(1 for d in self.devices if d.healthy)


@dataclass(frozen=True)
class GpuPlan:
    """What one physical GPU gets on this node, for ``kgpu plan`` to say plainly."""

    index: int
    uuid: str
    product: str
    mig_devices: tuple[str, ...]  # profile names of the MIG devices it was split into
    resources: tuple[str, ...]  # resource names its devices are advertised under
    sharing: Sharing
    replicas: int


@dataclass(frozen=True)
class Refusal:
    """A resource the device plugin refuses to serve on this node, with upstream's reason
    (the plugin exits; kgpu serves nothing for it and says why, and the node is still labeled
    as gpu-feature-discovery labels it)."""

    resource: str
    reason: str


@dataclass(frozen=True)
class NodeView:
    """Everything a node advertises, computed from snapshots only."""

    machine: Machine  # the hardware snapshot, MIG devices as they exist
    resources: tuple[ResourceView, ...]
    labels: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    gpus: tuple[GpuPlan, ...] = ()
    config_name: str | None = None  # the device-plugin config entry in force
    mig_config_name: str | None = None  # the mig-parted config in force
    mig_strategy: str = "none"
    refused: tuple[Refusal, ...] = ()  # what the device plugin refuses to serve, and why
    # why the desired MIG layout (mig_config_name) is not the hardware's ('' when it is); the
    # view never applies it: the MIG manager does
    mig_pending: str = ""
    device_list_strategy: tuple[str, ...] = ("envvar",)
    device_id_strategy: str = "uuid"
    pass_device_specs: bool = False  # Allocate passes the devices' nodes (passDeviceSpecs)
    shared_devices_allocation_policy: str = "distributed"  # or "packed"
    cdi_annotation_prefix: str = "cdi.k8s.io/"
    # what every Allocate response sets (NVIDIA_GDS=enabled with gdsEnabled...)
    allocate_envs: tuple[tuple[str, str], ...] = ()
    # (GPU or MIG UUID, why) of every Unhealthy device: the DRA driver taints them
    unhealthy: tuple[tuple[str, str], ...] = ()
    # (GPU UUID, gpuOwnership mode) of every GPU: which kubelet API may offer it while it is
    # free (:mod:`kgpu.node.ownership`); empty means every GPU is shared
    gpu_ownership: tuple[tuple[str, str], ...] = ()
    # publish nvidia.com/gfd.timestamp with the labels (GFD's default; flags.gfd.noTimestamp)
    gfd_timestamp: bool = True

    def resource(self, name: str) -> ResourceView:
        for res in self.resources:
            if res.name == name:
                return res
        raise KeyError(f"resource {name} is not advertised on this node")

    def counts(self) -> dict[str, int]:
        return {res.name: res.count for res in self.resources}

    def device(self, device_id: str) -> AdvertisedDevice:
        for res in self.resources:
            for dev in res.devices:
                if dev.id == device_id:
                    return dev
        raise KeyError(f"unknown device id {device_id}")

    def with_health(
        self, unhealthy_uuids: frozenset[str], reasons: Mapping[str, str] | None = None
    ) -> NodeView:
        """The same view with every device whose GPU or MIG UUID is listed marked Unhealthy
        (``reasons``: why, per UUID, kept in ``unhealthy`` for the DRA driver's taints)."""
        resources = tuple(
            replace(
                res,
                devices=tuple(
                    replace(
                        dev,
                        healthy=not (
                            dev.gpu_uuid in unhealthy_uuids
                            or (dev.mig_uuid is not None and dev.mig_uuid in unhealthy_uuids)
                        ),
                    )
                    for dev in res.devices
                ),
            )
            for res in self.resources
        )
        why = reasons or {}
        unhealthy = tuple(sorted((u, why.get(u, "unhealthy")) for u in unhealthy_uuids))
        return replace(self, resources=resources, unhealthy=unhealthy)


__all__ = [
    "AdvertisedDevice",
    "GpuPlan",
    "MpsLimits",
    "NodeView",
    "Refusal",
    "ResourceView",
    "Sharing",
]
