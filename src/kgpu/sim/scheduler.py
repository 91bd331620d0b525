"""kube-scheduler's filters, scoring and failure messages over the simulator's nodes.

Filters run in kube-scheduler's default plugin order and stop at the first plugin that rejects
a node, as its framework does: NodeUnschedulable, TaintToleration, NodeAffinity,
NodeResourcesFit, then the simulator's :class:`~kgpu.sim.plugins.SchedulerPlugin` s (DRA claims,
ComputeDomains). A pod that fits nowhere gets kube-scheduler's ``FitError`` text: ``0/N nodes are
available:`` then ``<count> <reason>`` entries sorted as strings and joined with ``, ``.

Speed comes from never asking the same question twice: nodes with equal labels, taints and
``unschedulable`` share a *class*, and the label/taint verdict is cached per (pod shape, class);
nodes of one class with equal allocatable and requested resources share a *bucket*, so resource
fit and score are computed once per bucket rather than once per node. On a thousand identical
nodes a decision looks at a handful of buckets. Scoring is LeastAllocated (the default) over
CPU, memory, pod count and the extended resources the pod asks for; ties go to the node that
waited longest, which spreads pods across equal nodes as kube-scheduler's rotation does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgpu.node.selectors import Taint, first_untolerated, tolerates
from kgpu.sim.plugins import NodeInfo, SchedulerPlugin
from kgpu.sim.podspec import PodRequirements, node_affinity_matches
from kgpu.sim.state import PodRecord, SimNode
from kgpu.store import ObjectStore

UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"
NO_NODES = "no nodes available to schedule pods"
_UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_FIT_ORDER = {"cpu": 0, "memory": 1, "ephemeral-storage": 2}


#: Labels unique to each node: kept out of node classes, so a pod that selects on them (or on
#: ``metadata.name`` through matchFields) is filtered node by node.
PER_NODE_LABELS = frozenset({"kubernetes.io/hostname"})


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


def taint_reason(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


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
) -> tuple[str, ...]:
    """The first label/taint filter that rejects the node, in kube-scheduler's order."""
    if unschedulable and not any(tolerates(t, _UNSCHEDULABLE_TAINT) for t in req.tolerations):
        return (UNSCHEDULABLE,)
    taint = first_untolerated(req.tolerations, taints)
    if taint is not None:
        return (taint_reason(taint),)
    if not node_affinity_matches(req, labels, node_name):
        return (AFFINITY,)
    return ()


def fit_reasons(requests: Iterable[tuple[str, int]], free: dict[str, int]) -> list[str]:
    """NodeResourcesFit: pod count first, then every resource short, CPU and memory first."""
    reasons = []
    if free.get("pods", 0) < 1:
        reasons.append(TOO_MANY_PODS)
    short = [r for r, amount in requests if amount > free.get(r, 0)]
    short.sort(key=lambda r: (_FIT_ORDER.get(r, 3), r))
    reasons.extend(f"Insufficient {r}" for r in short)
    return reasons


@dataclass
class Bucket:
    """Nodes with the same class, allocatable and requested resources."""

    key: tuple[object, ...]
    class_id: int
    free: dict[str, int]
    allocatable: dict[str, int]
    nodes: dict[str, SimNode] = field(default_factory=dict)


@dataclass
class Placement:
    """The outcome of one scheduling attempt."""

    node: SimNode | None
    message: str = ""  # FitError text when node is None


class Scheduler:
    """Places pods on :class:`SimNode` s. Keeps per-node requested resources in step with
    :meth:`assume` / :meth:`forget`; plugins see the store and a :class:`NodeInfo`."""

    def __init__(self, plugins: Sequence[SchedulerPlugin], store: ObjectStore) -> None:
        self.plugins = list(plugins)
        self.store = store
        self.nodes: dict[str, SimNode] = {}
        self._classes: dict[tuple[object, ...], int] = {}
        self._class_members: dict[int, tuple[dict[str, str], tuple[Taint, ...], bool]] = {}
        self._static_cache: dict[tuple[object, ...], tuple[str, ...]] = {}
        self._buckets: dict[tuple[object, ...], Bucket] = {}

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
        """Count the pod's requests on the node (kube-scheduler's assumed pod)."""
        req = node.requested
        for r, amount in rec.req.requests:
            req[r] = req.get(r, 0) + amount
        req["pods"] = req.get("pods", 0) + 1
        self._rebucket(node)

    def forget(self, rec: PodRecord, node: SimNode) -> None:
        req = node.requested
        for r, amount in rec.req.requests:
            req[r] = req.get(r, 0) - amount
        req["pods"] = req.get("pods", 0) - 1
        self._rebucket(node)

    # -- filtering ---------------------------------------------------------------------------
    def _static(self, req: PodRequirements, class_id: int, node: SimNode | None) -> tuple[str, ...]:
        if node is not None:  # matchFields: the verdict depends on the node's name
            return static_reasons(req, node.labels, node.taints, node.unschedulable, node.name)
        key = (req.static_key, class_id)
        hit = self._static_cache.get(key)
        if hit is None:
            labels, taints, unschedulable = self._class_members[class_id]
            hit = static_reasons(req, labels, taints, unschedulable, "")
            self._static_cache[key] = hit
        return hit

    def _score(self, req: PodRequirements, bucket: Bucket) -> float:
        free, alloc = bucket.free, bucket.allocatable
        score = 0.0
        wanted = {r: a for r, a in req.requests}
        for r in ("cpu", "memory", "pods", *wanted):
            total = alloc.get(r, 0)
            if total > 0:
                score += (free.get(r, 0) - wanted.get(r, 0) - (r == "pods")) / total
        return score

    def _delegated(self, req: PodRequirements) -> frozenset[str]:
        """Extended resources of the pod that a DRA DeviceClass provides (NodeResourcesFit
        leaves them to the DRA plugin on nodes that do not advertise them: DRAExtendedResource)."""
        wanted = {r for r, _ in req.requests if "/" in r}
        if not wanted:
            return frozenset()
        out: frozenset[str] = frozenset()
        for plugin in self.plugins:
            names = getattr(plugin, "extended_resource_names", None)
            if names is not None:
                out |= names(self.store) & wanted
        return out

    def find_node(self, rec: PodRecord) -> Placement:
        """Pick the best node for the pod, or explain why none fits."""
        pod, req = rec.obj, rec.req
        total = len(self.nodes)
        if total == 0:
            return Placement(None, NO_NODES)
        for plugin in self.plugins:
            reason = plugin.prefilter(pod, self.store)
            if reason:
                return Placement(None, fit_error(total, Counter(), reason))
        reasons: Counter[str] = Counter()
        per_node = needs_node_identity(req)
        delegated = self._delegated(req)

        def fit(bucket: Bucket) -> list[str]:
            requests: Iterable[tuple[str, int]] = req.requests
            if delegated:
                requests = [
                    (r, a)
                    for r, a in req.requests
                    if not (r in delegated and bucket.allocatable.get(r, 0) <= 0)
                ]
            return fit_reasons(requests, bucket.free)

        candidates: list[tuple[float, int, Bucket]] = []
        for order, bucket in enumerate(self._buckets.values()):
            if per_node:
                passing = []
                for node in bucket.nodes.values():
                    why = self._static(req, bucket.class_id, node)
                    if why:
                        reasons.update(why)
                    else:
                        passing.append(node)
                if not passing:
                    continue
                short = fit(bucket)
                if short:
                    for r in short:
                        reasons[r] += len(passing)
                    continue
                candidates.append((-self._score(req, bucket), order, bucket))
                continue
            why = self._static(req, bucket.class_id, None)
            if not why:
                why = tuple(fit(bucket))
            if why:
                n = len(bucket.nodes)
                for r in why:
                    reasons[r] += n
                continue
            candidates.append((-self._score(req, bucket), order, bucket))
        candidates.sort(key=lambda c: (c[0], c[1]))
        scored: list[tuple[SimNode, Bucket, list[int]]] = []
        for _, _, bucket in candidates:
            for node in bucket.nodes.values():
                if per_node and self._static(req, bucket.class_id, node):
                    continue
                why_plugin = self._plugin_reason(pod, node)
                if why_plugin is None:
                    plugin_scores = self._plugin_scores(pod, node)
                    if plugin_scores is None:
                        return Placement(node)
                    scored.append((node, bucket, plugin_scores))
                    if len(scored) >= feasible_to_find(total):
                        return Placement(self._best(req, scored))
                    continue
                reasons[why_plugin] += 1
        if scored:
            return Placement(self._best(req, scored))
        return Placement(None, fit_error(total, reasons))

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
    "TOO_MANY_PODS",
    "UNSCHEDULABLE",
    "Placement",
    "Scheduler",
    "fit_error",
    "fit_reasons",
    "static_reasons",
    "taint_reason",
]
