"""The scheduling cycle the simulator runs each round: pending pods to nodes.

kube-scheduler's decisions come from :class:`kgpu.sim.scheduler.Scheduler`; this module is the
queue around it: FIFO by creation, an MPIJob's workers placed all or none, a pod naming
``spec.nodeName`` handed straight to its kubelet (which may reject it, as the real one does with
``OutOf<resource>``), and a pod that failed not retried until something in the cluster changed.

Between Reserve and the bind, plugins with a ``prebind`` (DRA binding conditions, see
:mod:`kgpu.sim.dra_binding`) may hold the pod: it waits in ``ctx.prebinding`` with its node's
resources assumed (``BindingConditionsPending``) and is asked again every round and at the time
the plugin names; an error is upstream's ``FailedScheduling`` (``running PreBind plugin
"<name>": <error>``), the pod is unreserved and queued again. When a pod fits nowhere, plugins
with a ``post_filter`` may free something for its next attempt (their message ends the
``FailedScheduling`` text, as kube-scheduler's PostFilter messages do).
"""

from __future__ import annotations

from typing import Any

from kgpu.errors import KgpuError
from kgpu.sim.context import SimContext
from kgpu.sim.plugins import PreBindResult
from kgpu.sim.pod_lifecycle import set_status, write_pod
from kgpu.sim.state import PodRecord, SimNode


def schedule_pending(ctx: SimContext) -> bool:
    """One pass over the scheduling queue; True when any pod was bound or rejected."""
    for plugin in ctx.scheduler.plugins:
        if hasattr(plugin, "now"):
            plugin.now = ctx.now  # time-dependent verdicts (binding timeouts)
    progress = _prebind_waiting(ctx)
    seen_gangs: set[str] = set()
    for rec in list(ctx.pending.values()):
        if rec.key not in ctx.pending or rec.failed_epoch == ctx.epoch:
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
            _unschedulable(ctx, rec, _post_filter(ctx, rec, placement.message))
            continue
        try:
            ctx.scheduler.reserve(rec, node)
        except KgpuError as exc:
            _unschedulable(ctx, rec, f"0/{len(ctx.nodes)} nodes are available: 1 {exc}.")
            continue
        progress = True
        if _prebind(ctx, rec, node, first=True):
            _bind(ctx, rec, node)
    return progress


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


def _post_filter(ctx: SimContext, rec: PodRecord, message: str) -> str:
    """Plugins' PostFilter for a pod that fits nowhere: the first one that frees something
    adds its message to the FitError text."""
    for plugin in ctx.scheduler.plugins:
        hook = getattr(plugin, "post_filter", None)
        if hook is None:
            continue
        said = hook(rec.obj, ctx.store)
        if said:
            return f"{message} {said}"
    return message


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


def _unschedulable(ctx: SimContext, rec: PodRecord, message: str) -> None:
    rec.failed_epoch = ctx.epoch
    if message == rec.last_message:
        return
    rec.last_message = message
    ctx.emit("Warning", "FailedScheduling", f"Pod/{rec.key}", message)
    set_status(
        ctx,
        rec,
        {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": message,
                }
            ],
        },
    )


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
