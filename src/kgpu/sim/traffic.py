"""GPU load on workloads: what a ``traffic`` step asks, and where it lands.

A workload under traffic demands ``gpuUtilization`` percent of one GPU in total (300: three
GPUs busy). The demand is spread evenly over the devices its Running pods hold (whole GPUs,
time-sliced or MPS replicas, MIG devices, devices of DRA claims), recomputed whenever it is
read, so the load follows the pods as the workload scales: three pods on three GPUs under 300
run at 100 % each; scaled to six, at 50 %. The simulated telemetry
(:mod:`kgpu.metrics.simulated`) then caps each device at 100 % (a shared GPU sums its pods'
shares), and ``DCGM_FI_DEV_GPU_UTIL``, memory-copy utilisation, power, energy and the per-pod
series follow. Pods of workloads without traffic keep their ``metrics.kgpu.dev/*`` annotations
or the default demand.
"""

from __future__ import annotations

from kgpu.sim.context import SimContext
from kgpu.sim.controllers.base import API_VERSIONS, controller_uid, meta_of
from kgpu.sim.scenario_parts import TRAFFIC_KINDS, ObjectRef
from kgpu.sim.state import PodRecord
from kgpu.store import NotFound

#: Kinds that own pods through objects of their own (a Deployment's ReplicaSets, an MPIJob's
#: launcher Job).
_CHILD_KINDS = {"Deployment": ("ReplicaSet",), "MPIJob": ("Job",)}


def set_traffic(ctx: SimContext, ref: ObjectRef, gpu_utilization: float) -> None:
    """Put ``gpu_utilization`` percent of one GPU of load on the workload (0: no load). It may
    be set before the workload exists; it applies once it does."""
    ctx.traffic[(ref.kind, ref.namespace, ref.name)] = gpu_utilization


def _pods(ctx: SimContext, kind: str, namespace: str, name: str) -> list[PodRecord]:
    if kind == "Pod":
        rec = ctx.pods.get(f"{namespace}/{name}")
        return [rec] if rec is not None else []
    try:
        obj = ctx.store.get(API_VERSIONS[kind], kind, name, namespace)
    except NotFound:
        return []
    uids = {meta_of(obj)["uid"]}
    for child in _CHILD_KINDS.get(kind, ()):
        for owned in ctx.store.list(API_VERSIONS[child], child, namespace):
            if controller_uid(owned) in uids:
                uids.add(meta_of(owned)["uid"])
    return [rec for uid in sorted(uids) for rec in ctx.pods_by_owner.get(uid, {}).values()]


def _devices(ctx: SimContext, rec: PodRecord) -> int:
    """How many GPU devices the pod holds: device-plugin devices, else the GPU and MIG UUIDs a
    DRA driver made visible to its containers."""
    node = ctx.node_by_name.get(rec.node)
    if node is None:
        return 0
    held = sum(len(ids) for ids in node.allocations.get(rec.key, {}).values())
    if held:
        return held
    return sum(
        1
        for env in rec.env.values()
        for part in str(env.get("NVIDIA_VISIBLE_DEVICES", "")).split(",")
        if part.strip().startswith(("GPU-", "MIG-"))
    )


def gpu_loads(ctx: SimContext) -> dict[str, float]:
    """``{"ns/pod": percent of one device}`` on each device the pod holds, for every Running
    pod of a workload under traffic (several workloads' loads on one pod add up)."""
    loads: dict[str, float] = {}
    for (kind, namespace, name), percent in sorted(ctx.traffic.items()):
        running = [
            (rec, n)
            for rec in _pods(ctx, kind, namespace, name)
            if rec.phase == "Running" and (n := _devices(ctx, rec))
        ]
        total = sum(n for _, n in running)
        for rec, _ in running:
            loads[rec.key] = loads.get(rec.key, 0.0) + percent / total
    return loads


__all__ = ["TRAFFIC_KINDS", "gpu_loads", "set_traffic"]
