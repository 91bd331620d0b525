"""Benchmark: what the autoscaling loop costs in ``kgpu sim`` as the cluster grows.

N ``dgx-h100`` nodes in one autoscaled group (min N, max 2N), a Deployment of N single-GPU pods
under ``traffic`` and a KEDA ScaledObject on the guide's query (minReplicaCount N, so the
cluster keeps its size), then the clock advances: every 15 s the cluster's Prometheus scrapes
every node's exporter, KEDA polls every 30 s, the HPA syncs every 15 s, cluster-autoscaler
scans every 10 s (all N nodes are scale-down candidates, none can go below min). Reports CPU
seconds for the advance (``time.process_time``, steadier than wall time on a shared machine),
per node-scrape, the series Prometheus keeps, and max RSS.

Usage: python bench/autoscaling.py [--nodes 50 200] [--minutes 60]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import time
from typing import Any

from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.testing.manifests import deployment

QUERY = "sum(DCGM_FI_DEV_GPU_UTIL) / count(DCGM_FI_DEV_GPU_UTIL) / 100"


def scenario(nodes: int, minutes: float) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "name": "gpu",
                "count": nodes,
                "machine": "dgx-h100",
                "autoscale": {"min": nodes, "max": 2 * nodes},
            }
        ],
        "apply": [
            deployment("app", nodes, {"nvidia.com/gpu": 1}),
            {
                "apiVersion": "keda.sh/v1alpha1",
                "kind": "ScaledObject",
                "metadata": {"name": "app"},
                "spec": {
                    "scaleTargetRef": {"name": "app"},
                    "minReplicaCount": nodes,
                    "maxReplicaCount": 8 * nodes,
                    "triggers": [
                        {
                            "type": "prometheus",
                            "metadata": {
                                "serverAddress": "http://prometheus:9090",
                                "query": QUERY,
                                "threshold": "0.5",
                            },
                        }
                    ],
                },
            },
        ],
        "steps": [{"traffic": {"name": "app", "gpuUtilization": 100 * nodes}}],
    }


def run(nodes: int, minutes: float) -> dict[str, Any]:
    sim = Simulation(scenario_from_dict(scenario(nodes, minutes)), plugins=False).run()
    t0 = time.process_time()
    sim.advance(minutes * 60)
    cpu = time.process_time() - t0
    scrapes = int(minutes * 60 // 15) + 1
    result = {
        "nodes": nodes,
        "gpus": 8 * nodes,
        "simulatedMinutes": minutes,
        "cpuSeconds": round(cpu, 2),
        "msPerNodeScrape": round(1000 * cpu / (scrapes * nodes), 3),
        "seriesKept": len(sim.prometheus.history),
        "nodesAtEnd": len(sim.nodes),
    }
    sim.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, nargs="+", default=[50, 200])
    parser.add_argument("--minutes", type=float, default=60)
    args = parser.parse_args()
    results = [run(n, args.minutes) for n in args.nodes]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {"python": platform.python_version(), "results": results, "maxRssMiB": round(rss, 1)},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
