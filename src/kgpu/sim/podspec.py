"""A pod spec as the scheduler reads it: reduced once to plain tuples.

A pod reaches the simulator validated (:func:`kgpu.manifests.validate_manifest`, the API
server's rules); what it asks of a node becomes a :class:`PodRequirements`, whose
``static_key`` lets the scheduler cache the verdict of the label/taint filters per class of
identical nodes instead of re-evaluating them per node. Matching is
:mod:`kgpu.node.selectors`'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.manifests.podspec import is_extended_resource
from kgpu.node.selectors import (
    NodeSelector,
    Toleration,
    labels_match,
    parse_node_selector,
    parse_tolerations,
)
from kgpu.sim.quantity import to_units

Obj = dict[str, Any]


@dataclass(frozen=True)
class PodRequirements:
    """What the scheduler and the kubelet need from one pod, computed once."""

    requests: tuple[tuple[str, int], ...]  # effective requests, non-zero only, sorted
    containers: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # (name, extended requests)
    node_selector: tuple[tuple[str, str], ...]
    affinity: NodeSelector | None  # None: no required node affinity
    tolerations: tuple[Toleration, ...]
    node_name: str  # spec.nodeName set by the user: the scheduler is bypassed

    @property
    def static_key(self) -> tuple[object, ...]:
        return (self.node_selector, self.affinity, self.tolerations)

    def request(self, resource: str) -> int:
        for name, amount in self.requests:
            if name == resource:
                return amount
        return 0


# -- reduction -------------------------------------------------------------------------------


def _container_requests(c: Mapping[str, Any]) -> dict[str, int]:
    """Requests with the API server's defaulting: a limit without a request is the request."""
    res = c.get("resources") or {}
    out: dict[str, int] = {}
    for name, raw in (res.get("limits") or {}).items():
        out[str(name)] = to_units(str(name), raw)
    for name, raw in (res.get("requests") or {}).items():
        out[str(name)] = to_units(str(name), raw)
    return out


def pod_requirements(pod: Mapping[str, Any]) -> PodRequirements:
    """Reduce a validated pod to what scheduling needs. Effective requests follow
    kube-scheduler: the sum over containers, at least the largest init container, plus
    ``spec.overhead``."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    containers = []
    for c in spec.get("containers") or ():
        reqs = _container_requests(c)
        for name, amount in reqs.items():
            total[name] = total.get(name, 0) + amount
        ext = tuple(sorted((n, a) for n, a in reqs.items() if is_extended_resource(n) and a > 0))
        containers.append((str(c.get("name")), ext))
    for c in spec.get("initContainers") or ():
        if c.get("restartPolicy") == "Always":  # sidecar: runs alongside, adds up
            for name, amount in _container_requests(c).items():
                total[name] = total.get(name, 0) + amount
            continue
        for name, amount in _container_requests(c).items():
            total[name] = max(total.get(name, 0), amount)
    for name, raw in (spec.get("overhead") or {}).items():
        total[str(name)] = total.get(str(name), 0) + to_units(str(name), raw)
    affinity = None
    na = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req:
        affinity = parse_node_selector(req)
    tolerations = parse_tolerations(spec.get("tolerations"))
    return PodRequirements(
        requests=tuple(sorted((n, a) for n, a in total.items() if a > 0)),
        containers=tuple(containers),
        node_selector=tuple(
            sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items())
        ),
        affinity=affinity,
        tolerations=tolerations,
        node_name=str(spec.get("nodeName") or ""),
    )


# -- matching --------------------------------------------------------------------------------


def node_affinity_matches(req: PodRequirements, labels: Mapping[str, str], node_name: str) -> bool:
    """kube-scheduler's NodeAffinity filter: ``nodeSelector`` AND any required term."""
    if not labels_match(req.node_selector, labels):
        return False
    return req.affinity is None or req.affinity.matches(labels, node_name)
