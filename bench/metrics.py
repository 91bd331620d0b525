"""Benchmark: CPU time of one /metrics scrape.

    python bench/metrics.py              # simulated: 8 x H100, and 8 x A100 with 7 MIG devices each
    python bench/metrics.py --fake-nvml  # also the NVML path over tests/metrics' fake NVML
    python bench/metrics.py --nvml       # also a real-GPU scrape vs the raw cost of its NVML calls
    python bench/metrics.py --event-reader  # scrape wall time: the agent vs `kgpu metrics` alone

Attribution is on in every case: PodResources-style allocations are joined to the devices
(time-sliced pods on every H100, one pod per MIG device) and per-pod series are rendered. CPU
time is ``time.process_time`` around ``Exporter.scrape()`` (the HTTP layer is left out).
Target: under 5 ms per scrape for 8 simulated GPUs; within 1.5x of the raw NVML calls on a real
GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kgpu.drivers.attribution import build_attribution
from kgpu.hardware.mig import apply_layout
from kgpu.hardware.model import Machine
from kgpu.hardware.profiles import load_machine
from kgpu.kubelet.podresources import ContainerResources, PodResources
from kgpu.metrics.collector import Exporter, NodeTarget
from kgpu.metrics.simulated import SimulatedTelemetry, Workload
from kgpu.metrics.sources import PodRef


def cpu_ms(fn: Callable[[], object], runs: int, warmup: int = 20) -> tuple[float, float, float]:
    """(median, mean, p95) CPU milliseconds per call."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        start = time.process_time_ns()
        fn()
        samples.append((time.process_time_ns() - start) / 1e6)
    samples.sort()
    return statistics.median(samples), statistics.fmean(samples), samples[int(0.95 * len(samples))]


def simulated_exporter(machine: Machine, per_device: int) -> tuple[Exporter, int]:
    pods: list[PodResources] = []
    workloads: list[Workload] = []
    devices: list[str] = []
    for gpu in machine.gpus:
        if gpu.mig_enabled:
            devices.extend(m.uuid for m in gpu.mig_devices)
        else:
            devices.append(gpu.uuid)
    for d, uuid in enumerate(devices):
        for r in range(per_device):
            name = f"pod-{d}-{r}"
            device_id = f"{uuid}::{r}" if per_device > 1 else uuid
            pods.append(
                PodResources(
                    "bench",
                    name,
                    (ContainerResources("main", (("nvidia.com/gpu", (device_id,)),)),),
                )
            )
            workloads.append(Workload(PodRef("bench", name, "main"), uuid, sm_percent=30))
    attribution = build_attribution(pods, machine=machine)
    source = SimulatedTelemetry(workloads=workloads)
    target = NodeTarget(
        machine=lambda: machine, source=source, attribution=lambda: attribution, hostname="bench"
    )
    return Exporter([target]), len(pods)


def scrape_row(label: str, pods: int, exporter: Exporter, runs: int) -> dict[str, Any]:
    """One result row: the exposition's size, and CPU time per scrape over ``runs`` scrapes."""
    text = exporter.scrape()
    median, mean, p95 = cpu_ms(exporter.scrape, runs)
    return {
        "case": label,
        "pods": pods,
        "series": sum(1 for line in text.splitlines() if line and line[0] != "#"),
        "bytes": len(text),
        "median_ms": median,
        "mean_ms": mean,
        "p95_ms": p95,
    }


def run_simulated(runs: int) -> list[dict[str, Any]]:
    results = []
    h100 = load_machine("dgx-h100", hostname="bench")
    a100 = load_machine("p4de.24xlarge", hostname="bench")
    a100 = apply_layout(a100, {g.index: {"1g.10gb": 7} for g in a100.gpus})
    for label, machine, per_device in (
        ("8 x H100, 2 time-sliced pods per GPU", h100, 2),
        ("8 x A100 80GB, 7 MIG 1g.10gb each, 1 pod per MIG device", a100, 1),
    ):
        exporter, pods = simulated_exporter(machine, per_device)
        results.append(scrape_row(label, pods, exporter, runs))
    return results


def raw_nvml_calls(nvml: Any, machine: Machine) -> Callable[[], None]:
    """The NVML calls one scrape makes, without anything around them: the same calls in the same
    order (process utilisation only where processes run, one non-blocking event-set poll, one
    GPM sample and metrics computation per GPM-capable GPU)."""
    handles = [nvml.nvmlDeviceGetHandleByUUID(g.uuid) for g in machine.gpus]
    links = [sum(link.links for link in g.nvlinks) for g in machine.gpus]
    tx, rx = nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
    events = nvml.nvmlEventSetCreate()
    for h in handles:
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, events)

    def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (nvml.NVMLError, AttributeError):
            return None

    gpm: dict[int, Any] = {}
    for i, h in enumerate(handles):
        support = call(nvml.nvmlGpmQueryDeviceSupport, h)
        if support is not None and support.isSupportedDevice:
            gpm[i] = call(nvml.nvmlGpmSampleGet, h, nvml.nvmlGpmSampleAlloc())
    metric_ids = [
        nvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
        nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        nvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
        nvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
        nvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    ]

    def gpm_metrics(i: int, h: Any) -> None:
        sample = call(nvml.nvmlGpmSampleGet, h, nvml.nvmlGpmSampleAlloc())
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version = nvml.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(metric_ids)
        get.sample1, get.sample2 = gpm[i], sample
        for j, metric in enumerate(metric_ids):
            get.metrics[j].metricId = metric
        call(nvml.nvmlGpmMetricsGet, get)
        call(nvml.nvmlGpmSampleFree, gpm[i])
        gpm[i] = sample

    def once() -> None:
        call(nvml.nvmlEventSetWait_v2, events, 0)
        for i, (h, n) in enumerate(zip(handles, links, strict=True)):
            call(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)
            call(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM)
            call(nvml.nvmlDeviceGetFieldValues, h, [nvml.NVML_FI_DEV_MEMORY_TEMP])
            call(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
            call(nvml.nvmlDeviceGetPowerUsage, h)
            call(nvml.nvmlDeviceGetTotalEnergyConsumption, h)
            call(nvml.nvmlDeviceGetPcieReplayCounter, h)
            call(nvml.nvmlDeviceGetUtilizationRates, h)
            call(nvml.nvmlDeviceGetEncoderUtilization, h)
            call(nvml.nvmlDeviceGetDecoderUtilization, h)
            call(nvml.nvmlDeviceGetMemoryInfo, h, version=nvml.nvmlMemory_v2)
            if n:
                fields = [(f, link) for link in range(n) for f in (tx, rx)]
                call(nvml.nvmlDeviceGetFieldValues, h, fields)
            call(nvml.nvmlDeviceGetGridLicensableFeatures, h)
            call(nvml.nvmlDeviceGetRemappedRows, h)
            if i in gpm:
                gpm_metrics(i, h)
            if call(nvml.nvmlDeviceGetComputeRunningProcesses, h):
                call(nvml.nvmlDeviceGetProcessUtilization, h, 0)

    return once


def run_fake_nvml(runs: int) -> list[dict[str, Any]]:
    """The NVML path (``NvmlTelemetry``, the collector, the renderer) over the fake NVML of
    tests/metrics: what kgpu's own code costs per scrape, without a driver."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from kgpu.metrics.nvml_source import NvmlTelemetry
    from tests.metrics.fake_nvml import FakeNvml

    results = []
    h100 = load_machine("dgx-h100", hostname="bench")
    a100 = load_machine("p4de.24xlarge", hostname="bench")
    for label, machine in (("8 x H100 (GPM), fake NVML", h100), ("8 x A100, fake NVML", a100)):
        nvml = FakeNvml(machine)
        for state in nvml.state.values():
            state.gpm = {1: 40.0, 5: 20.0, 10: 10.0, 20: 100.0, 21: 200.0}
        try:
            source = NvmlTelemetry(nvml, gpm_prime_s=0.0)
        except TypeError:  # a kgpu from before GPM (for before/after comparisons)
            source = NvmlTelemetry(nvml)
        exporter = Exporter([NodeTarget(machine=lambda m=machine: m, source=source)])
        results.append(scrape_row(label, 0, exporter, runs))
    return results


def run_event_reader(runs: int) -> list[tuple[str, float, float]]:
    """Wall ms per scrape (median, p95) over kgpu.testing's fake NVML, whose event waits block
    one at a time as a real driver's do: ``kgpu metrics`` alone (the exporter holds the event
    reader), the agent's arrangement (the health loop subscribed to the same reader, waiting),
    and the design before issue 22 (the exporter drained an event set of its own on each scrape
    while the health monitor waited on another), for comparison."""

    return [_event_reader_case(case, runs) for case in EVENT_READER_CASES]


EVENT_READER_CASES = ("kgpu metrics alone", "agent (health loop + exporter)", "before: own drain")


def _event_reader_case(case: str, runs: int) -> tuple[str, float, float]:
    from kgpu.drivers.metrics import MetricsComponent
    from kgpu.hardware.nvml import NvmlBackend
    from kgpu.hardware.simulated import SimulatedBackend
    from kgpu.testing.fake_nvml import FakeNvml

    fake = FakeNvml(SimulatedBackend(load_machine("dgx-h100", hostname="bench")))
    backend = NvmlBackend(fake)
    metrics = MetricsComponent("127.0.0.1:0", backend, None, "bench")
    metrics.start()
    stopping = threading.Event()
    subscription = backend.events().subscribe() if case != EVENT_READER_CASES[0] else None

    def health() -> None:  # the agent's health loop: wait on the shared reader
        while not stopping.is_set() and subscription is not None:
            subscription.wait(0.5)

    threading.Thread(target=health, daemon=True).start()
    scrape: Callable[[], object] = metrics.scrape
    if case == EVENT_READER_CASES[2]:
        own = fake.nvmlEventSetCreate()
        for g in range(8):
            fake.nvmlDeviceRegisterEvents(fake.nvmlDeviceGetHandleByIndex(g), 8, own)

        def scrape_with_drain() -> object:
            with contextlib.suppress(fake.NVMLError):
                fake.nvmlEventSetWait_v2(own, 0)
            return metrics.scrape()

        scrape = scrape_with_drain
    time.sleep(0.1)  # the reader is waiting
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        scrape()
        samples.append((time.perf_counter_ns() - start) / 1e6)
        time.sleep(0.01)  # scrapes land anywhere in the reader's wait
    samples.sort()
    stopping.set()
    metrics.stop()
    if subscription is not None:
        subscription.close()
    backend.close()
    return case, statistics.median(samples), samples[int(0.95 * len(samples))]


def run_nvml(runs: int) -> dict[str, Any]:
    import pynvml

    from kgpu.hardware.nvml import NvmlBackend
    from kgpu.metrics.nvml_source import NvmlTelemetry

    backend = NvmlBackend()
    machine = backend.snapshot()
    source = NvmlTelemetry()
    exporter = Exporter([NodeTarget(machine=lambda: machine, source=source, hostname="bench")])
    text = exporter.scrape()
    raw = raw_nvml_calls(pynvml, machine)
    raw_median, raw_mean, raw_p95 = cpu_ms(raw, runs)
    median, mean, p95 = cpu_ms(exporter.scrape, runs)
    wall_raw = _wall(raw, runs)
    wall_scrape = _wall(exporter.scrape, runs)
    processes = [
        (p.pid, p.device_uuid, p.used_memory_bytes, p.sm_util)
        for p in source.read(machine).processes
    ]
    source.close()
    backend.close()
    return {
        "gpus": [g.product_name for g in machine.gpus],
        "driver": machine.driver_version,
        "series": sum(1 for line in text.splitlines() if line and line[0] != "#"),
        "scrape_cpu_ms": (median, mean, p95),
        "raw_cpu_ms": (raw_median, raw_mean, raw_p95),
        "scrape_wall_ms": wall_scrape,
        "raw_wall_ms": wall_raw,
        "ratio_cpu_median": median / raw_median if raw_median else float("nan"),
        "ratio_wall_median": wall_scrape / wall_raw if wall_raw else float("nan"),
        "text": text,
        "processes": processes,
    }


def _wall(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--nvml", action="store_true", help="also measure against real GPUs")
    parser.add_argument(
        "--fake-nvml", action="store_true", help="also the NVML path over a fake NVML"
    )
    parser.add_argument("--dump", help="with --nvml: write one real scrape to this file")
    parser.add_argument(
        "--event-reader",
        action="store_true",
        help="only: scrape wall time with a blocking event wait, agent vs kgpu metrics alone",
    )
    args = parser.parse_args()
    if args.event_reader:
        print(f"python {platform.python_version()} on {platform.machine()}, fake NVML, 8 x H100")
        rows = run_event_reader(min(args.runs, 100))
        for case, median, p95 in rows:
            print(f"{case:40} wall median {median:8.2f} ms  p95 {p95:8.2f} ms")
        alone, agent = rows[0][1], rows[1][1]
        print(f"agent / alone (median): {agent / alone:.2f}x (target <= 2x)")
        return 0
    print(f"python {platform.python_version()} on {platform.machine()}")
    print(f"{'case':58} {'pods':>5} {'series':>6} {'KiB':>6} {'median':>8} {'mean':>8} {'p95':>8}")
    cases = run_simulated(args.runs)
    if args.fake_nvml:
        cases += run_fake_nvml(args.runs)
    for r in cases:
        print(
            f"{r['case']:58} {r['pods']:5d} {r['series']:6d} {r['bytes'] / 1024:6.1f} "
            f"{r['median_ms']:7.2f}ms {r['mean_ms']:7.2f}ms {r['p95_ms']:7.2f}ms"
        )
    if args.nvml:
        r = run_nvml(max(50, args.runs // 5))
        print(f"\nreal GPUs: {r['gpus']} driver {r['driver']}, {r['series']} series")
        print("scrape CPU ms (median, mean, p95): {:.3f} {:.3f} {:.3f}".format(*r["scrape_cpu_ms"]))
        print("raw NVML CPU ms (median, mean, p95): {:.3f} {:.3f} {:.3f}".format(*r["raw_cpu_ms"]))
        print(
            f"scrape wall ms median {r['scrape_wall_ms']:.3f}, "
            f"raw NVML wall ms median {r['raw_wall_ms']:.3f}"
        )
        print(f"ratio CPU {r['ratio_cpu_median']:.2f}x, wall {r['ratio_wall_median']:.2f}x")
        print(f"processes seen by NVML: {r['processes']}")
        if args.dump:
            with open(args.dump, "w", encoding="utf-8") as out:
                out.write(r["text"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
