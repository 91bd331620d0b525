"""DRA scheduling throughput: 5,000 GB200 nodes (20,000 GPUs), 10,000 pods.

Each pod has one claim from a ResourceClaimTemplate asking for 1 or 4 GPUs whose product a CEL
selector picks (``device.attributes['gpu.nvidia.com'].productName == 'NVIDIA GB200'``). Pods are
scheduled one after another the way kube-scheduler does it: the DynamicResources plugin's
PreFilter (which creates the pod's claim from the template), Filter on nodes starting where the
previous pod stopped until ``numFeasibleNodesToFind`` feasible nodes are found (kube-scheduler's
adaptive percentageOfNodesToScore: 50% - nodes/125, at least 5% and 100 nodes), then Reserve
on the feasible node with the fewest free GPUs (bin packing), which writes the claim's
allocation and reservedFor to the in-memory object store. Measured: pods/s over the
scheduling loop, peak RSS, and the memory of the allocator's slice index.

    python bench/dra.py                    # the full run
    python bench/dra.py --nodes 500 --pods 5000 --feasible 50   # a scheduler_perf-sized run
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import resource
import time
import tracemalloc

from kgpu.dra.allocator import SliceIndex
from kgpu.dra.classes import device_classes
from kgpu.dra.slices import resource_slices
from kgpu.drivers.publish import publish_slices
from kgpu.hardware.profiles import load_machine
from kgpu.sim.dra_scheduler import DraSchedulerPlugin, ensure_classes
from kgpu.sim.plugins import NodeInfo
from kgpu.store import MemoryStore

API = "resource.k8s.io/v1"
SELECTOR = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA GB200'"


def feasible_to_find(nodes: int) -> int:
    """kube-scheduler's numFeasibleNodesToFind with the default percentageOfNodesToScore."""
    if nodes < 100:
        return nodes
    percentage = max(5, 50 - nodes // 125)
    return max(100, nodes * percentage // 100)


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def template(name: str, count: int) -> dict:
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "gpu.nvidia.com",
                                "count": count,
                                "selectors": [{"cel": {"expression": SELECTOR}}],
                            },
                        }
                    ]
                }
            }
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument(
        "--four-share",
        type=float,
        default=0.2,
        help="share of pods asking for 4 GPUs (the rest ask for 1)",
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
        help="pick the feasible node with the fewest free GPUs (bin packing, like "
        "NodeResourcesFit MostAllocated) or the first one found",
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    rss0 = rss_mib()
    t0 = time.perf_counter()
    store = MemoryStore()
    ensure_classes(store, device_classes())
    store.create(template("one-gpu", 1))
    store.create(template("four-gpus", 4))
    names = [f"gb200-{i:05d}" for i in range(args.nodes)]
    infos = []
    for i, name in enumerate(names):
        clique = f"c0ffee00-0000-4000-8000-{i // 18:012x}.{i % 18}"
        machine = load_machine("gb200", hostname=name, clique=clique)
        publish_slices(store, "gpu.nvidia.com", name, resource_slices(machine, name))
        infos.append(NodeInfo(name, {}, {"metadata": {"name": name}}))
    rng = random.Random(args.seed)
    pods = []
    for i in range(args.pods):
        four = rng.random() < args.four_share
        pods.append(
            store.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"job-{i:05d}", "namespace": "default"},
                    "spec": {
                        "containers": [{"name": "main", "image": "cuda"}],
                        "resourceClaims": [
                            {
                                "name": "gpus",
                                "resourceClaimTemplateName": "four-gpus" if four else "one-gpu",
                            }
                        ],
                    },
                }
            )
        )
    setup_s = time.perf_counter() - t0

    # memory of the allocator's view of 5,000 nodes' slices, measured on its own
    gc.collect()
    tracemalloc.start()
    index = SliceIndex(store.list(API, "ResourceSlice"))
    index_mib = tracemalloc.get_traced_memory()[0] / 2**20
    tracemalloc.stop()
    del index

    plugin = DraSchedulerPlugin()
    want = args.feasible or feasible_to_find(len(infos))
    start = 0
    scheduled = unschedulable = filters = 0
    requested = sum(
        4 if p["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "four-gpus" else 1
        for p in pods
    )
    t1 = time.perf_counter()
    for pod in pods:
        if plugin.prefilter(pod, store):
            unschedulable += 1
            continue
        found = []
        checked = 0
        n = len(infos)
        while checked < n and len(found) < want:
            info = infos[(start + checked) % n]
            checked += 1
            filters += 1
            if plugin.filter(pod, info, store) is None:
                found.append(info)
        start = (start + checked) % n
        if not found:
            unschedulable += 1
            continue
        best = found[0]
        if args.score == "most-allocated" and len(found) > 1:
            best = min(found, key=plugin.free_devices)
        plugin.reserve(pod, best, store)
        scheduled += 1
    sched_s = time.perf_counter() - t1

    result = {
        "machine": f"{platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}",
        "nodes": len(infos),
        "gpus": len(infos) * 4,
        "pods": len(pods),
        "gpus_requested": requested,
        "scheduled": scheduled,
        "unschedulable": unschedulable,
        "feasible_nodes_to_find": want,
        "score": args.score,
        "filter_calls": filters,
        "setup_s": round(setup_s, 1),
        "schedule_s": round(sched_s, 2),
        "pods_per_s": round(len(pods) / sched_s, 1),
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


if __name__ == "__main__":
    main()
