"""Extension points of the simulated cluster.

The simulator's core knows pods, nodes, extended resources and the device plugin. DRA claims,
ComputeDomains and metrics plug in through these protocols, so each feature lives in its own
package (``kgpu.dra``, ``kgpu.computedomain``, ``kgpu.metrics``) and the simulator only calls them
at the points where kube-scheduler, the kubelet and the controller manager would.

Objects are plain dicts in Kubernetes wire form; shared state lives in the simulator's
:class:`kgpu.store.MemoryStore` (claims, slices, classes, ComputeDomains, Nodes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kgpu.hardware.model import Machine
from kgpu.store import ObjectStore

Obj = dict[str, Any]


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event as ``kgpu sim`` reports it (``type`` Normal|Warning).

    ``count``, ``first_seen`` and ``last_seen`` (seconds on the simulated clock) are what the
    event recorder keeps: the same event again on the same object raises the count of the one
    already recorded, unless a different outcome came in between
    (:meth:`kgpu.sim.context.SimContext.record`). Plugins create events with the first four
    fields; the simulator fills the rest when it records them.
    """

    type: str
    reason: str
    object: str  # "Pod/default/name", "ComputeDomain/default/name", "Node/gpu-node-0"
    message: str
    count: int = 1
    first_seen: float | None = None
    last_seen: float | None = None


@dataclass
class NodeInfo:
    """What a scheduler plugin may read about a node when filtering."""

    name: str
    labels: Mapping[str, str]
    node: Obj  # the Node object (metadata, spec.taints, status.capacity/allocatable)
    pods: Sequence[Obj] = field(default_factory=list)  # pods bound to it now


@dataclass
class ContainerDevices:
    """What a kubelet plugin adds to one container when it prepares a pod's claims."""

    devices: list[str] = field(default_factory=list)  # CDI device ids or device paths
    env: dict[str, str] = field(default_factory=dict)


class SchedulerPlugin(Protocol):
    """A kube-scheduler plugin (PreFilter/Filter/Reserve/Unreserve), simplified.

    ``filter`` returns None when the pod fits the node, else the reason kube-scheduler would
    count in ``FailedScheduling`` (e.g. ``"cannot allocate all claims"``). ``reserve`` commits
    what ``filter`` found (writes claim allocations to the store); ``unreserve`` undoes it when a
    gang fails to place as a whole; ``release`` runs when a bound pod is deleted.
    """

    name: str

    def prefilter(self, pod: Obj, store: ObjectStore) -> str | None:
        """None, or a reason that makes the pod unschedulable on every node."""
        ...

    def filter(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> str | None: ...

    def reserve(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> None: ...

    def unreserve(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> None: ...

    def release(self, pod: Obj, store: ObjectStore) -> None: ...


@dataclass(frozen=True)
class PreBindResult:
    """What a scheduler plugin's optional ``prebind(pod, node_name, store)`` answers (run after
    Reserve, before the pod is bound): go on (the default), keep waiting (``waiting``; the cycle
    asks again each round, and at ``wake_at`` on the simulated clock), or fail with ``error``
    (the pod is unreserved and goes back to the queue)."""

    waiting: bool = False
    error: str = ""
    wake_at: float | None = None


class KubeletPlugin(Protocol):
    """Node-side work for a bound pod beyond the device plugin (a DRA driver's
    NodePrepareResources / NodeUnprepareResources). Returns, per container name, what the
    container gets."""

    name: str

    def register_node(self, node_name: str, machine: Machine | None, store: ObjectStore) -> None:
        """A node joined (or its hardware changed): publish its ResourceSlices for this driver,
        replacing stale ones of its pool."""
        ...

    def prepare(
        self, pod: Obj, node_name: str, store: ObjectStore
    ) -> dict[str, ContainerDevices]: ...

    def unprepare(self, pod: Obj, node_name: str, store: ObjectStore) -> None: ...


class Controller(Protocol):
    """A controller-manager loop: reconcile everything of its kinds once, return events.

    ``now`` is the simulator's clock in seconds. Controllers may create pods (DaemonSet-style
    daemons) in the store; the simulator schedules every pod it finds there.
    """

    name: str

    def reconcile(self, store: ObjectStore, now: float) -> list[Event]: ...
