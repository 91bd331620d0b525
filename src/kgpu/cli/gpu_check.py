"""The project's read-only acceptance run for a lent GPU (``scripts/gpu-check.sh``).

On the node's real GPUs (``--machine nvml``): the agent against a fake kubelet (the device
plugin registers every GPU), every host path its CDI specs name exists, the labels GFD would
write (``gpu.product``, ``gpu.machine``, ``gpu.mode``), the DRA ResourceSlice, a one-GPU claim
prepared (and its CDI spec's paths), ``/metrics`` idle and under a load (``--load CMD``, run
while scraping), the agent's scrape time against ``kgpu metrics`` alone, and the process's RSS.
One table of pass/fail with figures; exit 0 when everything passed, 1 when a check failed, 2
when it cannot run here (no NVML: nothing was checked). Nothing here changes a GPU: no MIG
change, no clock or power setting; the load, if any, is the caller's command. The one step that
would (memory shares: GPU 0 in EXCLUSIVE_PROCESS for two MPS clients,
:mod:`kgpu.cli.gpu_check_shares`) is skipped unless ``KGPU_GPU_CHECK_ALLOW_COMPUTE_MODE=1``.

``backend`` (tests) replaces NVML with another backend that reads through an NVML library,
such as :class:`kgpu.hardware.nvml.NvmlBackend` over :class:`kgpu.testing.fake_nvml.FakeNvml`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RSS_GOAL_MIB = 80.0
SCRAPE_RATIO_GOAL = 2.0


@dataclass
class Row:
    check: str
    ok: bool | None  # None: skipped
    figure: str


def _rss_mib() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def _scrape_ms(url: str, runs: int = 10) -> tuple[float, str]:
    samples, text = [], ""
    for _ in range(runs):
        start = time.perf_counter()
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples), text


def _series(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


def _missing_paths(spec: dict[str, Any]) -> list[str]:
    edits = [spec.get("containerEdits") or {}]
    edits += [d.get("containerEdits") or {} for d in spec.get("devices", [])]
    paths = [m["hostPath"] for e in edits for m in e.get("mounts", [])]
    paths += [n.get("hostPath") or n["path"] for e in edits for n in e.get("deviceNodes", [])]
    paths += [h["path"] for e in edits for h in e.get("hooks", [])]
    return [p for p in paths if not os.path.lexists(p)]


def run(
    open_backend: Callable[[], Any] | None = None, load: str = "", workdir: Path | None = None
) -> list[Row]:
    """Every check, in order; raises :class:`~kgpu.hardware.backend.BackendError` when there
    is no NVML to check. ``open_backend`` opens a fresh backend (the agent closes its own when
    it stops); default: NVML."""
    from kgpu.agent.daemon import Agent, AgentOptions
    from kgpu.dra.slices import resource_slices
    from kgpu.drivers.gpu import GpuHandler
    from kgpu.drivers.metrics import MetricsComponent
    from kgpu.hardware.nvml import NvmlBackend
    from kgpu.kubelet import cdi
    from kgpu.kubelet.dra.handler import ClaimInfo
    from kgpu.kubelet.nvidia_cdi import for_backend
    from kgpu.testing.fake_kubelet import FakeKubelet

    opener: Callable[[], Any] = open_backend if open_backend is not None else NvmlBackend
    backend = opener()
    rows: list[Row] = []
    root = Path(workdir or tempfile.mkdtemp(prefix="kgpu-gpu-check-"))
    root.mkdir(parents=True, exist_ok=True)
    (root / "plugin.yaml").write_text(
        "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
    )
    opts = AgentOptions(
        machine="nvml",
        config_files=(root / "plugin.yaml",),
        kubelet_root=root,
        cdi_root=root / "cdi",
        node_name="gpu-check",
        dra=False,
        metrics_address="127.0.0.1:0",
    )
    machine = backend.snapshot()
    gpus = len(machine.gpus)
    product = machine.gpus[0].product_name if gpus else "-"
    rows.append(
        Row(
            "NVML",
            gpus > 0,
            f"{gpus} GPU(s): {product}, driver {machine.driver_version}",
        )
    )
    agent = Agent(opts, backend=backend)
    with FakeKubelet(root) as kubelet:
        agent.start()
        try:
            started = time.monotonic()
            registered = kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == gpus)
            rows.append(
                Row(
                    "device plugin registers every GPU",
                    registered,
                    f"{len(kubelet.devices('nvidia.com/gpu'))}/{gpus} in "
                    f"{time.monotonic() - started:.2f} s",
                )
            )
            specs = sorted((root / "cdi").glob("*.json"))
            missing = [p for s in specs for p in _missing_paths(cdi.read_spec(s))]
            rows.append(
                Row(
                    "every CDI host path exists",
                    bool(specs) and not missing,
                    f"{len(specs)} spec(s); missing: {', '.join(missing[:3]) or 'none'}",
                )
            )
            labels = agent.view().labels
            wanted = ("nvidia.com/gpu.product", "nvidia.com/gpu.machine", "nvidia.com/gpu.mode")
            rows.append(
                Row(
                    "GFD labels",
                    all(k in labels for k in wanted),
                    ", ".join(f"{k.split('/')[1]}={labels.get(k, '-')}" for k in wanted),
                )
            )
            metrics = next(c for c in agent.components if isinstance(c, MetricsComponent))
            url = f"http://127.0.0.1:{metrics.port}/metrics"
            agent_ms, idle = _scrape_ms(url)
            rows.append(
                Row(
                    "metrics idle",
                    bool(_series(idle, "DCGM_FI_DEV_GPU_TEMP")),
                    f"{sum(1 for x in idle.splitlines() if x and x[0] != '#')} series",
                )
            )
            if load:
                proc = subprocess.Popen(shlex.split(load))
                try:
                    time.sleep(5)
                    _, busy = _scrape_ms(url, runs=3)
                finally:
                    proc.terminate()
                    proc.wait(timeout=30)
                util = [float(x.rsplit(" ", 1)[1]) for x in _series(busy, "DCGM_FI_DEV_GPU_UTIL")]
                rows.append(
                    Row("metrics under load", bool(util) and max(util) > 0, f"GPU_UTIL {util}")
                )
            else:
                rows.append(Row("metrics under load", None, "skipped: no --load CMD"))
            rss = _rss_mib()
        finally:
            agent.stop()
    backend = opener()  # the agent closed its backend when it stopped
    alone = MetricsComponent("127.0.0.1:0", backend, None, "gpu-check")
    alone.start()
    try:
        alone_ms, _ = _scrape_ms(f"http://127.0.0.1:{alone.port}/metrics")
    finally:
        alone.stop()
    ratio = agent_ms / alone_ms if alone_ms else float("inf")
    rows.append(
        Row(
            "agent scrape within 2x kgpu metrics alone",
            ratio <= SCRAPE_RATIO_GOAL,
            f"{agent_ms:.1f} ms vs {alone_ms:.1f} ms ({ratio:.2f}x)",
        )
    )
    devices = [d for s in resource_slices(machine, "gpu-check") for d in s["spec"]["devices"]]
    rows.append(Row("DRA ResourceSlice", len(devices) >= gpus, f"{len(devices)} device(s)"))
    handler = GpuHandler(machine, "gpu-check", root / "dra", node_driver=for_backend(backend))
    name = next(iter(handler.devices()), None)
    if name is None:
        rows.append(Row("a claim prepared", False, "no DRA device"))
    else:
        claim = ClaimInfo(
            uid="gpu-check",
            namespace="default",
            name="gpu-check",
            results=(
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-check", "device": name},
            ),
        )
        prepared = handler.prepare(claim)
        spec = cdi.build_spec(
            "k8s.gpu.nvidia.com/claim",
            [cdi.CdiDevice(d.cdi_name, d.edits) for d in prepared.devices],
            prepared.common_edits,
        )
        lost = _missing_paths(spec)
        rows.append(
            Row(
                "a claim prepared",
                not lost,
                f"{name}; missing paths: {', '.join(lost[:3]) or 'none'}",
            )
        )
    from kgpu.cli.gpu_check_shares import run_memory_shares

    rows += run_memory_shares(backend)  # skipped unless the compute mode may change
    backend.close()
    rows.append(
        Row(
            f"RSS under {RSS_GOAL_MIB:.0f} MiB",
            rss < RSS_GOAL_MIB,
            f"{rss:.1f} MiB (this process: agent in-process)",
        )
    )
    return rows


def render(rows: Sequence[Row]) -> str:
    width = max(len(r.check) for r in rows)
    lines = [f"{'check':{width}}  result  figure"]
    for r in rows:
        result = "skip" if r.ok is None else "PASS" if r.ok else "FAIL"
        lines.append(f"{r.check:{width}}  {result:6}  {r.figure}")
    return "\n".join(lines)


def main(
    argv: Sequence[str] | None = None, backend_factory: Callable[[], Any] | None = None
) -> int:
    from kgpu.hardware.backend import BackendError

    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", default="", help="a command that loads the GPU while scraping")
    parser.add_argument("--workdir", type=Path, help="where the fake kubelet and specs live")
    args = parser.parse_args(argv)
    try:
        rows = run(backend_factory, load=args.load, workdir=args.workdir)
    except BackendError as exc:
        print(f"gpu-check: refused, nothing was checked: {exc}", file=sys.stderr)
        return 2
    print(f"gpu-check {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(render(rows))
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
