"""kube-scheduler's InterPodAffinity filter (required terms) over the simulator's pod index.

As upstream's plugin does, PreFilter counts, per topology pair (node label key and value):

* ``affinity``: pods that match *all* the incoming pod's required affinity terms, once per term,
  on the pair of that term's topology key on their node;
* ``anti``: pods that match one of the incoming pod's required anti-affinity terms;
* ``existing_anti``: existing pods whose required anti-affinity terms match the incoming pod.

Filter then rejects a node that lacks a term's topology label or whose pair has no matching pod
(``node(s) didn't match pod affinity rules``, UnschedulableAndUnresolvable) -- unless no pod in
the cluster matches and the pod matches its own terms: the first pod of a self-affine group goes
anywhere that has the topology labels --, a node whose pair holds a pod the incoming pod's
anti-affinity names (``node(s) didn't match pod anti-affinity rules``), and a node carrying a
label pair some existing pod's anti-affinity counts (``node(s) didn't satisfy existing pods
anti-affinity rules``); both Unschedulable, so preemption may help. ``update`` is the
PreFilterExtensions' AddPod/RemovePod, which preemption uses to evaluate a node without its
victims. Preferred terms only weigh in scoring, which the simulator does not model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping

from kgpu.sim.podindex import IndexedPod, PodIndex, simple_lookup, term_namespaces
from kgpu.sim.podspec import AffinityTerm, PodRequirements
from kgpu.sim.rejection import Rejection, resolvable, unresolvable

AFFINITY_RULES = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_RULES = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

_AFFINITY = unresolvable(AFFINITY_RULES)
_ANTI = resolvable(ANTI_AFFINITY_RULES)
_EXISTING = resolvable(EXISTING_ANTI_AFFINITY)

Pair = tuple[str, str]
NodeLabels = Callable[[str], Mapping[str, str] | None]
NamespaceLabels = Callable[[str], Mapping[str, str]]


def _bump(counts: Counter[Pair], pair: Pair, delta: int) -> None:
    counts[pair] += delta
    if counts[pair] == 0:
        del counts[pair]  # an emptied pair is gone, as upstream deletes it


class AffinityState:
    """The PreFilter result for one pod: topology pair counts, updatable per pod."""

    def __init__(self, req: PodRequirements, ns_labels: NamespaceLabels) -> None:
        self.req = req
        self.own_ns_labels = ns_labels(req.namespace)
        self.affinity: Counter[Pair] = Counter()
        self.anti: Counter[Pair] = Counter()
        self.existing_anti: Counter[Pair] = Counter()
        labels = req.label_map
        self.matches_itself = bool(req.affinity_terms) and all(
            t.matches(req.namespace, labels, self.own_ns_labels) for t in req.affinity_terms
        )

    @property
    def topology_keys(self) -> set[str]:
        """The node labels the verdict depends on (to know whether nodes that differ only in
        their hostname can share one)."""
        keys = {t.topology_key for t in (*self.req.affinity_terms, *self.req.anti_affinity_terms)}
        keys.update(k for k, _ in self.existing_anti)
        return keys

    def matches_all_affinity(self, pod: IndexedPod, ns_labels: NamespaceLabels) -> bool:
        terms = self.req.affinity_terms
        return bool(terms) and all(
            t.matches(pod.namespace, pod.labels, ns_labels(pod.namespace)) for t in terms
        )

    def update(
        self,
        pod: IndexedPod,
        node_labels: Mapping[str, str],
        delta: int,
        ns_labels: NamespaceLabels,
    ) -> None:
        """Count ``pod`` on its node in (+1) or out (-1)."""
        req = self.req
        for t in pod.anti_affinity_terms:
            value = node_labels.get(t.topology_key)
            if value is not None and t.matches(req.namespace, req.label_map, self.own_ns_labels):
                _bump(self.existing_anti, (t.topology_key, value), delta)
        if self.matches_all_affinity(pod, ns_labels):
            for t in req.affinity_terms:
                value = node_labels.get(t.topology_key)
                if value is not None:
                    _bump(self.affinity, (t.topology_key, value), delta)
        for t in req.anti_affinity_terms:
            value = node_labels.get(t.topology_key)
            if value is not None and t.matches(pod.namespace, pod.labels, ns_labels(pod.namespace)):
                _bump(self.anti, (t.topology_key, value), delta)

    def check(self, labels: Mapping[str, str]) -> Rejection | None:
        """Filter: None when the node passes."""
        terms = self.req.affinity_terms
        if terms:
            found = True
            for t in terms:
                value = labels.get(t.topology_key)
                if value is None:
                    return _AFFINITY  # every topology label must exist on the node
                if self.affinity.get((t.topology_key, value), 0) <= 0:
                    found = False
            if not found and not (not self.affinity and self.matches_itself):
                return _AFFINITY
        for t in self.req.anti_affinity_terms:
            value = labels.get(t.topology_key)
            if value is not None and self.anti.get((t.topology_key, value), 0) > 0:
                return _ANTI
        for (key, value), count in self.existing_anti.items():
            if count > 0 and labels.get(key) == value:
                return _EXISTING
        return None


def _add_incoming(
    state: AffinityState,
    terms: tuple[AffinityTerm, ...],
    counts: Counter[Pair],
    every: bool,
    index: PodIndex,
    node_labels: NodeLabels,
    ns_labels: NamespaceLabels,
) -> None:
    """Count existing pods against the incoming pod's terms: for affinity (``every``) a pod must
    match all terms and is counted once per term; for anti-affinity each term on its own."""
    if not terms:
        return
    groups = [terms] if every else [(t,) for t in terms]
    for group in groups:
        first = group[0]
        lookup = simple_lookup(first.selector) if len(group) == 1 else None
        if lookup is not None:  # every indexed pod with the label matches: count per node
            key, values = lookup
            for ns in term_namespaces(first, index, ns_labels):
                for wanted in values:
                    for node, n in index.nodes_with_label(ns, key, wanted).items():
                        labels = node_labels(node)
                        topology = labels.get(first.topology_key) if labels else None
                        if topology is not None:
                            counts[(first.topology_key, topology)] += n
            continue
        seen: set[str] = set()
        for pod in index.matching(first.selector, term_namespaces(first, index, ns_labels)):
            if pod.key in seen:
                continue
            seen.add(pod.key)
            if every and not state.matches_all_affinity(pod, ns_labels):
                continue
            labels = node_labels(pod.node)
            if labels is None:
                continue
            for t in group:
                value = labels.get(t.topology_key)
                if value is not None:
                    counts[(t.topology_key, value)] += 1


def prefilter(
    req: PodRequirements, index: PodIndex, node_labels: NodeLabels, ns_labels: NamespaceLabels
) -> AffinityState | None:
    """InterPodAffinity's PreFilter; None when it would return Skip (the pod has no required
    terms and no existing pod's anti-affinity names it)."""
    if not req.inter_pod and not index.anti_terms:
        return None
    state = AffinityState(req, ns_labels)
    labels = req.label_map
    for term, per_node in index.anti_terms.items():
        if not term.matches(req.namespace, labels, state.own_ns_labels):
            continue
        for name, n in per_node.items():
            node = node_labels(name)
            value = node.get(term.topology_key) if node is not None else None
            if value is not None:
                state.existing_anti[(term.topology_key, value)] += n
    _add_incoming(state, req.affinity_terms, state.affinity, True, index, node_labels, ns_labels)
    _add_incoming(state, req.anti_affinity_terms, state.anti, False, index, node_labels, ns_labels)
    if not state.existing_anti and not req.inter_pod:
        return None
    return state


__all__ = [
    "AFFINITY_RULES",
    "ANTI_AFFINITY_RULES",
    "EXISTING_ANTI_AFFINITY",
    "AffinityState",
    "prefilter",
]
