"""kube-scheduler's PodTopologySpread filter (``DoNotSchedule`` constraints).

PreFilter counts, for every constraint, the pods of the incoming pod's namespace that its
selector matches (terminating pods excluded) per topology domain, over the nodes that carry
every constraint's topology key and that the constraint's inclusion policies admit
(``nodeAffinityPolicy: Honor`` -- the default -- keeps only nodes matching the pod's
``nodeSelector`` and required node affinity; ``nodeTaintsPolicy: Honor`` drops nodes with a taint
the pod does not tolerate; the default Ignore keeps them). Every such node's domain counts, with
zero pods if need be. Filter rejects a node without a constraint's topology label
(``node(s) didn't match pod topology spread constraints (missing required label)``,
UnschedulableAndUnresolvable) and a node where ``pods in its domain + 1 (if the pod matches
itself) - the global minimum > maxSkew`` (``node(s) didn't match pod topology spread
constraints``, Unschedulable); the global minimum is 0 while fewer domains than ``minDomains``
exist. A pod without ``DoNotSchedule`` constraints is skipped: the cluster's default constraints
(1.35's: hostname and zone, ``ScheduleAnyway``) only score.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from kgpu.node.selectors import Taint, first_untolerated
from kgpu.sim.podindex import IndexedPod, PodIndex, simple_lookup
from kgpu.sim.podspec import HONOR, PodRequirements, SpreadConstraint, node_affinity_matches
from kgpu.sim.rejection import Rejection, resolvable, unresolvable

CONSTRAINTS = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL = f"{CONSTRAINTS} (missing required label)"

_SKEW = resolvable(CONSTRAINTS)
_MISSING = unresolvable(MISSING_LABEL)

Pair = tuple[str, str]
#: (name, labels, taints) of one node
NodeView = tuple[str, Mapping[str, str], Sequence[Taint]]
#: nodes grouped by what the inclusion policies read (labels but the hostname, taints): the
#: policies are judged once per group unless the pod's node affinity names nodes
NodeGroups = Iterable[tuple[Sequence[NodeView], bool]]


def _included(c: SpreadConstraint, req: PodRequirements, node: NodeView) -> bool:
    """``matchNodeInclusionPolicies``: whether the node's domain counts for this constraint."""
    name, labels, taints = node
    if c.node_affinity_policy == HONOR and not node_affinity_matches(req, labels, name):
        return False
    return not (c.node_taints_policy == HONOR and first_untolerated(req.tolerations, taints))


class SpreadState:
    """The PreFilter result for one pod: matching pods per domain, updatable per pod."""

    def __init__(self, req: PodRequirements) -> None:
        self.req = req
        self.counts: dict[Pair, int] = {}
        self.domains: dict[str, int] = {}  # topology key -> number of domains
        self._labels = req.label_map

    @property
    def topology_keys(self) -> set[str]:
        return {c.topology_key for c in self.req.spread}

    def _has_keys(self, labels: Mapping[str, str]) -> bool:
        return all(c.topology_key in labels for c in self.req.spread)

    def update(self, pod: IndexedPod, node: NodeView, delta: int) -> None:
        """Count ``pod`` on ``node`` in (+1) or out (-1) (PreFilterExtensions)."""
        if pod.namespace != self.req.namespace or not self._has_keys(node[1]):
            return
        for c in self.req.spread:
            if c.selector.matches(pod.labels) and _included(c, self.req, node):
                pair = (c.topology_key, node[1][c.topology_key])
                self.counts[pair] = self.counts.get(pair, 0) + delta

    def _min(self, c: SpreadConstraint) -> int:
        if self.domains.get(c.topology_key, 0) < c.min_domains:
            return 0
        return min(
            (n for (k, _), n in self.counts.items() if k == c.topology_key), default=2**31 - 1
        )

    def check(self, labels: Mapping[str, str]) -> Rejection | None:
        for c in self.req.spread:
            value = labels.get(c.topology_key)
            if value is None:
                return _MISSING
            own = 1 if c.selector.matches(self._labels) else 0
            if self.counts.get((c.topology_key, value), 0) + own - self._min(c) > c.max_skew:
                return _SKEW
        return None


def prefilter(
    req: PodRequirements,
    index: PodIndex,
    groups: NodeGroups,
    node_of: Callable[[str], NodeView | None],
) -> SpreadState | None:
    """PodTopologySpread's PreFilter; None for a pod without ``DoNotSchedule`` constraints.
    ``groups`` are the nodes in groups of equal labels (hostname aside) and taints, with
    whether the pod's node affinity must be judged node by node."""
    if not req.spread:
        return None
    state = SpreadState(req)
    eligible: dict[str, list[bool]] = {}
    for members, per_node in groups:
        shared: list[bool] | None = None
        for node in members:
            name, labels, _ = node
            if not state._has_keys(labels):
                break  # the group shares its keys: none of its nodes counts
            if shared is None or per_node:
                shared = [_included(c, req, node) for c in req.spread]
            eligible[name] = shared
            for c, ok in zip(req.spread, shared, strict=True):
                if ok:
                    state.counts.setdefault((c.topology_key, labels[c.topology_key]), 0)
    for i, c in enumerate(req.spread):
        lookup = simple_lookup(c.selector)
        if lookup is not None and not index.terminating:  # count per node from the index
            key, values = lookup
            for wanted in values:
                for name, n in index.nodes_with_label(req.namespace, key, wanted).items():
                    where = node_of(name)
                    if where is not None and eligible.get(name, [False] * (i + 1))[i]:
                        pair = (c.topology_key, where[1][c.topology_key])
                        state.counts[pair] = state.counts.get(pair, 0) + n
            continue
        for pod in index.matching(c.selector, (req.namespace,)):
            if pod.terminating or not eligible.get(pod.node, [False] * (i + 1))[i]:
                continue
            where = node_of(pod.node)
            if where is not None:
                pair = (c.topology_key, where[1][c.topology_key])
                state.counts[pair] = state.counts.get(pair, 0) + 1
    for key, _ in state.counts:
        state.domains[key] = state.domains.get(key, 0) + 1
    return state


__all__ = ["CONSTRAINTS", "MISSING_LABEL", "SpreadState", "prefilter"]
