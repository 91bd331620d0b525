"""kube-scheduler's DefaultPreemption (PostFilter) in the simulated cluster.

When no node takes a pod, DefaultPreemption looks for a node where evicting pods of *lower*
priority would make room, as ``pkg/scheduler/framework/preemption`` and
``plugins/defaultpreemption`` do:

1. A pod with ``preemptionPolicy: Never`` preempts nothing: ``preemption: not eligible due to
   preemptionPolicy=Never.``
2. Only nodes every filter rejected ``Unschedulable`` are candidates; the others count as
   ``Preemption is not helpful for scheduling``.
3. On each candidate node, all pods of lower priority are removed and the filters run again; a
   node without such pods is ``No preemption victims found for incoming pod``, a node where the
   pod still does not fit reports the filter's reason. Otherwise pods are reprieved one by one,
   most important first (higher priority, then the earlier started), as long as the pod still
   fits: the rest are the victims -- the fewest pods of the lowest priorities that make room.
4. With no candidate, the result is a FitError over those statuses, appended to the pod's
   ``FailedScheduling`` message: ``... preemption: 0/3 nodes are available: 3 Preemption is not
   helpful for scheduling.``
5. Otherwise the node whose victims have the lowest highest priority wins, then the lowest sum of
   priorities, the fewest victims, the latest start of the most important victims, the first
   node; its victims get a ``DisruptionTarget`` condition and are deleted with a ``Preempted``
   event (``Preempted by pod <uid> on node <node>``), and the pod is nominated to the node
   (``status.nominatedNodeName``); it schedules in a later round, once they are gone.

Not modelled: PodDisruptionBudgets (every victim counts as not violating one), nominated pods of
other preemptors, extenders, and the random offset at which upstream starts its candidate search
(the simulator starts at the first node so a run repeats). Upstream stops looking once it has
``max(100, 10% of the candidate nodes)`` candidates; so does the simulator. DynamicResources has
no PreFilter extensions upstream, so devices held by victims count as in use during the dry run
there and here alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from kgpu.sim.podindex import IndexedPod
from kgpu.sim.rejection import Rejection
from kgpu.sim.scheduler import (
    Cycle,
    Diagnosis,
    Scheduler,
    fit_error,
    fit_rejection,
    fit_requests,
)
from kgpu.sim.state import PodRecord, SimNode

NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_ELIGIBLE = "not eligible due to preemptionPolicy=Never."
PREFIX = "preemption: "
#: DefaultPreemption's defaults (minCandidateNodesPercentage, minCandidateNodesAbsolute)
MIN_CANDIDATE_PERCENT = 10
MIN_CANDIDATES = 100
_INT32 = 2**31


@dataclass
class Candidate:
    """A node where evicting ``victims`` (most important first) makes room."""

    node: SimNode
    victims: list[IndexedPod] = field(default_factory=list)

    def rank(self) -> tuple[int, int, int, int]:
        """Smaller is better: pickOneNodeForPreemption's criteria after PDB violations."""
        top = max(v.priority for v in self.victims)
        total = sum(v.priority + _INT32 for v in self.victims)
        earliest = min(v.seq for v in self.victims if v.priority == top)
        return (top, total, len(self.victims), -earliest)


@dataclass
class Outcome:
    """What DefaultPreemption decided: a nominated node and its victims, or the message that
    follows ``preemption: `` in the pod's event."""

    message: str = ""
    candidate: Candidate | None = None


def _free(node: SimNode, freed: Sequence[PodRecord]) -> dict[str, int]:
    free = {r: node.allocatable.get(r, 0) - node.requested.get(r, 0) for r in node.allocatable}
    for rec in freed:
        for r, amount in rec.req.requests:
            free[r] = free.get(r, 0) + amount
        free["pods"] = free.get("pods", 0) + 1
    return free


class _DryRun:
    """The filters on one node with some of its pods taken away (RunFilterPluginsWithNominated
    Pods after RemovePod): resources freed, spread and affinity counts updated."""

    def __init__(self, scheduler: Scheduler, rec: PodRecord, node: SimNode, cycle: Cycle | None):
        self.scheduler = scheduler
        self.rec = rec
        self.node = node
        self.cycle = cycle
        self.removed: list[PodRecord] = []
        self.requests = fit_requests(
            rec.req.requests, node.allocatable, scheduler.delegated(rec.req)
        )

    def _move(self, rec: PodRecord, delta: int) -> None:
        if self.cycle is None:
            return
        pod = self.scheduler.pods.pods.get(rec.key)
        if pod is None:
            return
        view = (self.node.name, self.node.labels, self.node.taints)
        if self.cycle.spread is not None:
            self.cycle.spread.update(pod, view, delta)
        if self.cycle.affinity is not None:
            self.cycle.affinity.update(
                pod, self.node.labels, delta, self.scheduler.namespace_labels
            )

    def remove(self, rec: PodRecord) -> None:
        self.removed.append(rec)
        self._move(rec, -1)

    def restore(self, rec: PodRecord) -> None:
        self.removed.remove(rec)
        self._move(rec, +1)

    def undo(self) -> None:
        for rec in list(self.removed):
            self.restore(rec)

    def check(self) -> Rejection | None:
        sched, node = self.scheduler, self.node
        fit = fit_rejection(
            self.requests, _free(node, self.removed), node.allocatable, sched.version
        )
        if fit is not None:
            return fit
        if self.cycle is not None:
            why = self.cycle.check(node.labels)
            if why is not None:
                return why
        plugin = sched._plugin_reason(self.rec.obj, node)
        if plugin is not None:
            return Rejection((plugin,), False)
        return None


def _important_first(recs: Sequence[PodRecord], sched: Scheduler) -> list[PodRecord]:
    """util.MoreImportantPod order: higher priority first, then the earlier started."""

    def seq(rec: PodRecord) -> int:
        pod = sched.pods.pods.get(rec.key)
        return pod.seq if pod is not None else 0

    return sorted(recs, key=lambda r: (-r.req.priority, seq(r)))


def _victims_on(
    sched: Scheduler, rec: PodRecord, node: SimNode, cycle: Cycle | None
) -> tuple[Candidate | None, Rejection | None]:
    """SelectVictimsOnNode: the candidate, or the status the node gets."""
    priority = rec.req.priority
    bound = sched.pods.pods
    lower = [p for p in node.pods.values() if p.req.priority < priority and p.key in bound]
    if not lower:
        return None, Rejection((NO_VICTIMS,), False)
    run = _DryRun(sched, rec, node, cycle)
    for victim in lower:
        run.remove(victim)
    why = run.check()
    if why is not None:
        run.undo()
        return None, why
    victims: list[PodRecord] = []
    for pod in _important_first(lower, sched):
        run.restore(pod)
        if run.check() is not None:
            run.remove(pod)
            victims.append(pod)
    run.undo()
    indexed = [sched.pods.pods[v.key] for v in victims]
    return Candidate(node, indexed), None


def preempt(sched: Scheduler, rec: PodRecord, diagnosis: Diagnosis) -> Outcome:
    """DefaultPreemption's PostFilter for a pod no node took."""
    cycle = diagnosis.cycle
    if rec.req.preempt_never:
        return Outcome(NOT_ELIGIBLE)
    total = len(sched.nodes)
    statuses: Counter[str] = Counter()
    judged = 0  # nodes with a status of their own; the rest are "not helpful"
    potential: list[SimNode] = []
    lowest = sched.pods.lowest_priority()
    if diagnosis.prefilter:
        pass  # every node is unresolvable
    elif lowest is None or lowest >= rec.req.priority:
        judged = diagnosis.potential_count  # no pod anywhere has a lower priority
        if judged:
            statuses[NO_VICTIMS] = judged
    else:
        potential = [n for group in diagnosis.potential for n in group]
    wanted = max(MIN_CANDIDATES, len(potential) * MIN_CANDIDATE_PERCENT // 100)
    candidates: list[Candidate] = []
    for node in potential:
        candidate, why = _victims_on(sched, rec, node, cycle)
        if candidate is not None:
            candidates.append(candidate)
            if len(candidates) >= wanted:
                break
        elif why is not None:
            statuses.update(why.reasons)
            judged += 1
    if candidates:
        return Outcome(candidate=min(candidates, key=lambda c: c.rank()))
    if total > judged:
        statuses[NOT_HELPFUL] += total - judged
    return Outcome(fit_error(total, statuses))


__all__ = [
    "NOT_ELIGIBLE",
    "NOT_HELPFUL",
    "NO_VICTIMS",
    "PREFIX",
    "Candidate",
    "Outcome",
    "preempt",
]
