"""DRA scheduling throughput through the simulator's DynamicResources plugin.

Two shapes:

* ``gb200`` (default): 5,000 GB200 nodes (20,000 GPUs, ``kgpu``'s own ResourceSlices), 10,000
  pods each with one claim from a ResourceClaimTemplate asking for 1 or 4 GPUs whose product a
  CEL selector picks (``device.attributes['gpu.nvidia.com'].productName == 'NVIDIA GB200'``);
* ``scheduler-perf``: kube-scheduler's own benchmark ``SchedulingWithResourceClaimTemplate /
  5000pods_500nodes``: 500 nodes with 10 devices each of ``test-driver.cdi.k8s.io``, a class
  selecting the driver, 5,000 pods with one claim for one device, filling the cluster exactly
  (kube-scheduler's published threshold: 40-56 pods/s).

Pods are scheduled one after another the way kube-scheduler does it: the DynamicResources
plugin's PreFilter (which creates the pod's claim from the template), Filter on nodes starting
where the previous pod stopped until ``numFeasibleNodesToFind`` feasible nodes are found
(kube-scheduler's adaptive percentageOfNodesToScore: 50% - nodes/125, at least 5% and 100
nodes), then Reserve on the feasible node with the fewest free devices (bin packing), which
writes the claim's allocation and reservedFor to the in-memory object store. Every allocator
feature gate is on (1.36 defaults). Measured: pods/s over the scheduling loop (after the plugin
has read the cluster, as kube-scheduler's informers sync before its first cycle; that read is
``sync_s``), peak RSS, and the memory of the allocator's slice index.

    python bench/dra.py                          # 5,000 GB200 nodes, 10,000 pods
    python bench/dra.py --shape scheduler-perf   # 500 nodes x 10 devices, 5,000 pods
    python bench/dra.py --nodes 500 --pods 2000 --profile 25   # where the time goes
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import platform
import pstats
import random
import resource
import time
import tracemalloc
from typing import Any

from kgpu.dra.allocator import SliceIndex
from kgpu.dra.classes import device_classes
from kgpu.dra.slices import resource_slices
from kgpu.drivers.publish import publish_slices
from kgpu.hardware.profiles import load_machine
from kgpu.sim.controllers.resourceclaim import ResourceClaimController
from kgpu.sim.dra_scheduler import DraSchedulerPlugin, ensure_classes
from kgpu.sim.plugins import NodeInfo
from kgpu.store import MemoryStore
from kgpu.testing.manifests import claim_template

API = "resource.k8s.io/v1"
SELECTOR = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA GB200'"
TEST_DRIVER = "test-driver.cdi.k8s.io"


def feasible_to_find(nodes: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind with the default percentageOfNodesToScore."""
    if nodes < 100:
        return nodes
    percentage = max(5, 50 - nodes // 125)
    return max(100, nodes * percentage // 100)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pod(i: int, template_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"job-{i:05d}", "namespace": "default"},
        "spec": {
            "containers": [{"name": "main", "image": "cuda"}],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template_name}],
        },
    }


def gb200_cluster(store: MemoryStore, args: argparse.Namespace) -> tuple[list[NodeInfo], int]:
    """Nodes and pods of the GB200 shape; returns (nodes, devices requested)."""
    ensure_classes(store, device_classes())
    store.create(claim_template("one-gpu", 1, "gpu.nvidia.com", SELECTOR))
    store.create(claim_template("four-gpus", 4, "gpu.nvidia.com", SELECTOR))
    infos = []
    for i in range(args.nodes):
        name = f"gb200-{i:05d}"
        clique = f"c0ffee00-0000-4000-8000-{i // 18:012x}.{i % 18}"
        machine = load_machine("gb200", hostname=name, clique=clique)
        publish_slices(store, "gpu.nvidia.com", name, resource_slices(machine, name))
        infos.append(NodeInfo(name, {}, {"metadata": {"name": name}}))
    rng = random.Random(args.seed)
    requested = 0
    for i in range(args.pods):
        four = rng.random() < args.four_share
        requested += 4 if four else 1
        store.create(pod(i, "four-gpus" if four else "one-gpu"))
    return infos, requested


def scheduler_perf_cluster(
    store: MemoryStore, args: argparse.Namespace
) -> tuple[list[NodeInfo], int]:
    """kube-scheduler's scheduler_perf DRA shape: nodes with 10 test-driver devices each."""
    store.create(
        {
            "apiVersion": API,
            "kind": "DeviceClass",
            "metadata": {"name": "test-class"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{TEST_DRIVER}"'}}]},
        }
    )
    store.create(claim_template("test-claim-template", 1, "test-class", None))
    infos = []
    for i in range(args.nodes):
        name = f"scheduler-perf-dra-{i:04d}"
        store.create(
            {
                "apiVersion": API,
                "kind": "ResourceSlice",
                "metadata": {"name": f"{name}-{TEST_DRIVER}"},
                "spec": {
                    "driver": TEST_DRIVER,
                    "nodeName": name,
                    "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": f"device-{d:02d}"} for d in range(args.devices)],
                },
            }
        )
        infos.append(NodeInfo(name, {}, {"metadata": {"name": name}}))
    for i in range(args.pods):
        store.create(pod(i, "test-claim-template"))
    return infos, args.pods


def schedule(
    plugin: DraSchedulerPlugin,
    store: MemoryStore,
    pods: list[dict[str, Any]],
    infos: list[NodeInfo],
    want: int,
    score: str,
) -> tuple[int, int, int]:
    """The scheduling loop: (scheduled, unschedulable, filter calls)."""
    start = scheduled = unschedulable = filters = 0
    n = len(infos)
    for p in pods:
        if plugin.prefilter(p, store):
            unschedulable += 1
            continue
        found = []
        checked = 0
        while checked < n and len(found) < want:
            info = infos[(start + checked) % n]
            checked += 1
            if plugin.filter(p, info, store) is None:
                found.append(info)
        filters += checked
        start = (start + checked) % n
        if not found:
            unschedulable += 1
            continue
        best = found[0]
        if score == "most-allocated" and len(found) > 1:
            best = min(found, key=plugin.free_devices)
        plugin.reserve(p, best, store)
        scheduled += 1
    return scheduled, unschedulable, filters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=("gb200", "scheduler-perf"), default="gb200")
    ap.add_argument("--nodes", type=int, default=0, help="default: 5000 (gb200), 500")
    ap.add_argument("--pods", type=int, default=0, help="default: 10000 (gb200), 5000")
    ap.add_argument("--devices", type=int, default=10, help="devices per node (scheduler-perf)")
    ap.add_argument(
        "--four-share",
        type=float,
        default=0.2,
        help="gb200: share of pods asking for 4 GPUs (the rest ask for 1)",
    )
    ap.add_argument(
        "--feasible",
        type=int,
        default=0,
        help="feasible nodes to find per pod (0: kube-scheduler's default)",
    )
    ap.add_argument(
        "--score",
        choices=("most-allocated", "first"),
        default="most-allocated",
        help="pick the feasible node with the fewest free devices (bin packing, like "
        "NodeResourcesFit MostAllocated) or the first one found",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--profile", type=int, default=0, help="print the N costliest functions")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    gb200 = args.shape == "gb200"
    args.nodes = args.nodes or (5000 if gb200 else 500)
    args.pods = args.pods or (10000 if gb200 else 5000)

    rss0 = rss_mib()
    t0 = time.perf_counter()
    store = MemoryStore()
    infos, requested = (gb200_cluster if gb200 else scheduler_perf_cluster)(store, args)
    pods = store.list("v1", "Pod")
    pods.sort(key=lambda p: p["metadata"]["name"])
    setup_s = time.perf_counter() - t0

    # memory of the allocator's view of the cluster's slices, measured on its own
    gc.collect()
    tracemalloc.start()
    index = SliceIndex(store.list(API, "ResourceSlice"))
    index_mib = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    del index

    # the resourceclaim controller makes each pod's claims from its template before the
    # scheduler meets the pod (kube-controller-manager's job, not timed here)
    t1 = time.perf_counter()
    claims = ResourceClaimController()
    for p in pods:
        claims.sync_pod(p, store)
    claims_s = time.perf_counter() - t1
    plugin = DraSchedulerPlugin()
    t1 = time.perf_counter()
    plugin.sync(store)  # kube-scheduler's informers sync before its first cycle
    sync_s = time.perf_counter() - t1
    want = args.feasible or feasible_to_find(len(infos))
    profiler = cProfile.Profile() if args.profile else None
    t1 = time.perf_counter()
    if profiler:
        profiler.enable()
    scheduled, unschedulable, filters = schedule(plugin, store, pods, infos, want, args.score)
    if profiler:
        profiler.disable()
    sched_s = time.perf_counter() - t1
    if scheduled == 0:  # a throughput of pods that never reached Filter measures nothing
        raise SystemExit(f"no pod was scheduled ({unschedulable} unschedulable): bench broken")

    result = {
        "machine": f"{platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}",
        "shape": args.shape,
        "nodes": len(infos),
        "devices": len(infos) * (4 if gb200 else args.devices),
        "pods": len(pods),
        "devices_requested": requested,
        "scheduled": scheduled,
        "unschedulable": unschedulable,
        "feasible_nodes_to_find": want,
        "score": args.score,
        "filter_calls": filters,
        "setup_s": round(setup_s, 1),
        "claims_s": round(claims_s, 2),
        "sync_s": round(sync_s, 2),
        "schedule_s": round(sched_s, 2),
        "pods_per_s": round(len(pods) / sched_s, 1),
        "pods_per_s_with_sync": round(len(pods) / (sched_s + sync_s), 1),
        "us_per_filter": round(sched_s / max(filters, 1) * 1e6, 2),
        "slice_index_mib": round(index_mib, 1),
        "peak_rss_mib": round(rss_mib(), 1),
        "rss_growth_mib": round(rss_mib() - rss0, 1),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:>24}: {v}")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
