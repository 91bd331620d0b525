"""A pod spec as the scheduler reads it: reduced once to plain tuples.

A pod reaches the simulator validated (:func:`kgpu.manifests.validate_manifest`, the API
server's rules); what it asks of a node becomes a :class:`PodRequirements`, whose
``static_key`` lets the scheduler cache the verdict of the label/taint filters per class of
identical nodes instead of re-evaluating them per node. Matching is
:mod:`kgpu.node.selectors`'.

The inter-pod parts (required pod affinity and anti-affinity terms, ``DoNotSchedule`` topology
spread constraints) are reduced the way kube-scheduler's ``framework.NewPodInfo`` and
PodTopologySpread's PreFilter reduce them: a term without ``namespaces`` and
``namespaceSelector`` covers the pod's own namespace, ``matchLabelKeys``/``mismatchLabelKeys``
are merged into the selector with the pod's own label values, a spread constraint's
``minDomains`` defaults to 1, ``nodeAffinityPolicy`` to Honor and ``nodeTaintsPolicy`` to Ignore.
``ScheduleAnyway`` constraints (and the cluster's default constraints, which are
``ScheduleAnyway`` only) only weigh in scoring, which the simulator does not model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.manifests.podspec import is_extended_resource
from kgpu.node.selectors import (
    NOTHING,
    LabelSelector,
    NodeSelector,
    Requirement,
    Toleration,
    labels_match,
    parse_label_selector,
    parse_node_selector,
    parse_tolerations,
)
from kgpu.sim.quantity import to_units

Obj = dict[str, Any]

HONOR = "Honor"
IGNORE = "Ignore"


@dataclass(frozen=True)
class AffinityTerm:
    """One required pod (anti-)affinity term: pods in ``namespaces`` (or in a namespace whose
    labels ``namespace_selector`` matches) whose labels ``selector`` matches, counted per value
    of the node label ``topology_key``."""

    selector: LabelSelector
    namespaces: frozenset[str]
    namespace_selector: LabelSelector  # NOTHING when the term has none
    topology_key: str

    def covers(self, namespace: str, ns_labels: Mapping[str, str]) -> bool:
        return namespace in self.namespaces or self.namespace_selector.matches(ns_labels)

    def matches(
        self, namespace: str, labels: Mapping[str, str], ns_labels: Mapping[str, str]
    ) -> bool:
        """``framework.AffinityTerm.Matches``: namespace first, then the label selector."""
        return self.covers(namespace, ns_labels) and self.selector.matches(labels)


@dataclass(frozen=True)
class SpreadConstraint:
    """A ``DoNotSchedule`` topology spread constraint with the defaults applied."""

    max_skew: int
    topology_key: str
    selector: LabelSelector
    min_domains: int = 1
    node_affinity_policy: str = HONOR
    node_taints_policy: str = IGNORE


@dataclass(frozen=True)
class PodRequirements:
    """What the scheduler and the kubelet need from one pod, computed once."""

    requests: tuple[tuple[str, int], ...]  # effective requests, non-zero only, sorted
    containers: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # (name, extended requests)
    node_selector: tuple[tuple[str, str], ...]
    affinity: NodeSelector | None  # None: no required node affinity
    tolerations: tuple[Toleration, ...]
    node_name: str  # spec.nodeName set by the user: the scheduler is bypassed
    namespace: str = "default"
    labels: tuple[tuple[str, str], ...] = ()
    priority: int = 0  # spec.priority as the Priority admission plugin set it
    preempt_never: bool = False  # spec.preemptionPolicy: Never
    affinity_terms: tuple[AffinityTerm, ...] = ()  # podAffinity, required
    anti_affinity_terms: tuple[AffinityTerm, ...] = ()  # podAntiAffinity, required
    spread: tuple[SpreadConstraint, ...] = ()  # topologySpreadConstraints, DoNotSchedule

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def inter_pod(self) -> bool:
        """Whether the pod has required pod affinity or anti-affinity terms."""
        return bool(self.affinity_terms or self.anti_affinity_terms)

    @property
    def static_key(self) -> tuple[object, ...]:
        return (self.node_selector, self.affinity, self.tolerations)

    def request(self, resource: str) -> int:
        for name, amount in self.requests:
            if name == resource:
                return amount
        return 0


# -- reduction -------------------------------------------------------------------------------


def _label_keys(keys: object, labels: Mapping[str, str], operator: str) -> tuple[Requirement, ...]:
    """``matchLabelKeys`` (In) / ``mismatchLabelKeys`` (NotIn) with the pod's own values; a key
    the pod has no label for adds nothing."""
    if not isinstance(keys, list):
        return ()
    return tuple(Requirement(str(k), operator, (labels[str(k)],)) for k in keys if str(k) in labels)


def affinity_terms(
    raw: object, namespace: str, labels: Mapping[str, str]
) -> tuple[AffinityTerm, ...]:
    """A pod's ``requiredDuringSchedulingIgnoredDuringExecution`` terms, as kube-scheduler
    reads them for that pod."""
    out = []
    for term in raw if isinstance(raw, list) else ():
        if not isinstance(term, Mapping):
            continue
        raw_sel = term.get("labelSelector")
        selector = parse_label_selector(raw_sel)
        extra = _label_keys(term.get("matchLabelKeys"), labels, "In") + _label_keys(
            term.get("mismatchLabelKeys"), labels, "NotIn"
        )
        if extra and raw_sel is not None:
            selector = selector.with_requirements(extra)
        names = frozenset(str(n) for n in term.get("namespaces") or ())
        ns_raw = term.get("namespaceSelector")
        ns_selector = NOTHING if ns_raw is None else parse_label_selector(ns_raw)
        if not names and ns_raw is None:
            names = frozenset({namespace})
        out.append(AffinityTerm(selector, names, ns_selector, str(term.get("topologyKey") or "")))
    return tuple(out)


def spread_constraints(raw: object, labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    """The pod's ``DoNotSchedule`` topology spread constraints with their defaults."""
    out = []
    for c in raw if isinstance(raw, list) else ():
        if not isinstance(c, Mapping) or c.get("whenUnsatisfiable") != "DoNotSchedule":
            continue
        selector = parse_label_selector(c.get("labelSelector"))
        extra = _label_keys(c.get("matchLabelKeys"), labels, "In")
        if extra:
            selector = selector.with_requirements(extra)
        min_domains = c.get("minDomains")
        out.append(
            SpreadConstraint(
                max_skew=int(c.get("maxSkew") or 1),
                topology_key=str(c.get("topologyKey") or ""),
                selector=selector,
                min_domains=min_domains if isinstance(min_domains, int) else 1,
                node_affinity_policy=str(c.get("nodeAffinityPolicy") or HONOR),
                node_taints_policy=str(c.get("nodeTaintsPolicy") or IGNORE),
            )
        )
    return tuple(out)


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
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    aff = spec.get("affinity") or {}
    priority = spec.get("priority")
    return PodRequirements(
        requests=tuple(sorted((n, a) for n, a in total.items() if a > 0)),
        containers=tuple(containers),
        node_selector=tuple(
            sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items())
        ),
        affinity=affinity,
        tolerations=tolerations,
        node_name=str(spec.get("nodeName") or ""),
        namespace=namespace,
        labels=tuple(sorted(labels.items())),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        preempt_never=spec.get("preemptionPolicy") == "Never",
        affinity_terms=affinity_terms(
            (aff.get("podAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution"),
            namespace,
            labels,
        ),
        anti_affinity_terms=affinity_terms(
            (aff.get("podAntiAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            ),
            namespace,
            labels,
        ),
        spread=spread_constraints(spec.get("topologySpreadConstraints"), labels),
    )


# -- matching --------------------------------------------------------------------------------


def node_affinity_matches(req: PodRequirements, labels: Mapping[str, str], node_name: str) -> bool:
    """kube-scheduler's NodeAffinity filter: ``nodeSelector`` AND any required term."""
    if not labels_match(req.node_selector, labels):
        return False
    return req.affinity is None or req.affinity.matches(labels, node_name)
