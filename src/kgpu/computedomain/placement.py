"""Placement by NVLink clique: all nodes of one ComputeDomain share a clique, and a domain
spans at most ``numNodes`` nodes.

Pure functions over plain Node and Pod objects, so the admission webhook's choice of cliques for a
domain's first pod, the controller's status ("why is my domain not Ready?") and tests all reach
the same answer. The
room check is a conservative copy of kube-scheduler's fit (Ready, schedulable, taints,
nodeSelector, requested resources); the scheduler's own filters still decide the final fit, this
only decides which clique a domain can still grow into and explains it when none can.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kgpu.computedomain.api import CLIQUE_LABEL
from kgpu.node.selectors import first_untolerated, labels_match, parse_taints, parse_tolerations
from kgpu.quantity import parse_quantity

Obj = Mapping[str, Any]


def quantity(value: Any) -> Fraction:
    """A Kubernetes resource quantity (``100m``, ``4``, ``16Gi``, ``1e3``) as an exact number;
    :class:`kgpu.quantity.QuantityError` (a ValueError) when it is none."""
    return Fraction(parse_quantity(value))


def pod_requests(pod: Obj) -> dict[str, Fraction]:
    """Summed container requests; limits stand in for missing requests (as the API server
    defaults them), which is how extended resources given only as limits count."""
    total: dict[str, Fraction] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in merged.items():
            total[name] = total.get(name, Fraction(0)) + quantity(value)
    return total


def node_clique(node: Obj | None) -> str | None:
    """The node's NVLink clique (its ``nvidia.com/gpu.clique`` label), None when it has none."""
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(CLIQUE_LABEL) or None


def node_healthy(node: Obj | None) -> bool:
    """A node exists and its Ready condition (if reported) is True. Cordoning does not count:
    a cordoned node still runs its IMEX daemons."""
    if node is None:
        return False
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status")) == "True"
    return True


def node_ready(node: Obj | None) -> bool:
    """A node exists, is not cordoned, and its Ready condition (if reported) is True."""
    if node is None or (node.get("spec") or {}).get("unschedulable"):
        return False
    return node_healthy(node)


def pod_fits(pod: Obj, node: Obj, pods_on_node: Iterable[Obj]) -> bool:
    """Whether ``pod`` has room on ``node`` next to ``pods_on_node``."""
    if not node_ready(node):
        return False
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if not labels_match((spec.get("nodeSelector") or {}).items(), labels):
        return False
    taints = parse_taints((node.get("spec") or {}).get("taints"))
    if first_untolerated(parse_tolerations(spec.get("tolerations")), taints) is not None:
        return False
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    used: dict[str, Fraction] = {}
    for other in pods_on_node:
        for name, value in pod_requests(other).items():
            used[name] = used.get(name, Fraction(0)) + value
    for name, want in pod_requests(pod).items():
        if want <= 0:
            continue
        if name not in allocatable:
            if name in ("cpu", "memory", "ephemeral-storage"):
                continue  # nodes that do not report core resources are not limited by them
            return False
        if used.get(name, Fraction(0)) + want > quantity(allocatable[name]):
            return False
    return True


@dataclass(frozen=True)
class NodeRoom:
    """One node as placement sees it for one pod."""

    name: str
    clique: str | None
    has_room: bool


@dataclass(frozen=True)
class Placement:
    """Where a pod of a domain may go: ``allowed`` node names (None = anywhere), and ``reason``
    when no allowed node has room. ``clique`` is the domain's clique once it has one."""

    allowed: frozenset[str] | None
    reason: str | None = None
    clique: str | None = None


def room_view(
    pod: Obj, nodes: Sequence[Obj], pods_by_node: Mapping[str, Sequence[Obj]]
) -> list[NodeRoom]:
    out = []
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name", ""))
        out.append(
            NodeRoom(name, node_clique(node), pod_fits(pod, node, pods_by_node.get(name, ())))
        )
    return out


def place(
    domain_ref: str, num_nodes: int, members: Mapping[str, str | None], nodes: Sequence[NodeRoom]
) -> Placement:
    """Decide where the next pod of a domain may run.

    ``members`` are the nodes already hosting the domain's pods (name -> clique). With no
    members, any clique with at least ``numNodes`` nodes with room will do; with members, only
    their clique, and only their nodes once the domain spans ``numNodes`` nodes.
    """
    need = max(num_nodes, 1)
    by_name = {n.name: n for n in nodes}
    if members:
        cliques = sorted({c for c in members.values() if c})
        clique = cliques[0] if cliques else None
        names = ", ".join(sorted(members))
        if num_nodes and len(members) >= num_nodes:
            allowed = frozenset(members)
            if any(by_name[m].has_room for m in members if m in by_name):
                return Placement(allowed, None, clique)
            return Placement(
                allowed,
                f"ComputeDomain {domain_ref} already spans {len(members)} of {num_nodes} "
                f"node(s) ({names}) and none of them has room",
                clique,
            )
        in_clique = [n for n in nodes if clique is not None and n.clique == clique]
        allowed = frozenset(members) | frozenset(n.name for n in in_clique)
        if any(by_name[a].has_room for a in allowed if a in by_name):
            return Placement(allowed, None, clique)
        others = len([n for n in in_clique if n.name not in members])
        return Placement(
            allowed,
            f"no node of NVLink clique {clique} has room for ComputeDomain {domain_ref} "
            f"(it runs on {names}; {others} other node(s) in the clique, none with room)",
            clique,
        )
    counts: dict[str, int] = {}
    for n in nodes:
        if n.clique:
            counts.setdefault(n.clique, 0)
            if n.has_room:
                counts[n.clique] += 1
    if not counts:
        return Placement(
            frozenset(),
            f"no node has an NVLink clique (label {CLIQUE_LABEL}), "
            f"which ComputeDomain {domain_ref} needs",
        )
    eligible = {c for c, k in counts.items() if k >= need}
    if not eligible:
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        shown = ", ".join(f"clique {c}: {k} node(s)" for c, k in ranked[:5])
        more = f", and {len(ranked) - 5} more" if len(ranked) > 5 else ""
        return Placement(
            frozenset(),
            f"no NVLink clique has {need} node(s) with room for ComputeDomain {domain_ref}: "
            f"{shown}{more}",
        )
    return Placement(frozenset(n.name for n in nodes if n.clique in eligible))
