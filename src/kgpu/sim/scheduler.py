"""kube-scheduler's filters, scoring and failure messages over the simulator's nodes.

Filters run in kube-scheduler's default plugin order and stop at the first plugin that rejects
a node, as its framework does: NodeUnschedulable, TaintToleration, NodeAffinity,
NodeResourcesFit, PodTopologySpread (:mod:`kgpu.sim.spread`), InterPodAffinity
(:mod:`kgpu.sim.interpod`), then the simulator's :class:`~kgpu.sim.plugins.SchedulerPlugin` s
(DynamicResources). A pod that fits nowhere gets kube-scheduler's ``FitError`` text: ``0/N nodes
are available:`` then ``<count> <reason>`` entries sorted as strings and joined with ``, ``; the
preemption result (:mod:`kgpu.sim.preemption`) follows it. Each rejection also carries its
framework code (:class:`~kgpu.sim.rejection.Rejection`): preemption only considers nodes that
were rejected ``Unschedulable``. Wording and codes follow the scenario's ``kubernetesVersion``
(:mod:`kgpu.sim.kubeversion`).

Speed comes from never asking the same question twice: nodes with equal labels, taints and
``unschedulable`` share a *class*, and the label/taint verdict is cached per (pod shape, class);
nodes of one class with equal allocatable and requested resources share a *bucket*, so resource
fit and score are computed once per bucket rather than once per node. On a thousand identical
nodes a decision looks at a handful of buckets. The inter-pod filters depend on the pods already
placed, so their verdict is worked out per scheduling attempt -- once per class when no topology
key involved is a per-node label (hostname), else node by node -- from an index of bound pods
(:mod:`kgpu.sim.podindex`); a pod without affinity terms or spread constraints, in a cluster where
no pod has required anti-affinity, costs nothing there. Scoring is LeastAllocated (the default) over
CPU, memory, pod count and the extended resources the pod asks for; ties go to the node that
waited longest, which spreads pods across equal nodes as kube-scheduler's rotation does. When a
plugin scores the pod (DynamicResources' prioritized-list score), the first
:func:`feasible_to_find` feasible nodes are scored and the best total wins. An extended resource
a DRA DeviceClass provides is left to the DRA plugin on nodes that do not advertise it
(:func:`fit_requests`).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgpu.node.selectors import Taint, first_untolerated, tolerates
from kgpu.sim import interpod, spread
from kgpu.sim.kubeversion import KubeVersion, parse_version
from kgpu.sim.plugins import NodeInfo, SchedulerPlugin
from kgpu.sim.podindex import NAMESPACE_NAME_LABEL, IndexedPod, PodIndex, indexed
from kgpu.sim.podspec import PodRequirements, node_affinity_matches
from kgpu.sim.rejection import Rejection
from kgpu.sim.state import PodRecord, SimNode
from kgpu.store import NotFound, ObjectStore

UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
NO_NODES = "no nodes available to schedule pods"
UNTOLERATED_TAINTS = "node(s) had untolerated taint(s)"
LATEST = parse_version()
_UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_FIT_ORDER = {"cpu": 0, "memory": 1, "ephemeral-storage": 2}


#: Labels unique to each node: kept out of node classes, so a pod that selects on them (or on
#: ``metadata.name`` through matchFields) is filtered node by node.
HOSTNAME_LABEL = "kubernetes.io/hostname"
PER_NODE_LABELS = frozenset({HOSTNAME_LABEL})


def needs_node_identity(req: PodRequirements) -> bool:
    if any(k in PER_NODE_LABELS for k, _ in req.node_selector):
        return True
    if req.affinity is None:
        return False
    return any(
        t.fields or any(r.key in PER_NODE_LABELS for r in t.expressions) for t in req.affinity.terms
    )


def feasible_to_find(num_nodes: int) -> int:
    """How many feasible nodes kube-scheduler looks for before scoring
    (``numFeasibleNodesToFind`` with the adaptive ``percentageOfNodesToScore``)."""
    if num_nodes < 100:
        return num_nodes
    percentage = max(5, 50 - num_nodes // 125)
    return max(100, num_nodes * percentage // 100)


def taint_reason(taint: Taint, version: KubeVersion = LATEST) -> str:
    """TaintToleration's reason: the taint named up to 1.34.1, not from 1.34.2 and 1.35."""
    if version.taint_names_taint:
        return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
    return UNTOLERATED_TAINTS


def fit_error(num_nodes: int, reasons: Counter[str], prefilter: str | None = None) -> str:
    """kube-scheduler's FitError message."""
    if num_nodes == 0:
        return NO_NODES
    msg = f"0/{num_nodes} nodes are available:"
    if prefilter:
        return f"{msg} {prefilter}."
    histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
    if histogram:
        msg += f" {', '.join(histogram)}."
    return msg


def static_reasons(
    req: PodRequirements,
    labels: dict[str, str],
    taints: Sequence[Taint],
    unschedulable: bool,
    node_name: str,
    version: KubeVersion = LATEST,
) -> tuple[str, ...]:
    """The first label/taint filter that rejects the node, in kube-scheduler's order (all three
    reject UnschedulableAndUnresolvable: preemption cannot change labels or taints)."""
    for _, check in STATIC_FILTERS:
        why = check(req, labels, taints, unschedulable, node_name, version)
        if why:
            return (why,)
    return ()


def _node_unschedulable(
    req: PodRequirements,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    unschedulable: bool,
    node_name: str,
    version: KubeVersion,
) -> str | None:
    if unschedulable and not any(tolerates(t, _UNSCHEDULABLE_TAINT) for t in req.tolerations):
        return UNSCHEDULABLE
    return None


def _taint_toleration(
    req: PodRequirements,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    unschedulable: bool,
    node_name: str,
    version: KubeVersion,
) -> str | None:
    taint = first_untolerated(req.tolerations, taints)
    return None if taint is None else taint_reason(taint, version)


def _node_affinity(
    req: PodRequirements,
    labels: Mapping[str, str],
    taints: Sequence[Taint],
    unschedulable: bool,
    node_name: str,
    version: KubeVersion,
) -> str | None:
    return None if node_affinity_matches(req, labels, node_name) else AFFINITY


StaticFilter = Callable[
    [PodRequirements, Mapping[str, str], Sequence[Taint], bool, str, KubeVersion], str | None
]
#: The label/taint filters by plugin name, in the framework's order.
STATIC_FILTERS: tuple[tuple[str, StaticFilter], ...] = (
    ("NodeUnschedulable", _node_unschedulable),
    ("TaintToleration", _taint_toleration),
    ("NodeAffinity", _node_affinity),
)
#: Every filter the simulated kube-scheduler runs, in order (plugins last).
FILTER_ORDER = (
    *(name for name, _ in STATIC_FILTERS),
    "NodeResourcesFit",
    "PodTopologySpread",
    "InterPodAffinity",
)


def fit_reasons(requests: Iterable[tuple[str, int]], free: dict[str, int]) -> list[str]:
    """NodeResourcesFit: pod count first, then every resource short, CPU and memory first."""
    reasons = []
    if free.get("pods", 0) < 1:
        reasons.append(TOO_MANY_PODS)
    short = [r for r, amount in requests if amount > free.get(r, 0)]
    short.sort(key=lambda r: (_FIT_ORDER.get(r, 3), r))
    reasons.extend(f"Insufficient {r}" for r in short)
    return reasons


def fit_requests(
    requests: Iterable[tuple[str, int]], allocatable: Mapping[str, int], delegated: Collection[str]
) -> Iterable[tuple[str, int]]:
    """The requests NodeResourcesFit checks on a node: an extended resource a DRA DeviceClass
    provides (``delegated``) is left to the DRA plugin on a node that does not advertise it
    (DRAExtendedResource: ShouldDelegateResourceToDRA)."""
    if not delegated:
        return requests
    return [(r, a) for r, a in requests if not (r in delegated and allocatable.get(r, 0) <= 0)]


def fit_rejection(
    requests: Iterable[tuple[str, int]],
    free: dict[str, int],
    allocatable: Mapping[str, int],
    version: KubeVersion = LATEST,
) -> Rejection | None:
    """NodeResourcesFit with its code: from 1.34 a request beyond the node's whole allocatable
    is unresolvable (an empty node would not fit it either); a node that is merely full, or has
    too many pods, may fit after preemption."""
    requests = tuple(requests)
    reasons = fit_reasons(requests, free)
    if not reasons:
        return None
    beyond = version.fit_unresolvable_beyond_allocatable and any(
        amount > allocatable.get(r, 0) for r, amount in requests if amount > free.get(r, 0)
    )
    return Rejection(tuple(reasons), not beyond)


@dataclass
class Bucket:
    """Nodes with the same class, allocatable and requested resources."""

    key: tuple[object, ...]
    class_id: int
    free: dict[str, int]
    allocatable: dict[str, int]
    nodes: dict[str, SimNode] = field(default_factory=dict)


@dataclass
class Diagnosis:
    """Why no node took the pod, as preemption needs it: the reason histogram, and the nodes
    rejected only ``Unschedulable`` (in groups, so a thousand full nodes are one list)."""

    reasons: Counter[str] = field(default_factory=Counter)
    potential: list[Collection[SimNode]] = field(default_factory=list)
    prefilter: str | None = None  # a PreFilter rejected the pod on every node
    cycle: Cycle | None = None  # the inter-pod filters' state, for preemption's dry runs

    def reject(self, rejection: Rejection, nodes: Collection[SimNode]) -> None:
        for r in rejection.reasons:
            self.reasons[r] += len(nodes)
        if rejection.resolvable:
            self.potential.append(nodes)

    @property
    def potential_count(self) -> int:
        return sum(len(group) for group in self.potential)


@dataclass
class Placement:
    """The outcome of one scheduling attempt."""

    node: SimNode | None
    message: str = ""  # FitError text when node is None
    diagnosis: Diagnosis | None = None


class Cycle:
    """The per-attempt state of the filters that depend on placed pods (PodTopologySpread,
    InterPodAffinity), or nothing when the pod has none to check."""

    def __init__(
        self,
        spread_state: spread.SpreadState | None,
        affinity_state: interpod.AffinityState | None,
    ) -> None:
        self.spread = spread_state
        self.affinity = affinity_state
        keys: set[str] = set()
        if spread_state is not None:
            keys |= spread_state.topology_keys
        if affinity_state is not None:
            keys |= affinity_state.topology_keys
        #: a topology key unique to each node: nodes of one class need their own verdicts
        self.per_node = bool(keys & PER_NODE_LABELS)

    def check(self, labels: Mapping[str, str]) -> Rejection | None:
        """PodTopologySpread then InterPodAffinity, in the framework's order."""
        if self.spread is not None:
            why = self.spread.check(labels)
            if why is not None:
                return why
        if self.affinity is not None:
            return self.affinity.check(labels)
        return None


class Scheduler:
    """Places pods on :class:`SimNode` s. Keeps per-node requested resources in step with
    :meth:`assume` / :meth:`forget`; plugins see the store and a :class:`NodeInfo`."""

    def __init__(
        self,
        plugins: Sequence[SchedulerPlugin],
        store: ObjectStore,
        version: KubeVersion = LATEST,
    ) -> None:
        self.plugins = list(plugins)
        self.store = store
        self.version = version
        self.pods = PodIndex()
        self._bind_seq = itertools.count()
        self._ns_cache: tuple[int, dict[str, dict[str, str]]] = (-1, {})
        self.nodes: dict[str, SimNode] = {}
        self._classes: dict[tuple[object, ...], int] = {}
        self._class_members: dict[int, tuple[dict[str, str], tuple[Taint, ...], bool]] = {}
        self._static_cache: dict[tuple[object, ...], tuple[str, ...]] = {}
        self._buckets: dict[tuple[object, ...], Bucket] = {}
        #: nodes that exist only in a what-if (:meth:`what_if`): cluster-autoscaler's templates
        self._what_if_nodes: dict[str, spread.NodeView] = {}

    # -- node bookkeeping --------------------------------------------------------------------
    def upsert_node(self, node: SimNode) -> None:
        """Add a node or re-read its labels, taints and allocatable after they changed."""
        shared = {k: v for k, v in node.labels.items() if k not in PER_NODE_LABELS}
        ckey = (frozenset(shared.items()), node.taints, node.unschedulable)
        class_id = self._classes.get(ckey)
        if class_id is None:
            class_id = len(self._classes)
            self._classes[ckey] = class_id
            self._class_members[class_id] = (shared, node.taints, node.unschedulable)
        node.class_id = class_id
        self.nodes[node.name] = node
        node.info = NodeInfo(name=node.name, labels=node.labels, node=node.obj, pods=node.pod_objs)
        self._rebucket(node)

    def remove_node(self, name: str) -> None:
        node = self.nodes.pop(name, None)
        if node is not None and node.bucket is not None:
            bucket = self._buckets.get(node.bucket)
            if bucket is not None:
                bucket.nodes.pop(name, None)
                if not bucket.nodes:
                    del self._buckets[node.bucket]
            node.bucket = None

    def _rebucket(self, node: SimNode) -> None:
        if node.bucket is not None:
            old = self._buckets.get(node.bucket)
            if old is not None:
                old.nodes.pop(node.name, None)
                if not old.nodes:
                    del self._buckets[node.bucket]
        alloc = tuple(sorted(node.allocatable.items()))
        used = tuple(sorted((k, v) for k, v in node.requested.items() if v))
        key = (node.class_id, alloc, used)
        bucket = self._buckets.get(key)
        if bucket is None:
            free = dict(node.allocatable)
            for r, v in used:
                free[r] = free.get(r, 0) - v
            bucket = Bucket(key, node.class_id, free, dict(node.allocatable))
            self._buckets[key] = bucket
        bucket.nodes[node.name] = node
        node.bucket = key

    def assume(self, rec: PodRecord, node: SimNode) -> None:
        """Count the pod's requests on the node (kube-scheduler's assumed pod) and index it for
        the inter-pod filters."""
        req = node.requested
        for r, amount in rec.req.requests:
            req[r] = req.get(r, 0) + amount
        req["pods"] = req.get("pods", 0) + 1
        self._rebucket(node)
        terminating = bool((rec.obj.get("metadata") or {}).get("deletionTimestamp"))
        self.pods.add(indexed(rec.key, rec.req, node.name, next(self._bind_seq), terminating))

    def forget(self, rec: PodRecord, node: SimNode) -> None:
        req = node.requested
        for r, amount in rec.req.requests:
            req[r] = req.get(r, 0) - amount
        req["pods"] = req.get("pods", 0) - 1
        self._rebucket(node)
        self.pods.remove(rec.key)

    # -- what the inter-pod filters read ------------------------------------------------------
    def node_labels(self, name: str) -> Mapping[str, str] | None:
        node = self.nodes.get(name)
        if node is None:
            view = self._what_if_nodes.get(name)
            return None if view is None else view[1]
        return node.labels

    def node_view(self, name: str) -> spread.NodeView | None:
        node = self.nodes.get(name)
        if node is None:
            return self._what_if_nodes.get(name)
        return (node.name, node.labels, node.taints)

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """A namespace's labels (its Namespace object's, else only the name label every
        namespace carries), read from the store once per change of Namespaces."""
        revision = getattr(self.store, "kind_revision", lambda *_: 0)("v1", "Namespace")
        seen, cache = self._ns_cache
        if seen != revision:
            cache = {}
            self._ns_cache = (revision, cache)
        labels = cache.get(namespace)
        if labels is None:
            labels = {NAMESPACE_NAME_LABEL: namespace}
            try:
                obj = self.store.get("v1", "Namespace", namespace)
            except NotFound:
                pass
            else:
                labels.update((obj.get("metadata") or {}).get("labels") or {})
            cache[namespace] = labels
        return labels

    def cycle(self, req: PodRequirements) -> Cycle | None:
        """PreFilter of PodTopologySpread and InterPodAffinity; None when both skip."""
        spread_state = None
        if req.spread:
            by_class: dict[int, list[spread.NodeView]] = {}
            for n in self.nodes.values():
                by_class.setdefault(n.class_id, []).append((n.name, n.labels, n.taints))
            identity = needs_node_identity(req)
            groups = [(group, identity) for group in by_class.values()]
            groups.extend(([view], identity) for view in self._what_if_nodes.values())
            spread_state = spread.prefilter(req, self.pods, groups, self.node_view)
        affinity_state = interpod.prefilter(req, self.pods, self.node_labels, self.namespace_labels)
        if spread_state is None and affinity_state is None:
            return None
        return Cycle(spread_state, affinity_state)

    def what_if(
        self,
        rec: PodRecord,
        node: spread.NodeView,
        *,
        new_nodes: Sequence[spread.NodeView] = (),
        placed: Sequence[tuple[PodRecord, str]] = (),
        removed: Iterable[PodRecord] = (),
    ) -> Rejection | None:
        """PodTopologySpread and InterPodAffinity for ``rec`` on ``node`` in the cluster as
        cluster-autoscaler's snapshot has it: ``new_nodes`` added (template nodes, ``node``
        may be one), ``placed`` pods put on nodes by name, ``removed`` pods taken off theirs.
        The scheduler's own state is unchanged afterwards."""
        req = rec.req
        if (
            not req.spread
            and not req.inter_pod
            and not self.pods.anti_terms
            and not any(r.req.anti_affinity_terms for r, _ in placed)
        ):
            return None  # both filters skip this pod
        index = self.pods
        saved: dict[str, IndexedPod] = {}
        added: list[str] = []
        try:
            self._what_if_nodes = {view[0]: view for view in new_nodes}
            for gone in removed:
                was = index.pods.get(gone.key)
                if was is not None:
                    saved.setdefault(gone.key, was)
                    index.remove(gone.key)
            for other, where in placed:
                was = index.pods.get(other.key)
                if was is not None:
                    saved.setdefault(other.key, was)
                index.add(indexed(other.key, other.req, where, next(self._bind_seq)))
                added.append(other.key)
            cycle = self.cycle(req)
        finally:
            for key in added:
                index.remove(key)
            for was in saved.values():
                index.add(was)
            self._what_if_nodes = {}
        return None if cycle is None else cycle.check(node[1])

    # -- filtering ---------------------------------------------------------------------------
    def _static(self, req: PodRequirements, class_id: int, node: SimNode | None) -> tuple[str, ...]:
        if node is not None:  # matchFields: the verdict depends on the node's name
            return static_reasons(
                req, node.labels, node.taints, node.unschedulable, node.name, self.version
            )
        key = (req.static_key, class_id)
        hit = self._static_cache.get(key)
        if hit is None:
            labels, taints, unschedulable = self._class_members[class_id]
            hit = static_reasons(req, labels, taints, unschedulable, "", self.version)
            self._static_cache[key] = hit
        return hit

    def delegated(self, req: PodRequirements) -> frozenset[str]:
        """Extended resources of the pod that a DRA DeviceClass provides (the plugins'
        ``extended_resource_names``): see :func:`fit_requests`."""
        wanted = {r for r, _ in req.requests if "/" in r}
        if not wanted:
            return frozenset()
        out: frozenset[str] = frozenset()
        for plugin in self.plugins:
            names = getattr(plugin, "extended_resource_names", None)
            if names is not None:
                out |= names(self.store) & wanted
        return out

    def _fit(
        self, req: PodRequirements, bucket: Bucket, delegated: Collection[str] = ()
    ) -> Rejection | None:
        requests = fit_requests(req.requests, bucket.allocatable, delegated)
        return fit_rejection(requests, bucket.free, bucket.allocatable, self.version)

    def _score(self, req: PodRequirements, bucket: Bucket) -> float:
        free, alloc = bucket.free, bucket.allocatable
        score = 0.0
        wanted = {r: a for r, a in req.requests}
        for r in ("cpu", "memory", "pods", *wanted):
            total = alloc.get(r, 0)
            if total > 0:
                score += (free.get(r, 0) - wanted.get(r, 0) - (r == "pods")) / total
        return score

    def find_node(self, rec: PodRecord) -> Placement:
        """Pick the best node for the pod, or explain why none fits (with the diagnosis
        preemption works from)."""
        pod, req = rec.obj, rec.req
        total = len(self.nodes)
        if total == 0:
            return Placement(None, NO_NODES)
        diagnosis = Diagnosis()
        for plugin in self.plugins:
            reason = plugin.prefilter(pod, self.store)
            if reason:
                diagnosis.prefilter = reason
                return Placement(None, fit_error(total, Counter(), reason), diagnosis)
        cycle = diagnosis.cycle = self.cycle(req)
        identity = needs_node_identity(req)
        per_node = identity or (cycle is not None and cycle.per_node)
        delegated = self.delegated(req)
        candidates: list[tuple[float, int, Bucket]] = []
        for order, bucket in enumerate(self._buckets.values()):
            if identity:
                passing = []
                for node in bucket.nodes.values():
                    why = self._static(req, bucket.class_id, node)
                    if why:
                        diagnosis.reasons.update(why)
                    else:
                        passing.append(node)
                if not passing:
                    continue
                fit = self._fit(req, bucket, delegated)
                if fit is not None:
                    diagnosis.reject(fit, passing)
                    continue
                candidates.append((-self._score(req, bucket), order, bucket))
                continue
            why = self._static(req, bucket.class_id, None)
            if why:
                n = len(bucket.nodes)
                for r in why:
                    diagnosis.reasons[r] += n
                continue
            fit = self._fit(req, bucket, delegated)
            if fit is not None:
                diagnosis.reject(fit, bucket.nodes.values())  # read before anything changes
                continue
            candidates.append((-self._score(req, bucket), order, bucket))
        candidates.sort(key=lambda c: (c[0], c[1]))
        class_verdicts: dict[int, Rejection | None] = {}
        scored: list[tuple[SimNode, Bucket, list[int]]] = []
        wanted = feasible_to_find(total)
        for _, _, bucket in candidates:
            if cycle is not None and not per_node:
                cid = bucket.class_id
                if cid not in class_verdicts:
                    class_verdicts[cid] = cycle.check(self._class_members[cid][0])
                verdict = class_verdicts[cid]
                if verdict is not None:
                    diagnosis.reject(verdict, bucket.nodes.values())
                    continue
            for node in bucket.nodes.values():
                if identity and self._static(req, bucket.class_id, node):
                    continue
                if cycle is not None and per_node:
                    verdict = cycle.check(node.labels)
                    if verdict is not None:
                        diagnosis.reject(verdict, (node,))
                        continue
                why_plugin = self._plugin_reason(pod, node)
                if why_plugin is None:
                    plugin_scores = self._plugin_scores(pod, node)
                    if plugin_scores is None:
                        return Placement(node)
                    scored.append((node, bucket, plugin_scores))
                    if len(scored) >= wanted:
                        return Placement(self._best(req, scored))
                    continue
                diagnosis.reasons[why_plugin] += 1  # DRA filters reject unresolvably
        if scored:
            return Placement(self._best(req, scored))
        return Placement(None, fit_error(total, diagnosis.reasons), diagnosis)

    def _plugin_scores(self, pod: dict[str, Any], node: SimNode) -> list[int] | None:
        """Scores of the plugins that score this pod (the DRA plugin's prioritized-list score),
        None when none does: then the first node that passes wins, as before."""
        info = node.info
        assert info is not None
        out: list[int] = []
        for plugin in self.plugins:
            score = getattr(plugin, "score", None)
            value = score(pod, info, self.store) if score is not None else None
            if value is not None:
                out.append(int(value))
        return out or None

    def _best(
        self, req: PodRequirements, scored: list[tuple[SimNode, Bucket, list[int]]]
    ) -> SimNode:
        """The node with the highest total score: LeastAllocated (0-100, CPU and memory, as
        kube-scheduler's default) plus each plugin's score normalised to 0-100 over the
        feasible nodes (the framework's DefaultNormalizeScore); ties keep the scheduler's order."""
        width = max(len(s[2]) for s in scored)
        tops = [max((s[2][i] if i < len(s[2]) else 0) for s in scored) for i in range(width)]
        wanted = {r: a for r, a in req.requests}

        def total(item: tuple[SimNode, Bucket, list[int]]) -> float:
            _, bucket, values = item
            least = 0.0
            for r in ("cpu", "memory"):
                alloc = bucket.allocatable.get(r, 0)
                if alloc > 0:
                    least += max(0, bucket.free.get(r, 0) - wanted.get(r, 0)) * 100 / alloc / 2
            return least + sum(v * 100 / tops[i] for i, v in enumerate(values) if tops[i] > 0)

        return max(scored, key=total)[0]

    def node_verdict(
        self, rec: PodRecord, node: SimNode, cycle: Cycle | None, only: str | None = None
    ) -> Rejection | None:
        """Every filter on one node in order, or only the plugin named ``only`` (one of
        :data:`FILTER_ORDER` or a scheduler plugin's name), as upstream's plugin tests call one
        plugin's Filter; ``cycle`` is :meth:`cycle`'s result for the pod."""
        req = rec.req
        for name, check in STATIC_FILTERS:
            if only in (None, name):
                why = check(
                    req, node.labels, node.taints, node.unschedulable, node.name, self.version
                )
                if why:
                    return Rejection((why,), False)
        if only in (None, "NodeResourcesFit"):
            free = {r: v - node.requested.get(r, 0) for r, v in node.allocatable.items()}
            requests = fit_requests(req.requests, node.allocatable, self.delegated(req))
            fit = fit_rejection(requests, free, node.allocatable, self.version)
            if fit is not None:
                return fit
        if cycle is not None and cycle.spread is not None and only in (None, "PodTopologySpread"):
            why_spread = cycle.spread.check(node.labels)
            if why_spread is not None:
                return why_spread
        if cycle is not None and cycle.affinity is not None and only in (None, "InterPodAffinity"):
            why_affinity = cycle.affinity.check(node.labels)
            if why_affinity is not None:
                return why_affinity
        info = node.info
        for plugin in self.plugins:
            if only in (None, plugin.name) and info is not None:
                reason = plugin.filter(rec.obj, info, self.store)
                if reason:
                    return Rejection((reason,), False)
        return None

    def _plugin_reason(self, pod: dict[str, Any], node: SimNode) -> str | None:
        info = node.info
        assert info is not None
        for plugin in self.plugins:
            reason = plugin.filter(pod, info, self.store)
            if reason:
                return reason
        return None

    # -- reserve -----------------------------------------------------------------------------
    def reserve(self, rec: PodRecord, node: SimNode) -> None:
        """Plugins commit what they found (claims allocated), then the pod is assumed."""
        info = node.info
        assert info is not None
        done: list[SchedulerPlugin] = []
        try:
            for plugin in self.plugins:
                plugin.reserve(rec.obj, info, self.store)
                done.append(plugin)
        except Exception:
            for plugin in reversed(done):
                plugin.unreserve(rec.obj, info, self.store)
            raise
        self.assume(rec, node)

    def unreserve(self, rec: PodRecord, node: SimNode) -> None:
        info = node.info
        assert info is not None
        for plugin in reversed(self.plugins):
            plugin.unreserve(rec.obj, info, self.store)
        self.forget(rec, node)

    def release(self, rec: PodRecord, node: SimNode | None) -> None:
        """A bound pod went away: plugins release what they reserved; its requests free up."""
        for plugin in self.plugins:
            plugin.release(rec.obj, self.store)
        if node is not None:
            self.forget(rec, node)

    def place_gang(
        self,
        recs: Sequence[PodRecord],
        on_place: Callable[[PodRecord, SimNode], None] | None = None,
    ) -> tuple[list[tuple[PodRecord, SimNode]], PodRecord | None, str]:
        """Place every pod or none: reserve one by one, undo all on the first failure.
        Returns (placements, the pod that failed, its message)."""
        placed: list[tuple[PodRecord, SimNode]] = []
        for rec in recs:
            placement = self.find_node(rec)
            node = placement.node
            if node is not None:
                try:
                    self.reserve(rec, node)
                except Exception as exc:  # a plugin refused at reserve: treat as unschedulable
                    placement = Placement(None, fit_error(len(self.nodes), Counter({str(exc): 1})))
                    node = None
            if node is None:
                for done, where in reversed(placed):
                    self.unreserve(done, where)
                return [], rec, placement.message
            placed.append((rec, node))
            if on_place is not None:
                on_place(rec, node)
        return placed, None, ""


__all__ = [
    "AFFINITY",
    "FILTER_ORDER",
    "HOSTNAME_LABEL",
    "STATIC_FILTERS",
    "TOO_MANY_PODS",
    "UNSCHEDULABLE",
    "UNTOLERATED_TAINTS",
    "Cycle",
    "Diagnosis",
    "Placement",
    "Scheduler",
    "feasible_to_find",
    "fit_error",
    "fit_reasons",
    "fit_rejection",
    "fit_requests",
    "static_reasons",
    "taint_reason",
]
