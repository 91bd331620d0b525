"""The scheduling cycle the simulator runs each round: pending pods to nodes.

kube-scheduler's decisions come from :class:`kgpu.sim.scheduler.Scheduler`; this module is the
queue around it: higher priority first, then by creation (the PrioritySort queue), an MPIJob's
workers placed all or none, a pod naming
``spec.nodeName`` handed straight to its kubelet (which may reject it, as the real one does with
``OutOf<resource>``), and a pod that failed not retried until something in the cluster changed.

Between Reserve and the bind, plugins with a ``prebind`` (DRA binding conditions, see
:mod:`kgpu.sim.dra_binding`) may hold the pod: it waits in ``ctx.prebinding`` with its node's
resources assumed (``BindingConditionsPending``) and is asked again every round and at the time
the plugin names; an error is upstream's ``FailedScheduling`` (``running PreBind plugin
"<name>": <error>``), the pod is unreserved and queued again.

A pod no node takes goes through the PostFilter plugins, as kube-scheduler's framework runs
them: DynamicResources (a plugin's ``post_filter`` hook when it frees something, e.g.
``deallocation of ResourceClaim completed``; else ``still not schedulable`` for a pod with
claims, and in 1.32 ``no new claims to deallocate`` for one without), then DefaultPreemption
(:mod:`kgpu.sim.preemption`),
whose result ends the ``FailedScheduling`` message -- or, when it finds victims, evicts them and
nominates the node, and the message is the filters' alone. The pass then ends, so that the
preemptor, first in the queue by its priority, takes the room it made before pods of lower
priority can (upstream keeps it for the nominated pod).

Gangs are the simulator's own: kube-scheduler has no gang scheduling (clusters add the
scheduler-plugins co-scheduling plugin or Kueue for it). An MPIJob's workers are placed all or
none so that a job never holds half its GPUs; a gang does not preempt, and its pods' message is
the filters' for the member that did not fit.
"""

from __future__ import annotations

from typing import Any

from kgpu.errors import KgpuError
from kgpu.sim.context import SimContext
from kgpu.sim.plugins import PreBindResult
from kgpu.sim.pod_lifecycle import delete_pod, set_status, write_pod
from kgpu.sim.preemption import PREFIX, Candidate, preempt
from kgpu.sim.scheduler import Placement
from kgpu.sim.state import PodRecord, SimNode

NO_NEW_CLAIMS = "no new claims to deallocate"
STILL_NOT_SCHEDULABLE = "still not schedulable"


def schedule_pending(ctx: SimContext) -> bool:
    """One pass over the scheduling queue; True when any pod was bound or rejected. A pod
    placed can make a pod waiting on pod affinity or topology spread schedulable (upstream
    requeues those on pod events), so binding one then counts as a change for them."""
    for plugin in ctx.scheduler.plugins:
        if hasattr(plugin, "now"):
            plugin.now = ctx.now  # time-dependent verdicts (binding timeouts)
    progress = _prebind_waiting(ctx)
    seen_gangs: set[str] = set()
    follows_pods = any(r.req.affinity_terms or r.req.spread for r in ctx.pending.values())
    queue = list(ctx.pending.values())
    if any(r.req.priority for r in queue):
        queue.sort(key=lambda r: -r.req.priority)  # stable: by creation within a priority
    # A pod of a template that just failed, with nothing changed since, fails alike: the
    # verdict is reused (every pod still gets its FailedScheduling event and status), so
    # 100,000 replicas on two nodes cost one filter pass, not 100,000. Cleared when anything
    # is reserved or bound (the only changes a pass makes before it returns).
    verdicts: dict[str, str] = {}
    for rec in queue:
        if rec.key not in ctx.pending or rec.failed_epoch == ctx.epoch:
            continue
        template = _template(rec)
        if template is not None and template in verdicts:
            _unschedulable(ctx, rec, verdicts[template])
            continue
        if rec.req.node_name:
            progress |= _bind_direct(ctx, rec)
            continue
        if rec.gang:
            if rec.gang in seen_gangs:
                continue
            seen_gangs.add(rec.gang)
            progress |= _schedule_gang(ctx, rec.gang)
            continue
        if not ctx.dra and rec.obj["spec"].get("resourceClaims"):
            _unschedulable(
                ctx,
                rec,
                f"0/{len(ctx.nodes)} nodes are available: pod uses resource claims but "
                "no DRA scheduler plugin is loaded.",
            )
            continue
        placement = ctx.scheduler.find_node(rec)
        node = placement.node
        if node is None:
            preempted, reusable = _post_filter(ctx, rec, placement)
            if preempted:
                return True  # pods were preempted for this one: it goes first next pass
            if reusable and template is not None:
                verdicts[template] = rec.last_message
            continue
        verdicts.clear()
        try:
            ctx.scheduler.reserve(rec, node)
        except KgpuError as exc:
            _unschedulable(ctx, rec, f"0/{len(ctx.nodes)} nodes are available: 1 {exc}.")
            continue
        progress = True
        if _prebind(ctx, rec, node, first=True):
            _bind(ctx, rec, node)
    if progress and follows_pods:
        ctx.epoch += 1
    return progress


def _template(rec: PodRecord) -> str | None:
    """The ReplicaSet or Job whose template made this pod (its owner's uid): pods of one
    template ask the scheduler the same question. None for pods whose verdict depends on more
    than the template and the nodes (claims, gangs, pod affinity, spread, a node name)."""
    if rec.gang or rec.req.node_name or rec.req.affinity_terms or rec.req.spread:
        return None
    if rec.obj["spec"].get("resourceClaims"):
        return None
    for ref in rec.obj["metadata"].get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") in ("ReplicaSet", "Job") and ref.get("uid"):
            return f"{ref['kind']}/{ref['uid']}"
    return None


def _prebind_plugins(ctx: SimContext) -> list[Any]:
    return [p for p in ctx.scheduler.plugins if hasattr(p, "prebind")]


def _prebind(ctx: SimContext, rec: PodRecord, node: SimNode, *, first: bool) -> bool:
    """Run the plugins' PreBind; True when the pod may be bound now. A waiting pod is parked
    in ``ctx.prebinding``; a failing one is unreserved and queued again."""
    for plugin in _prebind_plugins(ctx):
        result: PreBindResult = plugin.prebind(rec.obj, node.name, ctx.store)
        if result.error:
            ctx.prebinding.pop(rec.key, None)
            ctx.scheduler.unreserve(rec, node)
            ctx.pending[rec.key] = rec
            message = f'running PreBind plugin "{plugin.name}": {result.error}'
            rec.last_message = message
            rec.failed_epoch = ctx.epoch
            ctx.emit("Warning", "FailedScheduling", f"Pod/{rec.key}", message)
            return False
        if result.waiting:
            if result.wake_at is not None:
                ctx.wake_at(result.wake_at)
            if first:
                ctx.pending.pop(rec.key, None)
                ctx.prebinding[rec.key] = (rec, node)
                ctx.emit(
                    "Normal",
                    "BindingConditionsPending",
                    f"Pod/{rec.key}",
                    f"waiting for binding conditions for device on node {node.name}",
                )
            return False
    ctx.prebinding.pop(rec.key, None)
    return True


def _prebind_waiting(ctx: SimContext) -> bool:
    """Ask again for every pod waiting in PreBind; True when one was bound or failed."""
    progress = False
    for key, (rec, node) in list(ctx.prebinding.items()):
        if ctx.node_by_name.get(node.name) is not node:  # the node went away
            ctx.prebinding.pop(key, None)
            ctx.pending[key] = rec
            progress = True
            continue
        if _prebind(ctx, rec, node, first=False):
            _bind(ctx, rec, node)
            progress = True
        elif key not in ctx.prebinding:
            progress = True
    return progress


def _post_filter(ctx: SimContext, rec: PodRecord, placement: Placement) -> tuple[bool, bool]:
    """The PostFilter plugins for a pod no node took, in the framework's order (DynamicResources,
    then DefaultPreemption): (whether preemption evicted pods, whether the verdict holds for
    an identical pod now: nothing was freed or evicted). A scheduler plugin with a
    ``post_filter(pod, store)`` hook speaks for DynamicResources when it frees something (its
    message, e.g. ``deallocation of ResourceClaim completed``)."""
    if placement.diagnosis is None:  # no nodes at all: no FitError, no PostFilter
        _unschedulable(ctx, rec, placement.message)
        return False, True
    notes = []
    said = None
    for plugin in ctx.scheduler.plugins:
        hook = getattr(plugin, "post_filter", None)
        said = hook(rec.obj, ctx.store) if hook is not None else None
        if said:
            break
    if said:
        notes.append(str(said))
    elif ctx.dra:
        if rec.obj["spec"].get("resourceClaims"):
            notes.append(STILL_NOT_SCHEDULABLE)
        elif ctx.scheduler.version.dra_note_without_claims:
            notes.append(NO_NEW_CLAIMS)
    outcome = preempt(ctx.scheduler, rec, placement.diagnosis)
    if outcome.candidate is not None:
        _unschedulable(ctx, rec, placement.message, nominated=outcome.candidate.node.name)
        _evict(ctx, rec, outcome.candidate)
        return True, False
    notes.append(PREFIX + outcome.message)
    _unschedulable(ctx, rec, f"{placement.message} {', '.join(notes)}")
    return False, not said


def _evict(ctx: SimContext, preemptor: PodRecord, candidate: Candidate) -> None:
    """The victims are deleted (their controllers replace them) with upstream's event."""
    uid = preemptor.obj["metadata"].get("uid", "")
    for victim in candidate.victims:
        ctx.emit(
            "Normal",
            "Preempted",
            f"Pod/{victim.key}",
            f"Preempted by pod {uid} on node {candidate.node.name}",
        )
        delete_pod(ctx, victim.key)


def _schedule_gang(ctx: SimContext, gang: str) -> bool:
    members = ctx.gangs.get(gang, {})
    waiting = [r for r in members.values() if r.key in ctx.pending]
    bound = sum(1 for r in members.values() if r.node)
    size = max((r.gang_size for r in members.values()), default=0)
    if len(waiting) + bound < size:
        return False  # the controller has not created every member yet
    placed, failed, message = ctx.scheduler.place_gang(waiting)
    if failed is not None:
        for rec in waiting:
            _unschedulable(ctx, rec, message)
        return False
    for rec, node in placed:
        _bind(ctx, rec, node)
    return True


def _bind_direct(ctx: SimContext, rec: PodRecord) -> bool:
    """A pod with ``spec.nodeName``: no scheduler; the kubelet admits or rejects it."""
    node = ctx.node_by_name.get(rec.req.node_name)
    if node is None:
        rec.failed_epoch = ctx.epoch
        return False
    short = [r for r, a in rec.req.requests if a > node.free(r)]
    if short:
        r = short[0]
        rec.phase = "Failed"
        ctx.pending.pop(rec.key, None)
        status = rec.obj.setdefault("status", {})
        status.update(
            phase="Failed",
            reason=f"OutOf{r}",
            message=f"Pod was rejected: Node didn't have enough resource: {r}",
        )
        write_pod(ctx, rec)
        ctx.emit("Warning", f"OutOf{r}", f"Pod/{rec.key}", f"Node didn't have enough resource: {r}")
        return True
    ctx.scheduler.assume(rec, node)
    _bind(ctx, rec, node, scheduled=False)
    return True


def _unschedulable(ctx: SimContext, rec: PodRecord, message: str, nominated: str = "") -> None:
    rec.failed_epoch = ctx.epoch
    if message == rec.last_message and not nominated:
        return
    rec.last_message = message
    ctx.emit("Warning", "FailedScheduling", f"Pod/{rec.key}", message)
    status = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
            }
        ],
    }
    if nominated:
        status["nominatedNodeName"] = nominated
    set_status(ctx, rec, status)


def _bind(ctx: SimContext, rec: PodRecord, node: SimNode, scheduled: bool = True) -> None:
    ctx.pending.pop(rec.key, None)
    rec.node = node.name
    rec.last_message = ""
    rec.obj["spec"]["nodeName"] = node.name
    node.pods[rec.key] = rec
    node.pod_objs.append(rec.obj)
    if scheduled:
        ctx.emit(
            "Normal",
            "Scheduled",
            f"Pod/{rec.key}",
            f"Successfully assigned {rec.key} to {node.name}",
        )
    ctx.to_admit[rec.key] = rec
