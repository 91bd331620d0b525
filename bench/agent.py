"""Benchmark the node agent: Allocate latency against a no-op gRPC floor, resident memory,
health latency with a hung kubelet, re-registration after kubelet restarts, RSS under chaos.

    python bench/agent.py [--calls 3000] [--json] [--chaos-seconds 0] [--only NAME ...]

1. Allocate round trip: a device-plugin server for ``nvidia.com/gpu`` of a p4de.24xlarge under
   the seed guides' configs (MIG half-balanced + 8 time-slicing replicas) on a unix socket, called
   the way the kubelet calls it (one container, one replica). The floor is a gRPC server on the
   same kind of socket whose only method returns an empty message without doing anything.
   Both run in this process, one after the other, with the same client code.
2. Agent RSS: ``kgpu agent --machine p4de.24xlarge`` as a subprocess with the same configs,
   serving all four resources to the fake kubelet (with and without the DRA component), VmRSS
   read from /proc after registration and a round of allocations.

3. Health with a hung kubelet (issue 11): the in-process agent of
   :class:`kgpu.testing.agent_rig.AgentRig` (dgx-h100, four resources); the fake kubelet's
   ``Register`` hangs and one resource's socket is deleted, so its re-registration hangs; then
   XID 79 on GPUs of the other resources, one at a time, timed until the kubelet's
   ListAndWatch stream shows the GPU's replicas Unhealthy (the GPU recovers between samples).
4. Kubelet restart: the same rig, ``FakeKubelet.restart()`` (sockets wiped, a new
   ``kubelet.sock``), timed from the new kubelet serving until all four resources registered
   again; against one ``Register`` round trip measured on the same kubelet.
5. RSS under chaos (``--chaos-seconds N``): :mod:`kgpu.testing.chaos` without the crash action
   (one agent process lives through the run), VmRSS sampled every 30 s.
6. The whole agent on a cluster (``--only cluster``): an in-process agent with every component
   the chart runs (device plugin, NFD labels, DRA on a GB200 tray, the MIG manager) against the
   API-server stand-in (Kubernetes 1.35); requests by phase (start, a config-label switch on
   the Node, ``--idle-seconds`` of idle) counted by the stand-in, and ``/healthz`` latency
   (``--calls`` GETs while the agent serves).
7. RSS by chaos action (``--only rss-by-action [--actions 500] [--every 100] [--agent-env K=V
   ...]``): each chaos action alone, back to back, against one agent started through
   ``bench/agent_probe.py``, which reports from inside the agent (RSS before/after
   ``malloc_trim``, threads, fds, malloc arenas, live gRPC/view objects, tracemalloc top) every
   ``--every`` steps; plus an ``idle`` control. Which action grows RSS, by how much per step.

Targets: Allocate p99 within 2x the no-op p99; RSS under 80 MiB (issue 3). Health with a hung
kubelet <= 100 ms; re-registration of 4 resources <= 2x one Register round trip + 0.3 s; no
RSS growth over a long chaos run (issue 11).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

REPO = Path(__file__).resolve().parents[1]
SEED = REPO.parent / "shared" / "acceptance" / "seed-guides"
CONFIGS = [SEED / "gpu-operator-values.yaml", SEED / "time-slicing-config-t4-a100.yaml"]
LABELS = {"nvidia.com/mig.config": "p4de-half-balanced"}
NOOP_METHOD = "/bench.Noop/Call"
# the in-process agent rig is a test helper (the testing package may not import the agent)
sys.path.insert(0, str(REPO / "tests" / "agent"))


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


def _ms(samples: list[float]) -> dict[str, object]:
    ms = sorted(round(x * 1000, 1) for x in samples)
    return {"samples": len(ms), "p50_ms": ms[len(ms) // 2], "max_ms": ms[-1]}


def bench_health_hung_kubelet(samples: int = 20) -> dict[str, object]:
    """XID -> Unhealthy in ListAndWatch while a Register call hangs."""
    from agent_rig import AgentRig

    from kgpu.kubelet.deviceplugin.server import socket_name
    from kgpu.testing.split_node import GPU_RESOURCE, short_root

    out: list[float] = []
    with short_root("kgbh") as root:
        rig = AgentRig(root, health_quiet_period_s=0.2, health_probe_interval_s=0.1)
        with rig:
            if not rig.serving():
                raise RuntimeError("agent did not register its resources")
            rig.kubelet.register_mode = "hang"
            calls = len(rig.kubelet.register_calls)
            hung = "nvidia.com/gpu.a"
            (root / "device-plugins" / socket_name(hung)).unlink()
            if not rig.kubelet.wait_for(lambda: len(rig.kubelet.register_calls) > calls, 5):
                raise RuntimeError("the agent did not try to register again")
            gpus = [g for g, r in GPU_RESOURCE.items() if r != hung]
            for i in range(samples):
                gpu = gpus[i % len(gpus)]
                out.append(rig.unhealthy_after_xid(gpu))
                rig.kubelet.wait_for(  # recovered before the next sample
                    lambda g=gpu: set(rig.replicas(g).values()) == {"Healthy"},  # type: ignore[misc]
                    5,
                )
            still_hung = rig.kubelet.register_calls[calls][2] == "hang"
            rig.kubelet.register_mode = "ok"
    return {**_ms(out), "register_hung": still_hung}


def bench_reregistration(restarts: int = 10) -> dict[str, object]:
    """Kubelet restart -> all four resources registered again, vs one Register round trip."""
    from agent_rig import AgentRig

    from kgpu.kubelet.deviceplugin.registration import register
    from kgpu.kubelet.deviceplugin.server import PluginServer
    from kgpu.testing.split_node import RESOURCES, short_root

    took: list[float] = []
    rtt: list[float] = []
    with short_root("kgbr") as root:
        rig = AgentRig(root, health_probe_interval_s=3600)
        with rig:
            if not rig.serving():
                raise RuntimeError("agent did not register its resources")
            # one Register round trip on this kubelet, for a resource of our own
            assert rig.agent is not None
            probe = PluginServer("example.com/probe", rig.agent.view, root)
            probe.start()
            for _ in range(20):
                started = time.perf_counter()
                register(rig.kubelet.socket, probe.endpoint, probe.resource)
                rtt.append(time.perf_counter() - started)
            probe.stop()
            for _ in range(restarts):
                before = len(rig.kubelet.registrations)
                rig.kubelet.restart()
                started = time.perf_counter()
                done = rig.kubelet.wait_for(
                    lambda b=before: (
                        sorted(r for r, _ in rig.kubelet.registrations[b:])  # type: ignore[misc]
                        == RESOURCES
                    ),
                    10,
                )
                took.append(time.perf_counter() - started if done else float("inf"))
                rig.serving()
    register_ms = sorted(rtt)[len(rtt) // 2] * 1000
    result = _ms(took)
    return {
        **result,
        "register_rtt_p50_ms": round(register_ms, 2),
        "goal_ms": round(2 * register_ms + 300, 1),
    }


def bench_chaos_rss(seconds: float) -> dict[str, object]:
    from kgpu.testing.chaos import ACTIONS, run_chaos
    from kgpu.testing.split_node import short_root

    with short_root("kgbc") as root:
        report = run_chaos(
            root,
            seed=int(time.time()),
            seconds=seconds,
            rss_every_s=30.0,
            pause_s=1.0,
            health_bound_s=0.1,
            actions=tuple(a for a in ACTIONS if a != "kill"),
        )
    summary = report.summary()
    rss = [kib for _, kib in report.rss_kib]
    summary["rss_mib_samples"] = [round(k / 1024, 1) for k in rss]
    return summary


def _probe(chaos: Any, out: Path, timeout_s: float = 10.0) -> dict[str, Any]:
    """Ask the agent (started through bench/agent_probe.py) to report from inside."""
    import os
    import signal

    out.unlink(missing_ok=True)
    os.kill(chaos.agent.proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout_s
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return dict(json.loads(out.read_text()))


def bench_rss_by_action(count: int, every: int, env: dict[str, str]) -> dict[str, object]:
    """Each chaos action alone, ``count`` times back to back (no pause) against one agent
    process, the agent probed from inside every ``every`` steps (RSS, threads, fds, arenas,
    live gRPC objects). Growth per action is taken after the first ``every`` steps (warm-up:
    pools and caches filling)."""
    from kgpu.testing.chaos import ACTIONS, Chaos
    from kgpu.testing.split_node import short_root

    class Idle(Chaos):
        """The control: a step that only waits (the chaos run's own pause between steps)."""

        def _do_idle(self) -> None:
            time.sleep(1.0)

    actions = [a for a in ACTIONS if a != "kill"] + ["idle"]
    only = os.environ.get("KGPU_BENCH_ACTIONS")
    if only:
        actions = [a for a in actions if a in only.split(",")]
    result: dict[str, object] = {"env": env, "count": count}
    for action in actions:
        with short_root("kgra") as root:
            out = root / "probe.json"
            samples: list[dict[str, Any]] = []

            def sample(
                chaos: Chaos, samples: list[dict[str, Any]] = samples, out: Path = out
            ) -> None:
                if sum(chaos.report.steps.values()) % every == 0:
                    samples.append(_probe(chaos, out))

            chaos = Idle(
                root,
                seed=1,
                seconds=0,
                max_steps=count,
                actions=(action,),
                health_bound_s=0.5,
                after_step=sample,
                agent_launcher=(str(REPO / "bench" / "agent_probe.py"),),
                agent_env={**env, "KGPU_PROBE_OUT": str(out)},
            )
            started = time.monotonic()
            report = chaos.run()
            rss = [s["rss_kib"] for s in samples]
            row: dict[str, object] = {
                "seconds": round(time.monotonic() - started, 1),
                "registrations": report.registrations,
                "violations": report.violations[:3],
                "rss_mib": [round(k / 1024, 1) for k in rss],
                "kib_per_action_after_warmup": round((rss[-1] - rss[1]) / (count - every), 2)
                if len(rss) > 2
                else None,
                "threads": [s["threads"] for s in samples],
                "fds": [s["fds"] for s in samples],
                "arenas": [s["arenas"] for s in samples],
                "objects_first_last": [samples[0]["objects"], samples[-1]["objects"]],
                "gc_objects": [s["gc_objects"] for s in samples],
            }
            if "rss_kib_trimmed" in samples[0]:
                row["rss_trimmed_mib"] = [round(s["rss_kib_trimmed"] / 1024, 1) for s in samples]
            if "top" in samples[-1]:
                row["tracemalloc_top"] = samples[-1]["top"]
                row["traced_kib"] = [s["traced_kib"] for s in samples]
            result[action] = row
            print(action, json.dumps(row), file=sys.stderr, flush=True)
    return result


def bench_cluster(idle_s: float, calls: int) -> dict[str, object]:
    """The whole agent against the API-server stand-in: requests per phase; /healthz latency."""
    import shutil
    import urllib.request
    from collections import Counter

    from kgpu.agent.daemon import Agent, AgentOptions
    from kgpu.cluster.kube import KubeStore
    from kgpu.hardware.profiles import load_machine
    from kgpu.hardware.simulated import SimulatedBackend
    from kgpu.testing.apiserver import TOKEN, FakeApiServer, write_kubeconfig
    from kgpu.testing.fake_kubelet import FakeKubelet

    root = Path(tempfile.mkdtemp(prefix="kgc", dir="/tmp"))
    clique = "c0ffee00-0000-4000-8000-000000000001.0"
    server = FakeApiServer(token=TOKEN, release="1.35").start()
    kubeconfig = write_kubeconfig(root / "kc", server.url)
    admin = KubeStore.from_config(str(kubeconfig), qps=None, user_agent="bench-admin")
    label = "nvidia.com/device-plugin.config"
    admin.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "tray-0", "labels": {label: "a100-40gb"}},
        }
    )
    opts = AgentOptions(
        machine="gb200",
        clique=clique,
        config_files=tuple(CONFIGS),
        node_name="tray-0",
        kubelet_root=root,
        cdi_root=root / "cdi",
        nfd_features_dir=root / "features.d",
        kubeconfig=kubeconfig,
        mig_manager=True,
        health_address="127.0.0.1:0",
        status_file=root / "status.json",
    )
    backend = SimulatedBackend(load_machine("gb200", hostname="tray-0", clique=clique))
    agent = Agent(opts, backend=backend)

    def phase(mark: int) -> dict[str, int]:
        counts: Counter[str] = Counter()
        for r in server.requests[mark:]:
            if r.user_agent.startswith("kgpu-agent/"):
                counts[f"{r.verb} {r.resource}" if r.resource else f"GET {r.path}"] += 1
        return dict(sorted(counts.items()))

    out: dict[str, object] = {}
    try:
        with FakeKubelet(root) as kubelet:
            agent.start()
            kubelet.wait_for(lambda: bool(kubelet.resources()), 20)
            time.sleep(2.0)  # the MIG manager's first pass, the slices published
            out["start"] = phase(0)
            mark = len(server.requests)
            admin.patch("v1", "Node", "tray-0", {"metadata": {"labels": {label: "tesla-t4"}}})
            deadline = time.monotonic() + 10
            while agent.view().config_name != "tesla-t4" and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(1.0)
            out["config_label_switch"] = phase(mark)
            mark = len(server.requests)
            time.sleep(idle_s)
            out[f"idle_{idle_s:g}s"] = phase(mark)
            assert agent.health_server is not None
            url = f"http://127.0.0.1:{agent.health_server.port}/healthz"

            def get() -> None:
                with urllib.request.urlopen(url, timeout=5) as answer:
                    answer.read()

            out["healthz"] = percentiles(time_calls(get, calls, warmup=20))
            out["open_watches"] = server.open_watches()
    finally:
        agent.stop()
        admin.close()
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--chaos-seconds", type=float, default=0.0)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--actions", type=int, default=500, help="rss-by-action: per action")
    parser.add_argument("--every", type=int, default=100, help="rss-by-action: probe every N")
    parser.add_argument(
        "--agent-env",
        nargs="*",
        default=[],
        metavar="K=V",
        help="rss-by-action: added to the agent's environment (MALLOC_ARENA_MAX=2, "
        "KGPU_PROBE_TRIM=1, KGPU_PROBE_TRACEMALLOC=1)",
    )
    parser.add_argument(
        "--only",
        nargs="*",
        choices=[
            "allocate",
            "rss",
            "health",
            "hung",
            "restart",
            "chaos",
            "cluster",
            "rss-by-action",
        ],
        help="run only these parts",
    )
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.ERROR)
    root = Path(tempfile.mkdtemp(prefix="kgb", dir="/tmp"))
    wanted = set(args.only or ["allocate", "rss", "health", "hung", "restart"])
    if args.chaos_seconds:
        wanted.add("chaos")
    parts = {
        "allocate": lambda: bench_allocate(args.calls, root),
        "rss": lambda: [bench_rss(dra=False), bench_rss(dra=True)],
        "health": bench_health_latency,
        "hung": bench_health_hung_kubelet,
        "restart": bench_reregistration,
        "chaos": lambda: bench_chaos_rss(args.chaos_seconds or 60.0),
        "cluster": lambda: bench_cluster(args.idle_seconds, min(args.calls, 1000)),
        "rss-by-action": lambda: bench_rss_by_action(
            args.actions, args.every, dict(kv.split("=", 1) for kv in args.agent_env)
        ),
    }
    result = {name: run() for name, run in parts.items() if name in wanted}
    if args.json or not {"allocate", "rss", "health"} <= wanted:
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
    for name in ("hung", "restart", "chaos", "cluster"):
        if name in result:
            print(f"{name}: {json.dumps(result[name])}")


if __name__ == "__main__":
    main()
