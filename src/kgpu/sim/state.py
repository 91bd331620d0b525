"""The simulator's own records of pods and nodes, kept beside the object store.

The store holds every object in wire form and is what plugins read; these records hold what
the scheduler and the kubelets consult per decision (parsed requests, free resources, which
device belongs to which pod), so a decision never re-reads or re-parses the world.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kgpu.drivers.migmanager import MigManager
from kgpu.drivers.ownership import GpuOwnership
from kgpu.hardware.model import Machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.node.health import HealthState
from kgpu.node.model import NodeView
from kgpu.node.selectors import Taint
from kgpu.sim.plugins import NodeInfo
from kgpu.sim.podspec import PodRequirements

Obj = dict[str, Any]


@dataclass
class PodRecord:
    """One pod the simulator knows. ``obj`` is the simulator's copy of the store object."""

    key: str  # "namespace/name"
    obj: Obj
    req: PodRequirements
    seq: int  # creation order: the scheduling queue is FIFO
    owner_uid: str = ""
    owner_kind: str = ""
    gang: str = ""  # "namespace/mpijob" for MPIJob workers: placed all or none
    gang_size: int = 0
    node: str = ""
    phase: str = "Pending"
    admitted: bool = False  # the kubelet gave it its devices and started it
    run_seconds: float | None = None
    devices: dict[str, list[str]] = field(default_factory=dict)
    env: dict[str, dict[str, str]] = field(default_factory=dict)
    failed_epoch: int = -1  # epoch of its last failed scheduling attempt
    failed_at: float | None = None  # clock time the kubelet rejected it (admission error)
    last_message: str = ""
    created_at: float = 0.0  # clock time it was created (cluster-autoscaler's pod age)

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.key.split("/", 1)[1]

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass
class MpsDaemon:
    """The MPS control daemon the agent starts for one MPS-shared GPU on a node (upstream runs
    one per resource, over all of that resource's GPUs). Its clients are derived from which pods
    hold the GPU's replicas (:func:`kgpu.sim.nodeside.mps_clients`), never stored twice."""

    resource: str
    gpus: list[str]  # UUIDs it serves
    replicas: int
    active_thread_percentage: int
    pinned_memory_limit_mib: int
    pipe_directory: str


@dataclass
class NodeMig:
    """The node's MIG manager (kgpu's own, wired by :mod:`kgpu.sim.node_mig`) and when the
    simulator calls it again."""

    manager: MigManager
    seen: tuple[object, ...] = ()  # its inputs (configs, labels, ...) at the last call
    wake_at: float | None = None  # the clock time it asked to be called at (draining, retry)
    draining: bool = False
    changed: bool = False  # the last call wrote a label or an event, or withheld GPUs


@dataclass
class SimNode:
    """A simulated node: its hardware, what its device plugin advertises, what is bound."""

    name: str
    machine: Machine | None
    view: NodeView | None
    labels: dict[str, str]
    scenario_labels: dict[str, str]
    group: str = ""  # the node group (scenario ``nodes`` entry) it was created from
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    device_plugin: bool = True
    base_machine: Machine | None = None  # the hardware as the node was created
    hardware: SimulatedBackend | None = None  # its GPUs now: MIG changes go through it
    mig: NodeMig | None = None  # its MIG manager (MIG-capable GPUs only)
    health: HealthState = field(default_factory=HealthState)  # XIDs seen, per device
    xids: dict[str, int] = field(default_factory=dict)  # last XID per GPU UUID (metrics)
    ip: str = ""  # InternalIP, given once when the node joins
    capacity: dict[str, int] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)
    requested: dict[str, int] = field(default_factory=dict)
    pods: dict[str, PodRecord] = field(default_factory=dict)  # bound pods by key
    pod_objs: list[Obj] = field(default_factory=list)  # the same, for NodeInfo.pods
    allocations: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    device_owner: dict[str, str] = field(default_factory=dict)  # device id -> pod key
    mps: list[MpsDaemon] = field(default_factory=list)
    servicers: dict[str, Any] = field(default_factory=dict)  # resource -> device-plugin servicer
    # the node agent's one ledger of who holds each GPU (device plugin or DRA claim)
    ownership: GpuOwnership | None = None
    # the device plugin's list as the kubelet last took it in (ListAndWatch): what it admits
    # pods against until the next refresh
    listed: NodeView | None = None
    obj: Obj = field(default_factory=dict)  # the Node object as last written
    info: NodeInfo | None = None
    class_id: int = -1  # static-filter class (labels, taints, unschedulable)
    bucket: tuple[object, ...] | None = None  # scheduler bucket key

    @property
    def unhealthy(self) -> frozenset[str]:
        """GPU/MIG UUIDs the node's health code marked Unhealthy."""
        return self.health.unhealthy

    def free(self, resource: str) -> int:
        return self.allocatable.get(resource, 0) - self.requested.get(resource, 0)
