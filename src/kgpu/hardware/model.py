"""What a node has: a frozen snapshot of its GPUs.

Every decision kgpu makes (what to advertise, how to label, what to allocate) is a pure function
of one of these snapshots, so the NVML backend and the simulated backend both produce exactly this
shape and nothing downstream can tell them apart. Frozen dataclasses make a snapshot safe to share
between threads (the agent's gRPC servers, the health watcher, the metrics collector) and cheap to
compare when deciding whether anything changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

#: ``Machine.source`` of a snapshot read from real GPUs through NVML.
NVML_SOURCE = "nvml"


@dataclass(frozen=True)
class MigEngines:
    """The engines one MIG device has to itself or shares, as NVML's device attributes count
    them (``sharedCopyEngineCount``, ``sharedDecoderCount``...): what GFD labels
    ``nvidia.com/mig-<profile>.engines.*``."""

    copy: int = 0
    decoder: int = 0
    encoder: int = 0
    jpeg: int = 0
    ofa: int = 0


@dataclass(frozen=True)
class MigDevice:
    """A MIG device (GPU instance + compute instance) that exists on a parent GPU.

    ``placement_start``/``placement_size`` are in memory slices, as NVML reports GPU-instance
    placements; ``index`` is the device's position among its parent's MIG devices (what NVML's
    ``nvmlDeviceGetMigDeviceHandleByIndex`` takes). ``compute_slices`` are the GPU instance's
    slices and ``compute_instance_slices`` the compute instance's (0: the same, a full compute
    instance, which is all kgpu creates). ``engines`` is None when the source did not say (a
    snapshot recorded before kgpu read them, a profile without a published table).
    """

    parent_index: int
    parent_uuid: str
    index: int
    uuid: str
    profile: str  # e.g. "1g.10gb", "1g.10gb+me"
    gi_id: int
    ci_id: int
    placement_start: int
    placement_size: int
    memory_mib: int
    compute_slices: int
    multiprocessor_count: int = 0
    compute_instance_slices: int = 0
    engines: MigEngines | None = None

    @property
    def ci_slices(self) -> int:
        """Slices of the compute instance (GFD's ``slices.ci``)."""
        return self.compute_instance_slices or self.compute_slices


@dataclass(frozen=True)
class FabricInfo:
    """Multi-node NVLink fabric membership (GB200 NVL72 and the like).

    ``cluster_uuid`` + ``clique_id`` identify the NVLink domain; nodes that share both can join
    one ComputeDomain. ``state`` is NVML's registration state ("completed" once the fabric
    manager has registered the GPU).
    """

    cluster_uuid: str
    clique_id: int
    state: str = "completed"
    status: str = "success"

    @property
    def clique(self) -> str:
        """The value of the ``nvidia.com/gpu.clique`` label: ``<clusterUUID>.<cliqueId>``."""
        return f"{self.cluster_uuid}.{self.clique_id}"


@dataclass(frozen=True)
class NvLink:
    """Active NVLink connections from one GPU to a peer (another GPU index, or an NVSwitch)."""

    peer_index: int  # -1 for an NVSwitch
    links: int


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as discovered at snapshot time."""

    index: int
    uuid: str
    product_name: str  # NVML's name, e.g. "NVIDIA A100-SXM4-80GB"
    brand: str  # "Nvidia", "GeForce", "Tesla", ...
    architecture: str  # "turing", "ampere", "ada-lovelace", "hopper", "blackwell"
    compute_capability: tuple[int, int]
    memory_mib: int
    pci_bus_id: str  # "00000000:10:1C.0"
    minor: int
    numa_node: int | None = None
    nvlinks: tuple[NvLink, ...] = ()
    mig_capable: bool = False
    mig_enabled: bool = False
    mig_devices: tuple[MigDevice, ...] = ()
    fabric: FabricInfo | None = None
    multiprocessor_count: int = 0
    power_limit_w: float = 0.0

    @property
    def cc(self) -> str:
        """Compute capability as "major.minor"."""
        return f"{self.compute_capability[0]}.{self.compute_capability[1]}"

    @property
    def nvlink_peers(self) -> tuple[int, ...]:
        """GPU indices this GPU reaches over NVLink directly (NVSwitch peers are resolved by
        :meth:`Machine.nvlink_connected`)."""
        return tuple(sorted({link.peer_index for link in self.nvlinks if link.peer_index >= 0}))

    @property
    def has_nvswitch(self) -> bool:
        return any(link.peer_index < 0 for link in self.nvlinks)


@dataclass(frozen=True)
class Machine:
    """A node's GPUs plus the software versions that apply to all of them.

    ``profile`` names the simulated machine profile this came from ("nvml" for real hardware).
    ``source`` says where the snapshot was read: ``nvml`` for a real node's GPUs (live, or a
    snapshot recorded from them), ``simulated`` for a built-in profile. Decisions that must
    never pretend to change real hardware (applying a MIG layout) ask :attr:`real`.
    """

    profile: str
    driver_version: str  # "570.124.06"
    cuda_driver_version: tuple[int, int]  # (12, 8)
    gpus: tuple[Gpu, ...] = ()
    hostname: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    source: str = "simulated"

    @property
    def real(self) -> bool:
        """True when the GPUs are a real node's, as NVML reported them."""
        return self.source == NVML_SOURCE

    @property
    def cuda_version(self) -> str:
        return f"{self.cuda_driver_version[0]}.{self.cuda_driver_version[1]}"

    def gpu(self, index: int) -> Gpu:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        raise KeyError(f"no GPU with index {index} on {self.profile}")

    def by_uuid(self, uuid: str) -> Gpu | MigDevice:
        """Find a GPU or MIG device by UUID."""
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
            for mig in gpu.mig_devices:
                if mig.uuid == uuid:
                    return mig
        raise KeyError(f"no GPU or MIG device with UUID {uuid}")

    def nvlink_connected(self, a: int, b: int) -> int:
        """How many NVLinks join GPUs ``a`` and ``b``: direct links, or both GPUs' links when
        both sit on the same NVSwitch fabric (every pair is then fully connected)."""
        ga, gb = self.gpu(a), self.gpu(b)
        direct = sum(link.links for link in ga.nvlinks if link.peer_index == b)
        if direct:
            return direct
        if ga.has_nvswitch and gb.has_nvswitch:
            return min(
                sum(link.links for link in ga.nvlinks if link.peer_index < 0),
                sum(link.links for link in gb.nvlinks if link.peer_index < 0),
            )
        return 0

    def with_gpus(self, gpus: tuple[Gpu, ...]) -> Machine:
        return replace(self, gpus=gpus)

    def host_fact(self, key: str, index: int) -> Any:
        """``extra[key][index]``: a host fact the NVML backend recorded per GPU index
        (``pci_classes``, ``pcie_roots``, ``addressing_modes``, ``virtualization_modes``); a
        snapshot read back from JSON keys it by the index as a string. None when unknown."""
        table = self.extra.get(key) if self.extra else None
        if not isinstance(table, dict):
            return None
        return table.get(index, table.get(str(index)))
