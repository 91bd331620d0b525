"""``kgpu sim --from-cluster`` at scale: import 5,000 nodes and 50,000 pods from the API-server
stand-in, list-only, through the real client, in under 30 s and 2 GiB.

The stand-in runs in a child process (its memory is not the importer's) and is filled in
process, without HTTP, before the clock starts: 4/5 of the nodes dgx-h100 (8 x H100, GFD
labels, ``nvidia.com/gpu: 8`` allocatable), the rest CPU nodes; 3/5 of the pods bound with one
GPU each, 1/3 bound CPU pods, the rest Pending and asking for 8 GPUs (they fit nowhere, so each
gets kube-scheduler's FailedScheduling message). Then, in this process, each phase is timed:
the paged lists (``read``), the mapping to a scenario (``map``), the scenario check
(``parse``) -- together the import -- and the simulation settling every pod (``simulate``),
each in wall and CPU time (this process's; the stand-in's is its own), with this process's
peak RSS.
Every bound pod must stay on its node and every node must hold the GPUs the API server says.

    python bench/from_cluster.py                      # 5,000 nodes, 50,000 pods
    python bench/from_cluster.py --nodes 50 --pods 500   # the suite's short run
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
TOKEN = "bench-token"


def cluster(nodes: int, pods: int) -> tuple[list[Obj], list[Obj]]:
    """(nodes, pods) as the API server would hold them."""
    gpu_nodes = nodes * 4 // 5
    out_nodes: list[Obj] = []
    for i in range(nodes):
        gpu = i < gpu_nodes
        name = f"gpu-{i}" if gpu else f"cpu-{i}"
        labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
        allocatable = {"cpu": "200", "memory": "1900Gi", "pods": "110"}
        if gpu:
            labels |= {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "8",
            }
            allocatable["nvidia.com/gpu"] = "8"
        out_nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "status": {"capacity": allocatable, "allocatable": allocatable},
            }
        )
    gpu_pods = pods * 3 // 5
    cpu_pods = pods // 3
    out_pods: list[Obj] = []
    for i in range(pods):
        limits: Obj = {}
        node: str | None
        if i < gpu_pods:
            node = f"gpu-{i % gpu_nodes}"
            limits = {"nvidia.com/gpu": "1"}
        elif i < gpu_pods + cpu_pods:
            node = f"cpu-{gpu_nodes + i % max(1, nodes - gpu_nodes)}"
        else:
            node = None
            limits = {"nvidia.com/gpu": "8"}
        spec: Obj = {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/train:1",
                    "resources": {"limits": limits, "requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ]
        }
        if node:
            spec["nodeName"] = node
        out_pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{i}", "namespace": f"team-{i % 20}"},
                "spec": spec,
                "status": {"phase": "Running" if node else "Pending"},
            }
        )
    return out_nodes, out_pods


def _serve(nodes: int, pods: int, conn: Any) -> None:
    """The child: a stand-in filled in process, its URL sent back, served until told to stop."""
    from kgpu.testing.apiserver import FakeApiServer

    server = FakeApiServer(token=TOKEN, validate=False, history=10)
    headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    all_nodes, all_pods = cluster(nodes, pods)
    for obj in all_nodes:
        name = obj["metadata"]["name"]
        server.handle("POST", "/api/v1/nodes", json.dumps(obj).encode(), headers)
        server.handle("PUT", f"/api/v1/nodes/{name}/status", json.dumps(obj).encode(), headers)
    for obj in all_pods:
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        base = f"/api/v1/namespaces/{ns}/pods"
        server.handle("POST", base, json.dumps(obj).encode(), headers)
        server.handle("PUT", f"{base}/{name}/status", json.dumps(obj).encode(), headers)
    server.requests.clear()
    server.start()
    conn.send(server.url)
    conn.recv()  # until the parent is done
    server.stop()


def run(nodes: int, pods: int, workdir: Path) -> Obj:
    from kgpu.cli.fromcluster import ClusterArgs, read_objects, scenario_of
    from kgpu.sim.fromcluster import import_cluster
    from kgpu.sim.simulation import Simulation
    from kgpu.testing.apiserver import write_kubeconfig

    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_serve, args=(nodes, pods, child))
    started = time.perf_counter()
    proc.start()
    url = parent.recv()
    filled = time.perf_counter() - started
    kubeconfig = write_kubeconfig(workdir / "kubeconfig", url, token=TOKEN)
    phases: dict[str, float] = {}
    cpu: dict[str, float] = {}

    def timed(name: str, clock: tuple[float, float]) -> tuple[float, float]:
        now = (time.perf_counter(), time.process_time())
        phases[name], cpu[name] = now[0] - clock[0], now[1] - clock[1]
        return now

    try:
        start = clock = (time.perf_counter(), time.process_time())
        objects = read_objects(ClusterArgs(kubeconfig=kubeconfig))
        clock = timed("read", clock)
        imported = import_cluster(objects)
        clock = timed("map", clock)
        scenario = scenario_of(imported)
        clock = timed("parse", clock)
        sim = Simulation(scenario)
        sim.run()
        clock = timed("simulate", clock)
        total = clock[0] - start[0]
    finally:
        parent.send("stop")
        proc.join(timeout=30)
    placed = {r.key: r.node for r in sim.pods.values() if r.node}
    want = {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["spec"]["nodeName"]
        for p in cluster(nodes, pods)[1]
        if p["spec"].get("nodeName")
    }
    moved = sum(1 for k, n in want.items() if placed.get(k) != n)
    pending = sum(1 for r in sim.pods.values() if not r.node)
    held_ok = all(
        n.requested.get("nvidia.com/gpu", 0)
        == sum(1 for k, node in want.items() if node == n.name and k in placed)
        * (1 if n.name.startswith("gpu-") else 0)
        for n in sim.nodes
    )
    sim.close()
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "nodes": nodes,
        "pods": pods,
        "fill_s": round(filled, 1),
        "phases_s": {k: round(v, 2) for k, v in phases.items()},
        "phases_cpu_s": {k: round(v, 2) for k, v in cpu.items()},
        "import_s": round(phases["read"] + phases["map"] + phases["parse"], 2),
        "total_s": round(total, 2),
        "peak_rss_mib": round(rss_mib),
        "bound_moved": moved,
        "pending": pending,
        "gpu_counts_match": held_ok,
        "warnings": len(imported.warnings),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    args = parser.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result = run(args.nodes, args.pods, Path(tmp))
    json.dump(result, sys.stdout, indent=2)
    print()
    ok = (
        result["import_s"] < 30
        and result["peak_rss_mib"] < 2048
        and result["bound_moved"] == 0
        and result["gpu_counts_match"]
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
