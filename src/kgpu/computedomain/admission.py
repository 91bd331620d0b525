"""Clique placement of a ComputeDomain's pods with objects the stock kube-scheduler understands:
the pod mutation of kgpu's admission webhook, as pure functions. ``kgpu controller`` serves it
to the API server; ``kgpu sim`` runs it as its API server's admission step.

A pod that uses a domain's channel claim (``resourceClaimTemplateName`` naming the domain's
channel template, or ``resourceClaimName`` naming a claim whose opaque config is the domain's
``ComputeDomainChannelConfig``) gets:

* the label ``resource.nvidia.com/computeDomainWorkload: <domain uid>`` (a label of its own:
  ``resource.nvidia.com/computeDomain`` marks the objects a domain owns, IMEX daemon pods
  included, and the controller deletes and counts those);
* a *required pod affinity* term to pods with that label, ``topologyKey: nvidia.com/gpu.clique``.
  kube-scheduler's InterPodAffinity then keeps every pod of the domain in the clique of the pods
  already placed (a replacement for a pod lost with its node included); the first pod, matching
  its own term, may start the group on any node that has a clique label;
* while the domain has no placed pod and ``numNodes`` > 1: a *required node affinity*
  ``nvidia.com/gpu.clique In [...]`` naming the cliques that have ``numNodes`` nodes with room
  for the pod (when that excludes some clique), so the first pod does not start the group in a
  clique too small for it. It is a snapshot of the cluster at admission: pods admitted together
  share it.

This module follows the contract of the controller's webhook (``mutate_pod`` returning a
:class:`Mutation` with RFC 6902 ``add`` operations; :func:`apply_patch` as the API server applies
them), so either implementation serves both callers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgpu.computedomain.api import (
    CHANNEL_CONFIG_KIND,
    CLIQUE_LABEL,
    DRIVER,
    WORKLOAD_LABEL,
    ComputeDomain,
)
from kgpu.computedomain.placement import node_clique, node_healthy, place, room_view

Obj = dict[str, Any]
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class Mutation:
    """What admission does to one pod: its domain (None: not a domain's pod), the JSON Patch
    operations, and the cliques its first-pod node affinity allows (empty: none added)."""

    domain: ComputeDomain | None
    patch: list[Obj] = field(default_factory=list)
    cliques: tuple[str, ...] = ()


def channel_claim_domain(claim: Mapping[str, Any]) -> str | None:
    """The uid of the domain whose channel ``claim`` is (its opaque channel config), else None."""
    devices = (claim.get("spec") or {}).get("devices") or {}
    for config in devices.get("config") or []:
        opaque = (config or {}).get("opaque") or {}
        params = opaque.get("parameters")
        if (
            opaque.get("driver") == DRIVER
            and isinstance(params, Mapping)
            and params.get("kind") == CHANNEL_CONFIG_KIND
            and params.get("domainID")
        ):
            return str(params["domainID"])
    return None


def domain_of_pod(
    pod: Mapping[str, Any],
    namespace: str,
    domains: Sequence[ComputeDomain],
    claim: Callable[[str], Mapping[str, Any] | None],
) -> ComputeDomain | None:
    """The domain whose channel the pod uses, among ``domains`` of its namespace that are not
    being deleted; ``claim(name)`` reads a ResourceClaim of the namespace."""
    live = [d for d in domains if d.namespace == namespace and not d.deleting]
    by_template = {d.spec.channel_template: d for d in live}
    by_uid = {d.uid: d for d in live}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(entry, Mapping):
            continue
        template = entry.get("resourceClaimTemplateName")
        if template and str(template) in by_template:
            return by_template[str(template)]
        name = entry.get("resourceClaimName")
        if name:
            found = claim(str(name))
            uid = channel_claim_domain(found) if found is not None else None
            if uid is not None and uid in by_uid:
                return by_uid[uid]
    return None


def clique_affinity_term(uid: str) -> Obj:
    """The pod affinity term that keeps a domain's pods in one NVLink clique."""
    return {"labelSelector": {"matchLabels": {WORKLOAD_LABEL: uid}}, "topologyKey": CLIQUE_LABEL}


def first_cliques(
    pod: Mapping[str, Any],
    domain: ComputeDomain,
    siblings: Sequence[Mapping[str, Any]],
    nodes: Callable[[], Sequence[Mapping[str, Any]]],
    pods_by_node: Callable[[], Mapping[str, Sequence[Mapping[str, Any]]]],
) -> tuple[str, ...]:
    """Where the domain's first pod may start: the cliques with ``numNodes`` nodes that have
    room for it, when that rules out some clique. Empty when a sibling already runs on a
    healthy node (the pod affinity decides), when ``numNodes`` < 2, or when no clique or every
    clique qualifies."""
    if domain.spec.num_nodes < 2:
        return ()
    every_node = nodes()
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in every_node}
    for other in siblings:
        where = (other.get("spec") or {}).get("nodeName")
        if where and node_healthy(by_name.get(str(where))):
            return ()
    decision = place(
        domain.ref, domain.spec.num_nodes, {}, room_view(pod, every_node, pods_by_node())
    )
    if not decision.allowed:
        return ()
    chosen = sorted({c for n in decision.allowed if (c := node_clique(by_name.get(n)))})
    every = {c for n in every_node if (c := node_clique(n))}
    return tuple(chosen) if set(chosen) != every else ()


def _escape(key: str) -> str:
    """A JSON Pointer reference token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _node_affinity_ops(affinity: Mapping[str, Any], cliques: Sequence[str]) -> list[Obj]:
    """Add ``clique In [cliques]`` to every required node selector term (terms are ORed, so the
    restriction must hold in each) or add the first term."""
    expression = {"key": CLIQUE_LABEL, "operator": "In", "values": list(cliques)}
    selector = {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
    node_affinity = affinity.get("nodeAffinity")
    if not isinstance(node_affinity, Mapping):
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {REQUIRED: selector}}]
    path = f"/spec/affinity/nodeAffinity/{REQUIRED}"
    required = node_affinity.get(REQUIRED)
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    if not isinstance(terms, list) or not terms:
        return [{"op": "add", "path": path, "value": selector}]
    ops: list[Obj] = []
    for i, term in enumerate(terms):
        exprs = term.get("matchExpressions") if isinstance(term, Mapping) else None
        where = f"{path}/nodeSelectorTerms/{i}/matchExpressions"
        if not isinstance(exprs, list):
            ops.append({"op": "add", "path": where, "value": [expression]})
        elif expression not in exprs:
            ops.append({"op": "add", "path": f"{where}/-", "value": expression})
    return ops


def placement_patch(pod: Mapping[str, Any], uid: str, cliques: Sequence[str] = ()) -> list[Obj]:
    """The operations adding the workload label, the clique pod affinity and (with ``cliques``)
    the first-pod node affinity; nothing already there is added twice and nothing the pod has is
    removed (its own terms stay, ANDed with these)."""
    ops: list[Obj] = []
    labels = (pod.get("metadata") or {}).get("labels")
    if not isinstance(labels, Mapping):
        ops.append({"op": "add", "path": "/metadata/labels", "value": {WORKLOAD_LABEL: uid}})
    elif labels.get(WORKLOAD_LABEL) != uid:
        ops.append(
            {"op": "add", "path": f"/metadata/labels/{_escape(WORKLOAD_LABEL)}", "value": uid}
        )
    term = clique_affinity_term(uid)
    affinity = (pod.get("spec") or {}).get("affinity")
    if not isinstance(affinity, Mapping):
        value: Obj = {"podAffinity": {REQUIRED: [term]}}
        if cliques:
            expression = {"key": CLIQUE_LABEL, "operator": "In", "values": list(cliques)}
            value["nodeAffinity"] = {
                REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
            }
        ops.append({"op": "add", "path": "/spec/affinity", "value": value})
        return ops
    pod_affinity = affinity.get("podAffinity")
    required = pod_affinity.get(REQUIRED) if isinstance(pod_affinity, Mapping) else None
    if not isinstance(pod_affinity, Mapping):
        ops.append({"op": "add", "path": "/spec/affinity/podAffinity", "value": {REQUIRED: [term]}})
    elif not isinstance(required, list):
        ops.append({"op": "add", "path": f"/spec/affinity/podAffinity/{REQUIRED}", "value": [term]})
    elif term not in required:
        ops.append({"op": "add", "path": f"/spec/affinity/podAffinity/{REQUIRED}/-", "value": term})
    if cliques:
        ops.extend(_node_affinity_ops(affinity, cliques))
    return ops


def mutate_pod(
    pod: Mapping[str, Any],
    namespace: str,
    domains: Sequence[ComputeDomain],
    *,
    claim: Callable[[str], Mapping[str, Any] | None] = lambda _: None,
    siblings: Callable[[ComputeDomain], Sequence[Mapping[str, Any]]] = lambda _: (),
    nodes: Callable[[], Sequence[Mapping[str, Any]]] = lambda: (),
    pods_by_node: Callable[[], Mapping[str, Sequence[Mapping[str, Any]]]] = lambda: {},
) -> Mutation:
    """Admission of one pod created in ``namespace``: its domain and the patch (empty for a pod
    that uses no domain's channel). ``siblings(domain)`` are the pods that may hold the domain's
    channel; ``nodes()`` and ``pods_by_node()`` the cluster's room, read only for a domain of
    ``numNodes`` > 1 whose pods are not placed yet."""
    domain = domain_of_pod(pod, namespace, domains, claim)
    if domain is None:
        return Mutation(None)
    cliques: tuple[str, ...] = ()
    if domain.spec.num_nodes > 1:
        cliques = first_cliques(pod, domain, siblings(domain), nodes, pods_by_node)
    return Mutation(domain, placement_patch(pod, domain.uid, cliques), cliques)


def apply_patch(obj: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> Obj:
    """``obj`` with JSON Patch ``add`` operations applied, as the API server applies a mutating
    webhook's answer; a new object (``obj`` is unchanged). Other operations are refused."""
    out: Obj = copy.deepcopy(dict(obj))
    for op in ops:
        if op.get("op") != "add":
            raise ValueError(f"unsupported JSON Patch operation {op.get('op')!r}")
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in str(op["path"]).split("/")[1:]]
        target: Any = out
        for token in tokens[:-1]:
            target = target[int(token)] if isinstance(target, list) else target[token]
        last, value = tokens[-1], copy.deepcopy(op["value"])
        if isinstance(target, list):
            if last == "-":
                target.append(value)
            else:
                target.insert(int(last), value)
        else:
            target[last] = value
    return out


__all__ = [
    "Mutation",
    "apply_patch",
    "channel_claim_domain",
    "clique_affinity_term",
    "domain_of_pod",
    "first_cliques",
    "mutate_pod",
    "placement_patch",
]
