"""A pod's life on the simulated kubelet: tracked, admitted and started, finished, released.

Admission follows the kubelet's device manager (see :func:`kgpu.sim.nodeside.allocate_devices`):
each container's extended resources are allocated by the node's device-plugin servicer, then
every kubelet plugin (DRA, ComputeDomains) prepares the pod's claims. A device-plugin failure
fails the pod (``UnexpectedAdmissionError``); a plugin failure leaves it waiting, as the
kubelet retries ``FailedPrepareDynamicResources``. Releasing returns devices, unprepares claims
and frees the pod's requests on the node.
"""

from __future__ import annotations

import contextlib
import heapq
from typing import Any

from kgpu.errors import KgpuError
from kgpu.sim import nodeside
from kgpu.sim.context import SimContext
from kgpu.sim.podspec import pod_requirements
from kgpu.sim.state import PodRecord, SimNode
from kgpu.store import NotFound

Obj = dict[str, Any]
#: pod status fields others own (the resourceclaim controller, the scheduler's DRA plugin)
_CLAIM_STATUS = ("resourceClaimStatuses", "extendedResourceClaimStatus")


# -- records -----------------------------------------------------------------------------------
def track_pod(
    ctx: SimContext,
    obj: Obj,
    owner_kind: str = "",
    owner_uid: str = "",
    gang: str = "",
    gang_size: int = 0,
    root: str = "",
) -> PodRecord:
    """Start keeping a record of a stored pod and queue it for scheduling. Its runtime comes
    from the scenario's ``runtimes``, by the name of the workload at its root (or its own)."""
    meta = obj["metadata"]
    key = f"{meta['namespace']}/{meta['name']}"
    rec = PodRecord(
        key=key,
        obj=obj,
        req=pod_requirements(obj),
        seq=next(ctx.seq),
        owner_uid=owner_uid,
        owner_kind=owner_kind,
        gang=gang,
        gang_size=gang_size,
        created_at=ctx.now,
    )
    rec.run_seconds = ctx.scenario.runtimes.get(root or meta["name"])
    ctx.pods[key] = rec
    if owner_uid:
        ctx.pods_by_owner.setdefault(owner_uid, {})[key] = rec
    if gang:
        ctx.gangs.setdefault(gang, {})[key] = rec
    ctx.pending[key] = rec
    return rec


def create_pod(
    ctx: SimContext,
    obj: Obj,
    *,
    owner_kind: str = "",
    owner_uid: str = "",
    gang: str = "",
    gang_size: int = 0,
    root: str = "",
    owned: bool = False,
) -> PodRecord:
    """Admit (:mod:`kgpu.sim.admission`), store and queue a new pod;
    :class:`~kgpu.sim.admission.AdmissionDenied` when the API server would refuse it.
    ``owned``: nobody else holds ``obj`` or any part of it (a controller built it), so it
    becomes the pod's record itself rather than a copy of the stored pod."""
    obj.setdefault("apiVersion", "v1")
    obj.setdefault("kind", "Pod")
    obj.setdefault("status", {"phase": "Pending"})
    obj = ctx.admission.admit_pod(obj)
    with ctx.store.muted():
        if owned:
            ctx.store.create_in_place(obj)
            stored = obj
        else:
            stored = ctx.store.create(obj)
    return track_pod(ctx, stored, owner_kind, owner_uid, gang, gang_size, root)


def delete_pod(ctx: SimContext, key: str) -> None:
    """The pod is deleted: its kubelet tears it down (if it still runs) and it leaves the store."""
    rec = ctx.pods.pop(key, None)
    if rec is None:
        return
    if rec.owner_uid:
        ctx.pods_by_owner.get(rec.owner_uid, {}).pop(key, None)
    if rec.gang:
        ctx.gangs.get(rec.gang, {}).pop(key, None)
    ctx.pending.pop(key, None)
    ctx.to_admit.pop(key, None)
    waiting = ctx.prebinding.pop(key, None)
    if waiting is not None:  # reserved, waiting in PreBind: the scheduler lets go of it
        for listener in ctx.release_listeners:
            listener.pod_released(rec.obj)
        ctx.scheduler.release(rec, waiting[1])
    if rec.node and not rec.finished:
        release(ctx, rec)
    with ctx.store.muted(), contextlib.suppress(NotFound):
        ctx.store.delete("v1", "Pod", rec.name, rec.namespace)


# -- status ------------------------------------------------------------------------------------
def merge_external(rec: PodRecord, stored: Obj) -> None:
    """Keep what others wrote into a pod (labels, annotations, the resourceclaim
    controller's ``status.resourceClaimStatuses``, the scheduler's
    ``status.extendedResourceClaimStatus``) in the simulator's copy."""
    meta = stored.get("metadata") or {}
    for key in ("labels", "annotations"):
        if meta.get(key) is not None:
            rec.obj["metadata"][key] = meta[key]
    rec.obj["metadata"]["resourceVersion"] = meta.get("resourceVersion")
    for kept in _CLAIM_STATUS:
        claims = (stored.get("status") or {}).get(kept)
        if claims is not None:
            rec.obj.setdefault("status", {})[kept] = claims


def set_status(ctx: SimContext, rec: PodRecord, status: Obj) -> None:
    """Replace the pod's status (keeping its claim statuses) and write the pod."""
    for kept in _CLAIM_STATUS:
        claims = (rec.obj.get("status") or {}).get(kept)
        if claims is not None:
            status[kept] = claims
    rec.obj["status"] = status
    write_pod(ctx, rec)


def write_pod(ctx: SimContext, rec: PodRecord) -> None:
    """Publish the simulator's copy, first taking in what others wrote to it since."""
    if ctx.store.touched("Pod", rec.namespace, rec.name):
        with contextlib.suppress(NotFound):
            merge_external(rec, ctx.store.get("v1", "Pod", rec.name, rec.namespace))
    with ctx.store.muted():
        rec.obj["metadata"]["resourceVersion"] = ctx.store.apply_version(rec.obj)


# -- the kubelet -------------------------------------------------------------------------------
def admit_bound(ctx: SimContext) -> bool:
    """Every kubelet starts the pods bound to it; True when any pod started or failed."""
    progress = False
    for rec in list(ctx.to_admit.values()):
        if rec.failed_epoch == ctx.epoch and rec.last_message:
            continue
        node = ctx.node_by_name.get(rec.node)
        if node is None:
            continue
        progress |= start_pod(ctx, rec, node)
    return progress


def _give_back(node: SimNode, ids: list[str]) -> None:
    for i in ids:
        node.device_owner.pop(i, None)


def start_pod(ctx: SimContext, rec: PodRecord, node: SimNode) -> bool:
    """Admit one pod: devices from the device plugin, then the kubelet plugins; True when the
    pod started or failed, False when it waits for a plugin."""
    granted: dict[str, list[str]] = {}
    envs: dict[str, dict[str, str]] = {}
    owned: list[str] = []
    try:
        for cname, ext in rec.req.containers:
            ids: list[str] = []
            env: dict[str, str] = {}
            for resource, size in ext:
                if resource not in node.capacity:
                    continue
                grant = nodeside.allocate_devices(node, resource, size)
                for i in grant.ids:
                    node.device_owner[i] = rec.key
                    owned.append(i)
                ids.extend(grant.ids)
                env.update(grant.envs)
            if ids:
                granted[cname] = ids
            envs[cname] = env
    except (nodeside.AdmissionError, KgpuError) as exc:
        _give_back(node, owned)
        nodeside.observe_pod_resources(node)  # what Allocate held for it is free again
        ctx.to_admit.pop(rec.key, None)
        rec.phase = "Failed"
        rec.failed_at = ctx.now
        set_status(
            ctx,
            rec,
            {
                "phase": "Failed",
                "reason": "UnexpectedAdmissionError",
                "message": f"Allocate failed due to {exc}, which is unexpected",
            },
        )
        ctx.emit("Warning", "UnexpectedAdmissionError", f"Pod/{rec.key}", str(exc))
        release(ctx, rec)
        return True
    node.allocations[rec.key] = {
        c: [i for i in ids if i in node.device_owner] for c, ids in granted.items()
    }
    if owned:
        nodeside.observe_pod_resources(node)  # the agent learns the pod behind its ids
    for plugin in ctx.kubelet_plugins:
        try:
            extra = plugin.prepare(rec.obj, node.name, ctx.store)
        except KgpuError as exc:
            _give_back(node, owned)
            node.allocations.pop(rec.key, None)
            if owned:
                nodeside.observe_pod_resources(node)
            message = f"Failed to prepare dynamic resources: {exc}"
            rec.failed_epoch = ctx.epoch
            if message != rec.last_message:
                rec.last_message = message
                ctx.emit("Warning", "FailedPrepareDynamicResources", f"Pod/{rec.key}", message)
            return False
        for cname, cd in extra.items():
            granted.setdefault(cname, []).extend(cd.devices)
            envs.setdefault(cname, {}).update(cd.env)
    ctx.to_admit.pop(rec.key, None)
    rec.devices, rec.env = granted, envs
    rec.admitted = True
    rec.phase = "Running"
    rec.last_message = ""
    set_status(
        ctx,
        rec,
        {
            "phase": "Running",
            "hostIP": node.ip,
            "startTime": ctx.timestamp(),
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
        },
    )
    if rec.run_seconds is not None:
        heapq.heappush(ctx.timers, (ctx.now + rec.run_seconds, rec.seq, rec.key))
    return True


def finish(ctx: SimContext, rec: PodRecord) -> None:
    """The pod's containers exited 0: it succeeds and its kubelet releases it."""
    release(ctx, rec)
    rec.phase = "Succeeded"
    node = ctx.node_by_name.get(rec.node)
    set_status(
        ctx,
        rec,
        {
            "phase": "Succeeded",
            "hostIP": node.ip if node is not None else "",
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
        },
    )


def release(ctx: SimContext, rec: PodRecord) -> None:
    """The kubelet tears the pod down: devices back to the pool, claims unprepared, its
    requests no longer count on the node."""
    node = ctx.node_by_name.get(rec.node)
    if node is not None:
        given_back = False
        for ids in node.allocations.pop(rec.key, {}).values():
            for i in ids:
                if node.device_owner.get(i) == rec.key:
                    del node.device_owner[i]
                    given_back = True
        if given_back:
            nodeside.observe_pod_resources(node)
        if rec.admitted:
            for plugin in ctx.kubelet_plugins:
                try:
                    plugin.unprepare(rec.obj, node.name, ctx.store)
                except KgpuError as exc:
                    ctx.emit("Warning", "FailedUnprepare", f"Pod/{rec.key}", str(exc))
        if node.pods.pop(rec.key, None) is not None:
            with contextlib.suppress(ValueError):
                node.pod_objs.remove(rec.obj)
    for listener in ctx.release_listeners:
        listener.pod_released(rec.obj)
    ctx.scheduler.release(rec, node)
    ctx.epoch += 1
