"""A ComputeDomain's daemons and status, as pure functions of its daemon pods and nodes.

A daemon is one live daemon pod's node: its address is the pod's IP (IMEX daemons talk over
the pod network, as upstream's), else the node's InternalIP, else a stable derived one
(simulated nodes); it is Ready when the pod runs Ready on a healthy node; its index in its
clique is stable while it stays and a newcomer takes the lowest free one (upstream's rule:
the index names the daemon, ``compute-domain-daemon-<index>``, in every peer's node list).
The domain is Ready when every daemon is Ready, they share one clique, and there are at least
``numNodes`` of them (at least one when ``numNodes`` is 0); kgpu's ``Ready`` condition says
why not, including why pending pods find no room.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kgpu.computedomain.api import ComputeDomain, DomainNode
from kgpu.computedomain.imex import node_ip, parse_ip
from kgpu.computedomain.members import domain_members, pending_pods
from kgpu.computedomain.placement import node_clique, node_healthy, place, room_view
from kgpu.computedomain.view import ClusterView

Obj = dict[str, Any]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


@dataclass(frozen=True)
class DomainStatus:
    status: str
    nodes: tuple[DomainNode, ...]
    reason: str
    message: str

    def to_obj(self) -> Obj:
        return {
            "status": self.status,
            "nodes": [n.to_obj() for n in self.nodes],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if self.status == "Ready" else "False",
                    "reason": self.reason,
                    "message": self.message,
                }
            ],
        }


def _daemon_ready(pod: Mapping[str, Any], node: Obj | None) -> bool:
    """A daemon pod runs on a healthy node and, when it reports readiness, is Ready (its
    readiness probe is the IMEX daemon's own check)."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or not node_healthy(node):
        return False
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status")) == "True"
    return True


def _assign_indexes(
    entries: list[tuple[str, str, str, str]], previous: Mapping[str, DomainNode]
) -> list[DomainNode]:
    """Stable per-clique indexes: a node keeps its index; newcomers take the lowest free one
    (upstream's rule: filling gaps keeps every other daemon's DNS name)."""
    taken: dict[str, set[int]] = {}
    index: dict[str, int] = {}
    for name, _ip, clique, _st in entries:
        prev = previous.get(name)
        used = taken.setdefault(clique, set())
        if prev and prev.clique_id == clique and prev.index >= 0 and prev.index not in used:
            index[name] = prev.index
            used.add(index[name])
    out = []
    for name, ip, clique, st in entries:
        if name not in index:
            used = taken.setdefault(clique, set())
            i = 0
            while i in used:
                i += 1
            used.add(i)
            index[name] = i
        out.append(DomainNode(name, ip, clique, index[name], st))
    return out


def daemon_entries(
    daemon_pods: Sequence[Mapping[str, Any]],
    node: Callable[[str], Obj | None],
    previous: Mapping[str, DomainNode],
) -> tuple[list[DomainNode], list[str]]:
    """The domain's daemons (one per node with a live daemon pod) and the nodes among them
    that failed. The address is the pod's IP (IMEX daemons talk over the pod network, as
    upstream's), else the node's InternalIP, else a stable derived one (simulated nodes)."""
    entries: list[tuple[str, str, str, str]] = []
    seen: set[str] = set()
    failed: list[str] = []
    live = [p for p in daemon_pods if not _meta(p).get("deletionTimestamp")]
    for pod in sorted(live, key=lambda p: str((p.get("spec") or {}).get("nodeName"))):
        name = str((pod.get("spec") or {}).get("nodeName") or "")
        if not name or name in seen:
            continue
        seen.add(name)
        obj = node(name)
        if not node_healthy(obj):
            failed.append(name if obj is not None else f"{name} (gone)")
        ip = parse_ip((pod.get("status") or {}).get("podIP")) or node_ip(obj, name)
        ready = _daemon_ready(pod, obj)
        entries.append((name, ip, node_clique(obj) or "", "Ready" if ready else "NotReady"))
    return _assign_indexes(entries, previous), failed


def previous_daemons(
    domain: ComputeDomain, cliques: Sequence[Mapping[str, Any]]
) -> dict[str, DomainNode]:
    """Where each node's index was last recorded: the ComputeDomainCliques, else the status."""
    out: dict[str, DomainNode] = {}
    for entry in domain.status.get("nodes") or []:
        parsed = DomainNode.from_obj(entry) if isinstance(entry, Mapping) else None
        if parsed is not None:
            out[parsed.name] = parsed
    for clique in cliques:
        for entry in clique.get("daemons") or []:
            parsed = DomainNode.from_obj(entry) if isinstance(entry, Mapping) else None
            if parsed is not None:
                out[parsed.name] = parsed
    return out


def decide_status(
    domain: ComputeDomain,
    listed: Sequence[DomainNode],
    failed: Sequence[str],
    pending_reason: str | None = None,
) -> DomainStatus:
    """The domain's status from its daemons (pure). ``pending_reason`` explains workload pods
    that cannot be placed (no room in the clique) and wins over the generic waiting message."""
    ready = [n for n in listed if n.status == "Ready"]
    cliques = sorted({n.clique_id for n in listed})
    want = max(domain.spec.num_nodes, 1)
    nodes = tuple(listed)
    if failed:
        return DomainStatus(
            "NotReady",
            nodes,
            "NodeNotReady",
            f"node {', '.join(failed)} of the domain is NotReady"
            + (f"; {pending_reason}" if pending_reason else ""),
        )
    if len(cliques) > 1:
        return DomainStatus(
            "NotReady",
            nodes,
            "CliqueMismatch",
            f"IMEX daemons run in more than one NVLink clique: {', '.join(cliques)}",
        )
    if pending_reason and len(ready) < want:
        return DomainStatus("NotReady", nodes, "Unschedulable", pending_reason)
    if listed and len(ready) == len(listed) and len(ready) >= want:
        return DomainStatus(
            "Ready",
            nodes,
            "DaemonsReady",
            f"{len(ready)} of {want} IMEX daemon(s) Ready in clique {cliques[0]}",
        )
    return DomainStatus(
        "NotReady", nodes, "WaitingForDaemons", f"{len(ready)} of {want} IMEX daemon(s) Ready"
    )


def domain_status(
    domain: ComputeDomain,
    daemon_pods: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    pending_reason: str | None = None,
) -> DomainStatus:
    """The domain's status from its IMEX daemon pods and their nodes (pure)."""
    listed, failed = daemon_entries(
        daemon_pods, lambda n: dict(nodes[n]) if n in nodes else None, previous_daemons(domain, [])
    )
    return decide_status(domain, listed, failed, pending_reason)


def pending_reason(domain: ComputeDomain, view: ClusterView) -> str | None:
    """Why the domain's pods that wait for a node cannot go anywhere, if clique room is the
    cause: with members, only their clique can take them (their pod affinity); without, a
    clique with room for ``numNodes`` of them."""
    pods = view.workload_pods(domain)
    waiting = pending_pods(domain, pods)
    if not waiting:
        return None
    members = domain_members(domain, pods, view.node)
    rooms = room_view(waiting[0], view.nodes(), view.pods_by_node())
    num_nodes = 0 if members else domain.spec.num_nodes
    return place(domain.ref, num_nodes, members, rooms).reason
