"""Benchmark: kgpu sim schedules 10,000 GPU pods onto 1,000 dgx-h100 nodes.

Two Deployments (the pods are real Deployment -> ReplicaSet -> Pod expansions, scheduled by the
simulator's kube-scheduler and admitted by simulated kubelets that call the device-plugin
servicer's GetPreferredAllocation and Allocate for every container):

* ``mixed``: 8,000 single-GPU pods then 2,000 8-GPU pods. The 8,000 GPUs fill up, so most 8-GPU
  pods stay Pending with a kube-scheduler FailedScheduling message (counted work too).
* ``packed``: 250 8-GPU pods first, then 6,000 single-GPU pods (together exactly the 8,000
  GPUs, every pod placed), then 3,750 pods that ask only for CPU, to total 10,000. (Applied the
  other way round, the single-GPU pods spread over every node, as kube-scheduler's
  LeastAllocated scoring does, and no node keeps 8 GPUs free for the big pods.)
* ``affinity``: the inter-pod filters at work, on nodes in four zones: 20% of the pods spread
  over the zones (``DoNotSchedule``, maxSkew 1), 10% (at most one per node) with required
  anti-affinity on the hostname, 10% with required affinity to the spread pods' zone, the rest
  plain single-GPU pods.

Reports pods per second over the whole run (controllers + scheduling + kubelets; node setup is
timed separately) from an untraced run, and peak memory from a second run under tracemalloc
(Python heap peak) plus the process' max RSS.

``--scaling`` runs one case (``--case``, default ``mixed``) at 1,000 nodes / 10,000 pods, 5,000 /
50,000 and 12,500 / 100,000 (100,000 GPUs), each size in a fresh process so its peak RSS is its
own, and prints a table: how time and memory grow with the cluster.

Usage: python bench/sim.py [--nodes 1000] [--pods 10000] [--case ...] [--plugins] [--scaling]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from typing import Any

from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.testing.manifests import deployment as make_deployment


def deployment(name: str, replicas: int, gpus: int, cpu: str = "", **spec: Any) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    if cpu:
        limits["cpu"] = cpu
    return make_deployment(name, replicas, limits, container="main", image="cuda", **spec)


def _term(app: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def affinity_case(nodes: int, pods: int) -> list[dict[str, Any]]:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}},
        }
    ]
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    lonely = {"podAntiAffinity": {required: [_term("lonely", "kubernetes.io/hostname")]}}
    near = {"podAffinity": {required: [_term("spread", ZONE)]}}
    return [
        deployment("spread", pods // 5, 1, topologySpreadConstraints=spread),
        deployment("lonely", min(pods // 10, nodes), 1, affinity=lonely),
        deployment("near", pods // 10, 1, affinity=near),
        deployment("plain", pods - pods // 5 - min(pods // 10, nodes) - pods // 10, 1),
    ]


ZONE = "topology.kubernetes.io/zone"


def run(case: str, nodes: int, pods: int, trace: bool, plugins: bool = False) -> dict[str, Any]:
    groups = [{"name": "dgx", "count": nodes, "machine": "dgx-h100"}]
    if case == "affinity":
        apply = affinity_case(nodes, pods)
        groups = [
            {
                "name": f"zone{z}-dgx",
                "count": nodes // 4 + (1 if z < nodes % 4 else 0),
                "machine": "dgx-h100",
                "labels": {ZONE: f"zone-{z}"},
            }
            for z in range(4)
        ]
    elif case == "mixed":
        eight = pods // 5
        apply = [deployment("one-gpu", pods - eight, 1), deployment("eight-gpu", eight, 8)]
    else:
        gpus = nodes * 8
        eight = gpus // 32
        one = gpus - eight * 8
        cpu_only = pods - one - eight
        apply = [
            deployment("eight-gpu", eight, 8),
            deployment("one-gpu", one, 1),
            deployment("cpu-only", cpu_only, 0, "500m"),
        ]
    scenario = scenario_from_dict({"nodes": groups, "apply": []})
    if trace:
        tracemalloc.start()
    t0 = time.perf_counter()
    sim = Simulation(scenario, plugins=plugins)
    sim.start()
    t1 = time.perf_counter()
    cpu0 = time.process_time()
    for obj in apply:  # one workload after the other, as `kubectl apply` in sequence would
        sim.apply(obj)
        sim.settle()
    t2 = time.perf_counter()
    cpu = time.process_time() - cpu0
    peak = 0
    if trace:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    phases: dict[str, int] = {}
    for rec in sim.pods.values():
        phases[rec.phase] = phases.get(rec.phase, 0) + 1
    allocated = sum(n.requested.get("nvidia.com/gpu", 0) for n in sim.nodes)
    # no device handed to two pods
    owners = sum(len(n.device_owner) for n in sim.nodes)
    assert owners == allocated, (owners, allocated)
    sim.close()
    return {
        "case": case,
        "plugins": [p.name for p in sim.scheduler.plugins] + [p.name for p in sim.kubelet_plugins],
        "nodes": nodes,
        "pods": len(sim.pods),
        "phases": phases,
        "gpusAllocated": allocated,
        "setupSeconds": round(t1 - t0, 3),
        "scheduleSeconds": round(t2 - t1, 3),
        "scheduleCpuSeconds": round(cpu, 3),
        "podsPerSecond": round(len(sim.pods) / (t2 - t1), 1),
        "tracemallocPeakMiB": round(peak / 2**20, 1),
    }


#: (nodes, pods) for --scaling: issue 17's sizes, up to 12,500 dgx-h100 (100,000 GPUs)
SCALING = [(1000, 10000), (5000, 50000), (12500, 100000)]


def scaling(case: str, plugins: bool) -> None:
    """One fresh process per size (an honest peak RSS each), then a table."""
    rows = []
    for nodes, pods in SCALING:
        cmd = [sys.executable, __file__, "--single", "--case", case]
        cmd += ["--nodes", str(nodes), "--pods", str(pods)] + (["--plugins"] if plugins else [])
        load = os.getloadavg()[0]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append((json.loads(out), load))
    print(f"case {case}, plugins {'on' if plugins else 'off'}, Python {platform.python_version()}")
    head = ("nodes", "pods", "setup s", "wall s", "cpu s", "pods/s", "us/pod", "RSS MiB", "load")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r, load in rows:
        cells = [
            f"{r['nodes']:,}",
            f"{r['pods']:,}",
            f"{r['setupSeconds']:.1f}",
            f"{r['scheduleSeconds']:.1f}",
            f"{r['scheduleCpuSeconds']:.1f}",
            f"{r['podsPerSecond']:,.0f}",
            f"{1e6 * r['scheduleCpuSeconds'] / r['pods']:.0f}",
            f"{r['maxRssMiB']:,.0f}",
            f"{load:.1f}",
        ]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--case", choices=["mixed", "packed", "affinity", "both"], default="both")
    parser.add_argument(
        "--plugins", action="store_true", help="also load the DRA/ComputeDomain plugins"
    )
    parser.add_argument("--scaling", action="store_true", help="1,000 / 5,000 / 12,500 nodes")
    parser.add_argument("--single", action="store_true", help=argparse.SUPPRESS)  # one timed run
    args = parser.parse_args()
    if args.scaling:
        scaling("mixed" if args.case == "both" else args.case, args.plugins)
        return
    if args.single:
        if args.case == "both":
            parser.error("--single runs one case: name it with --case")
        result = run(args.case, args.nodes, args.pods, trace=False, plugins=args.plugins)
        result["maxRssMiB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        print(json.dumps(result))
        return
    cases = ["mixed", "packed"] if args.case == "both" else [args.case]
    results = []
    for case in cases:
        timed = run(case, args.nodes, args.pods, trace=False, plugins=args.plugins)
        traced = run(
            case, args.nodes, args.pods, trace=True, plugins=args.plugins
        )  # tracemalloc slows it: memory only
        timed["tracemallocPeakMiB"] = traced["tracemallocPeakMiB"]
        results.append(timed)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {"python": platform.python_version(), "results": results, "maxRssMiB": round(rss, 1)},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
