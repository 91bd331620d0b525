"""Running the simulated cluster until it is quiet, and moving its clock.

One round is what the control plane and kubelets would do concurrently, in a fixed order so a
run is deterministic: the workload controllers, plugin controllers and the resourceclaim
controller reconcile, the simulator
reads back what they wrote to the store, the scheduler binds pending pods and the kubelets
start bound ones. Rounds repeat until nothing changes (bounded by :data:`MAX_ROUNDS`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

from kgpu.errors import KgpuError
from kgpu.manifests import validate_manifest
from kgpu.node.selectors import parse_taints
from kgpu.sim import node_mig
from kgpu.sim.admission import AdmissionDenied
from kgpu.sim.binding import schedule_pending
from kgpu.sim.context import SimContext
from kgpu.sim.controllers.manager import ControllerManager
from kgpu.sim.node_lifecycle import refresh_dirty, refresh_node
from kgpu.sim.plugins import Controller
from kgpu.sim.pod_lifecycle import admit_bound, delete_pod, finish, merge_external, track_pod
from kgpu.store import NotFound

MAX_ROUNDS = 64


def settle(ctx: SimContext, manager: ControllerManager, controllers: Sequence[Controller]) -> None:
    """Run controllers, the scheduler and the kubelets until nothing changes (bounded)."""
    for _ in range(MAX_ROUNDS):
        progress = node_mig.reconcile_due(ctx, refresh_node)  # node agents act on changes first
        progress |= manager.reconcile()
        for ctrl in controllers:
            try:
                for event in ctrl.reconcile(ctx.store, ctx.now):
                    ctx.record(event)
            except KgpuError as exc:
                ctx.emit("Warning", "ReconcileError", f"Controller/{ctrl.name}", str(exc))
        progress |= sync_external(ctx)
        # the kubelets take in their device plugins' lists as the last round's admissions and
        # releases left them, the DRA drivers republish (after the Node labels plugins wrote
        # were taken in: the Node is written again)
        progress |= refresh_dirty(ctx)
        progress |= schedule_pending(ctx)
        progress |= admit_bound(ctx)
        if not progress and not ctx.store.pending() and not ctx.ownership_dirty:
            return
    ctx.warnings.append(f"the cluster did not settle within {MAX_ROUNDS} rounds")


def advance(
    ctx: SimContext,
    seconds: float,
    manager: ControllerManager,
    controllers: Sequence[Controller],
) -> None:
    """Move the clock. On the way, in time order: pods whose runtime ends succeed, MIG
    managers are called at the times they asked for (a drain's poll and timeout, a retry),
    moments something asked to be woken at (:meth:`SimContext.wake_at`: a controller's delay, a
    binding timeout) arrive, and the periodic work of :mod:`kgpu.sim.loops` runs (scrapes, KEDA
    polls, HPA syncs, cluster-autoscaler scans). At one instant they come in that order. The
    cluster settles after each moment that changed something."""
    target = ctx.now + seconds
    loops = ctx.loops
    while True:
        pod_time = ctx.timers[0][0] if ctx.timers else math.inf
        mig_wake = node_mig.next_wake(ctx)  # a MIG manager polling a drain or backing off
        mig_time = math.inf if mig_wake is None else mig_wake
        wake_time = ctx.wakeups[0] if ctx.wakeups else math.inf
        loop_time = loops.next_time()
        when = min(pod_time, mig_time, wake_time, loop_time)
        if when > target:
            break
        ctx.now = max(ctx.now, when)
        if pod_time <= when:
            if not _finish_running(ctx, heapq.heappop(ctx.timers)[2]):
                continue
            while ctx.timers and ctx.timers[0][0] <= ctx.now:
                _finish_running(ctx, heapq.heappop(ctx.timers)[2])
        elif mig_time <= when:
            if not node_mig.reconcile_due(ctx, refresh_node):
                continue
        elif wake_time <= when:
            while ctx.wakeups and ctx.wakeups[0] <= ctx.now:
                heapq.heappop(ctx.wakeups)
            ctx.epoch += 1  # time-dependent verdicts (a binding timeout) may have changed
        elif not loops.pop().action(ctx.now) and not ctx.store.pending():
            continue
        settle(ctx, manager, controllers)
        for observe in ctx.moment_observers:
            observe()
    ctx.now = target


def _finish_running(ctx: SimContext, key: str) -> bool:
    """Finish the pod if it still runs (it may have been deleted or evicted since)."""
    rec = ctx.pods.get(key)
    if rec is None or rec.phase != "Running":
        return False
    finish(ctx, rec)
    return True


def sync_external(ctx: SimContext) -> bool:
    """Take in what controllers and plugins wrote: Node labels, taints and cordons become the
    node's own; Pods others created are tracked, changed ones merged, deleted ones torn down."""
    changes = ctx.store.drain()
    if not changes:
        return False
    ctx.epoch += 1
    for _ns, name in sorted(changes.get("Node", ())):
        node = ctx.node_by_name.get(name)
        if node is None:
            continue
        try:
            obj = ctx.store.get("v1", "Node", name)
        except NotFound:
            continue
        labels = (obj.get("metadata") or {}).get("labels") or {}
        for k in set(node.labels) | set(labels):
            if node.labels.get(k) != labels.get(k):
                if k in labels:
                    node.scenario_labels[k] = labels[k]
                else:
                    node.scenario_labels.pop(k, None)
        spec = obj.get("spec") or {}
        node.taints = parse_taints(spec.get("taints"))
        node.unschedulable = bool(spec.get("unschedulable"))
        refresh_node(ctx, node)
    for ns, name in sorted(changes.get("Pod", ())):
        key = f"{ns}/{name}"
        try:
            obj = ctx.store.get("v1", "Pod", name, ns)
        except NotFound:
            if key in ctx.pods:
                delete_pod(ctx, key)
            continue
        if key in ctx.pods:
            merge_external(ctx.pods[key], obj)
            continue
        problems = validate_manifest(obj)
        if problems:
            ctx.emit("Warning", "InvalidPod", f"Pod/{key}", "; ".join(str(p) for p in problems))
            continue
        try:  # the API server admits what others create
            admitted = ctx.admission.admit_pod(obj)
        except AdmissionDenied as exc:
            ctx.emit("Warning", "FailedCreate", f"Pod/{key}", str(exc))
            with ctx.store.muted():
                ctx.store.delete("v1", "Pod", name, ns)
            continue
        if admitted != obj:
            with ctx.store.muted():
                obj = ctx.store.update(admitted)
        owner: dict[str, Any] = next(
            (o for o in (obj["metadata"].get("ownerReferences") or []) if o.get("controller")),
            {},
        )
        track_pod(ctx, obj, str(owner.get("kind", "")), str(owner.get("uid", "")))
    return True
