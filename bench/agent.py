"""Benchmark the node agent: Allocate latency against a no-op gRPC floor, and resident memory.

    python bench/agent.py [--calls 3000] [--json]

1. Allocate round trip: a device-plugin server for ``nvidia.com/gpu`` of a p4de.24xlarge under
   the seed guides' configs (MIG half-balanced + 8 time-slicing replicas) on a unix socket, called
   the way the kubelet calls it (one container, one replica). The floor is a gRPC server on the
   same kind of socket whose only method returns an empty message without doing anything.
   Both run in this process, one after the other, with the same client code.
2. Agent RSS: ``kgpu agent --machine p4de.24xlarge`` as a subprocess with the same configs,
   serving all four resources to the fake kubelet (with and without the DRA component), VmRSS
   read from /proc after registration and a round of allocations.

Targets (issue 3): Allocate p99 within 2x the no-op p99; RSS under 80 MiB.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc

REPO = Path(__file__).resolve().parents[1]
SEED = REPO.parent / "shared" / "acceptance" / "seed-guides"
CONFIGS = [SEED / "gpu-operator-values.yaml", SEED / "time-slicing-config-t4-a100.yaml"]
LABELS = {"nvidia.com/mig.config": "p4de-half-balanced"}
NOOP_METHOD = "/bench.Noop/Call"


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {
        "p50_us": round(pick(0.50) * 1e6, 1),
        "p99_us": round(pick(0.99) * 1e6, 1),
        "mean_us": round(statistics.fmean(ordered) * 1e6, 1),
    }


def time_calls(call: object, calls: int, warmup: int = 50) -> list[float]:
    fn = call  # type: ignore[assignment]
    for _ in range(warmup):
        fn()  # type: ignore[operator]
    out = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - start)
    return out


def bench_allocate(calls: int, root: Path) -> dict[str, object]:
    from kgpu.config import load_config_files
    from kgpu.hardware.profiles import load_machine
    from kgpu.kubelet.deviceplugin.registration import unix_target
    from kgpu.kubelet.deviceplugin.server import PluginServer
    from kgpu.kubelet.proto.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
    from kgpu.node.view import build_node_view

    view = build_node_view(
        load_machine("p4de.24xlarge", hostname="bench"),
        load_config_files(CONFIGS),
        LABELS,
        config_name="a100-40gb",
    )
    server = PluginServer("nvidia.com/gpu", lambda: view, root)
    server.start()
    device = view.resource("nvidia.com/gpu").devices[5].id
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[device])]
    )
    noop_sock = root / "noop.sock"
    noop = grpc.server(ThreadPoolExecutor(max_workers=4))
    handler = grpc.method_handlers_generic_handler(
        "bench.Noop",
        {"Call": grpc.unary_unary_rpc_method_handler(lambda req, ctx: b"")},
    )
    noop.add_generic_rpc_handlers((handler,))
    noop.add_insecure_port(unix_target(noop_sock))
    noop.start()
    samples: list[float] = []
    floor: list[float] = []
    # Alternate batches so drift on a shared machine hits both series alike.
    batches = 10
    with (
        grpc.insecure_channel(unix_target(server.socket_path)) as alloc_channel,
        grpc.insecure_channel(unix_target(noop_sock)) as noop_channel,
    ):
        stub = api_pb2_grpc.DevicePluginStub(alloc_channel)
        call = noop_channel.unary_unary(NOOP_METHOD)
        for _ in range(batches):
            samples += time_calls(lambda: stub.Allocate(request, timeout=5), calls // batches)
            floor += time_calls(lambda: call(b"", timeout=5), calls // batches)
    server.stop()
    noop.stop(0).wait()
    alloc, base = percentiles(samples), percentiles(floor)
    return {
        "allocate": alloc,
        "noop": base,
        "p99_ratio": round(float(alloc["p99_us"]) / float(base["p99_us"]), 2),
        "p50_ratio": round(float(alloc["p50_us"]) / float(base["p50_us"]), 2),
        "calls": calls,
    }


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def bench_rss(dra: bool) -> dict[str, object]:
    from kgpu.testing.fake_kubelet import FakeKubelet

    root = Path(tempfile.mkdtemp(prefix="kgb", dir="/tmp"))
    cmd = [sys.executable, "-m", "kgpu", "agent", "--machine", "p4de.24xlarge"]
    cmd += ["--kubelet-root", str(root), "--node-name", "bench", "--config-name", "a100-40gb"]
    cmd += ["--status-file", str(root / "status.json"), "--dra" if dra else "--no-dra"]
    for path in CONFIGS:
        cmd += ["--config", str(path)]
    for key, value in LABELS.items():
        cmd += ["--label", f"{key}={value}"]
    with FakeKubelet(root) as kubelet:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            ok = kubelet.wait_for(
                lambda: (
                    len(kubelet.resources()) == 4
                    and all(kubelet.devices(r) for r in kubelet.resources())
                ),
                timeout_s=30,
            )
            if not ok:
                raise RuntimeError("agent did not register its resources")
            for resource in kubelet.resources():
                for device in sorted(kubelet.devices(resource))[:4]:
                    kubelet.allocate(resource, [device])
            time.sleep(1.0)
            rss = rss_kib(proc.pid)
            counts = {r: len(kubelet.devices(r)) for r in kubelet.resources()}
        finally:
            proc.terminate()
            proc.wait(10)
    return {"dra": dra, "rss_mib": round(rss / 1024, 1), "resources": counts}


def bench_health_latency() -> dict[str, object]:
    """XID injected into the simulated backend -> Unhealthy seen by the fake kubelet's stream."""
    from kgpu.agent.daemon import Agent, AgentOptions
    from kgpu.hardware.profiles import load_machine
    from kgpu.hardware.simulated import SimulatedBackend
    from kgpu.testing.fake_kubelet import FakeKubelet

    root = Path(tempfile.mkdtemp(prefix="kgh", dir="/tmp"))
    machine = load_machine("p4de.24xlarge", hostname="bench")
    backend = SimulatedBackend(machine)
    opts = AgentOptions(
        machine="p4de.24xlarge",
        config_files=tuple(CONFIGS),
        config_name="a100-40gb",
        labels=LABELS,
        kubelet_root=root,
        dra=False,
        node_name="bench",
        health_probe_interval_s=3600,
    )
    agent = Agent(opts, backend=backend)
    samples = []
    with FakeKubelet(root) as kubelet:
        agent.start()
        try:
            kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/gpu")) == 32, 20)
            for gpu in machine.gpus[4:]:  # the whole, time-sliced GPUs
                prefix = gpu.uuid + "::"
                start = time.perf_counter()
                backend.inject_xid(gpu.index, 79)
                kubelet.wait_for(
                    lambda p=prefix: all(  # type: ignore[misc]
                        h == "Unhealthy"
                        for i, h in kubelet.devices("nvidia.com/gpu").items()
                        if i.startswith(p)
                    ),
                    5,
                )
                samples.append(time.perf_counter() - start)
        finally:
            agent.stop()
    ms = sorted(round(x * 1000, 1) for x in samples)
    return {"samples_ms": ms, "max_ms": ms[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="kgb", dir="/tmp"))
    result = {
        "allocate": bench_allocate(args.calls, root),
        "rss": [bench_rss(dra=False), bench_rss(dra=True)],
        "health": bench_health_latency(),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    a = result["allocate"]
    print(f"Allocate      p50 {a['allocate']['p50_us']} us  p99 {a['allocate']['p99_us']} us")  # type: ignore[index]
    print(f"no-op floor   p50 {a['noop']['p50_us']} us  p99 {a['noop']['p99_us']} us")  # type: ignore[index]
    print(f"ratio         p50 {a['p50_ratio']}x  p99 {a['p99_ratio']}x  (target p99 <= 2x)")  # type: ignore[index]
    for r in result["rss"]:  # type: ignore[attr-defined]
        rss, dra, res = r["rss_mib"], r["dra"], r["resources"]
        print(f"agent RSS     {rss} MiB (dra={dra}, {res})  (target < 80 MiB)")
    h = result["health"]
    print(f"XID -> Unhealthy in ListAndWatch: {h['samples_ms']} ms (target < 100 ms)")


if __name__ == "__main__":
    main()
