"""Clique placement with objects the stock kube-scheduler understands: the pod mutation of
kgpu's admission webhook, as pure functions (the ``kgpu controller`` webhook serves them; the
simulator's admission step is meant to run the same code).

A pod that uses a ComputeDomain's channel claim (``resourceClaimTemplateName`` naming the
domain's channel template, or ``resourceClaimName`` naming a ResourceClaim whose opaque config
is the domain's ``ComputeDomainChannelConfig``) gets:

- the label ``resource.nvidia.com/computeDomainWorkload=<domain uid>``;
- a *required pod affinity* to pods with that label, ``topologyKey: nvidia.com/gpu.clique``.
  kube-scheduler's InterPodAffinity then puts every pod of the domain into the clique of the
  pods already placed; the first pod of the group goes anywhere with room (the scheduler lets
  a pod that matches its own affinity term start a group), and nodes without a clique label are
  never chosen;
- only when the domain has no placed pod yet and ``numNodes`` > 1: a *required node affinity*
  ``nvidia.com/gpu.clique In [cliques with numNodes nodes that have room for this pod]`` (when
  that is some cliques and not all), so the first pod does not start the group in a clique too
  small for it. This is a snapshot taken at admission: pods admitted together share it.

What this cannot do (docs/computedomains.md says it too): the choice of the first clique is
made once, at admission, from that moment's room; if the cliques chosen fill before the pods
bind, or no clique had room for ``numNodes`` pods then, the group waits (Pending, with the
scheduler's "didn't match pod affinity rules") even when room appears elsewhere later, until
its pods are recreated. ``numNodes`` 0 (upstream's recommended default) gives no group size, so
the first pod's clique is wherever the scheduler puts it. Nothing caps a domain at
``numNodes`` nodes (upstream does not either).
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
from kgpu.computedomain.members import domain_members
from kgpu.computedomain.placement import node_clique, place, room_view

Obj = dict[str, Any]
AFFINITY = "requiredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True)
class Mutation:
    """What admission does to one pod: the JSON Patch (RFC 6902) operations, the domain it
    belongs to, the cliques its first-pod node affinity allows (empty: none added)."""

    domain: ComputeDomain | None
    patch: list[Obj] = field(default_factory=list)
    cliques: tuple[str, ...] = ()


def channel_claim_domain(claim: Mapping[str, Any]) -> str | None:
    """The domain uid of a ResourceClaim that is a ComputeDomain channel claim, else None."""
    devices = (claim.get("spec") or {}).get("devices") or {}
    for config in devices.get("config") or []:
        opaque = (config or {}).get("opaque") or {}
        params = opaque.get("parameters") or {}
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
    """The domain whose channel the pod uses, if any. ``domains`` are those of the pod's
    namespace; ``claim(name)`` reads a ResourceClaim of that namespace (None if absent)."""
    mine = [d for d in domains if d.namespace == namespace and not d.deleting]
    by_template = {d.spec.channel_template: d for d in mine}
    by_uid = {d.uid: d for d in mine}
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
            if uid in by_uid:
                return by_uid[str(uid)]
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
    """The cliques the domain's first pod may start in: those with ``numNodes`` nodes with
    room for it, when that excludes some clique. Empty when the domain has placed pods (their
    affinity decides), ``numNodes`` < 2, no clique qualifies, or every clique does."""
    if domain.spec.num_nodes < 2:
        return ()
    placed = [p for p in siblings if (p.get("spec") or {}).get("nodeName")]
    all_nodes = nodes()
    by_name = {str((n.get("metadata") or {}).get("name")): n for n in all_nodes}
    if domain_members(domain, placed, lambda name: by_name.get(name)):
        return ()
    decision = place(
        domain.ref, domain.spec.num_nodes, {}, room_view(pod, all_nodes, pods_by_node())
    )
    if not decision.allowed:
        return ()
    chosen = {node_clique(by_name[name]) for name in decision.allowed if name in by_name}
    every = {node_clique(n) for n in all_nodes} - {None}
    picked = tuple(sorted(c for c in chosen if c))
    return picked if set(picked) != every else ()


def _escape(key: str) -> str:
    """A JSON Pointer reference token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def placement_patch(pod: Mapping[str, Any], uid: str, cliques: Sequence[str] = ()) -> list[Obj]:
    """JSON Patch operations adding the workload label, the clique pod affinity and (with
    ``cliques``) the first-pod node affinity to ``pod``; nothing already there is added twice,
    and nothing the pod has is removed (its own affinity terms stay, AND-ed with these)."""
    ops: list[Obj] = []
    meta = pod.get("metadata") or {}
    labels = meta.get("labels")
    if not isinstance(labels, Mapping):
        ops.append({"op": "add", "path": "/metadata/labels", "value": {WORKLOAD_LABEL: uid}})
    elif labels.get(WORKLOAD_LABEL) != uid:
        ops.append(
            {"op": "add", "path": f"/metadata/labels/{_escape(WORKLOAD_LABEL)}", "value": uid}
        )

    term = clique_affinity_term(uid)
    expression = {"key": CLIQUE_LABEL, "operator": "In", "values": list(cliques)}
    spec = pod.get("spec") or {}
    affinity = spec.get("affinity")
    if not isinstance(affinity, Mapping):
        value: Obj = {"podAffinity": {AFFINITY: [term]}}
        if cliques:
            value["nodeAffinity"] = {
                AFFINITY: {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
            }
        ops.append({"op": "add", "path": "/spec/affinity", "value": value})
        return ops

    pod_affinity = affinity.get("podAffinity")
    if not isinstance(pod_affinity, Mapping):
        ops.append({"op": "add", "path": "/spec/affinity/podAffinity", "value": {AFFINITY: [term]}})
    else:
        required = pod_affinity.get(AFFINITY)
        path = f"/spec/affinity/podAffinity/{AFFINITY}"
        if not isinstance(required, list):
            ops.append({"op": "add", "path": path, "value": [term]})
        elif term not in required:
            ops.append({"op": "add", "path": f"{path}/-", "value": term})

    if not cliques:
        return ops
    node_affinity = affinity.get("nodeAffinity")
    selector = {"nodeSelectorTerms": [{"matchExpressions": [expression]}]}
    if not isinstance(node_affinity, Mapping):
        ops.append(
            {"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {AFFINITY: selector}}
        )
        return ops
    required_nodes = node_affinity.get(AFFINITY)
    path = f"/spec/affinity/nodeAffinity/{AFFINITY}"
    terms = required_nodes.get("nodeSelectorTerms") if isinstance(required_nodes, Mapping) else None
    if not isinstance(required_nodes, Mapping) or not isinstance(terms, list) or not terms:
        ops.append({"op": "add", "path": path, "value": selector})
        return ops
    # terms are OR-ed: the clique restriction must hold in each of them
    for i, existing in enumerate(terms):
        exprs = existing.get("matchExpressions") if isinstance(existing, Mapping) else None
        if not isinstance(exprs, list):
            ops.append(
                {
                    "op": "add",
                    "path": f"{path}/nodeSelectorTerms/{i}/matchExpressions",
                    "value": [expression],
                }
            )
        elif expression not in exprs:
            ops.append(
                {
                    "op": "add",
                    "path": f"{path}/nodeSelectorTerms/{i}/matchExpressions/-",
                    "value": expression,
                }
            )
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
    """Admission of one pod being created in ``namespace``: its domain and the patch (empty
    when the pod uses no domain's channel). ``claim(name)`` reads a ResourceClaim of the
    namespace; ``siblings(domain)`` are the pods that may hold the domain's channel;
    ``nodes()`` and ``pods_by_node()`` the cluster's room, asked only for a domain with
    ``numNodes`` > 1 and no placed pod."""
    domain = domain_of_pod(pod, namespace, domains, claim)
    if domain is None:
        return Mutation(None)
    cliques: tuple[str, ...] = ()
    if domain.spec.num_nodes > 1:
        cliques = first_cliques(pod, domain, siblings(domain), nodes, pods_by_node)
    return Mutation(domain, placement_patch(pod, domain.uid, cliques), cliques)


def apply_patch(obj: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> Obj:
    """``obj`` with JSON Patch ``add`` operations applied (what the API server does with the
    webhook's answer); a new object, ``obj`` is unchanged. Other operations are refused."""
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
