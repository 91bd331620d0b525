"""Simulated telemetry follows the placed workloads and the simulated clock."""

from __future__ import annotations

from kgpu.hardware.mig import apply_layout
from kgpu.hardware.model import Machine
from kgpu.hardware.profiles import load_machine
from kgpu.metrics import fields as F
from kgpu.metrics.simulated import SimulatedTelemetry, Workload
from kgpu.metrics.sources import PodRef

A = PodRef("ns", "a", "c")
B = PodRef("ns", "b", "c")


def test_idle_gpus_idle_and_load_moves_power_and_temperature(h100: Machine) -> None:
    gpu = h100.gpus[0].uuid
    source = SimulatedTelemetry()
    idle = source.read(h100).values[gpu]
    source.set_workloads([Workload(A, gpu, sm_percent=50)])
    busy = source.read(h100).values[gpu]
    assert idle[F.GPU_UTIL.name] == 0 and busy[F.GPU_UTIL.name] == 50
    assert busy[F.POWER_USAGE.name] > idle[F.POWER_USAGE.name]
    assert busy[F.GPU_TEMP.name] > idle[F.GPU_TEMP.name]
    assert busy[F.SM_CLOCK.name] > idle[F.SM_CLOCK.name]


def test_time_sliced_sharers_split_an_oversubscribed_gpu(h100: Machine) -> None:
    gpu = h100.gpus[0].uuid
    source = SimulatedTelemetry(
        workloads=[
            Workload(A, gpu, sm_percent=90, memory_mib=1000),
            Workload(B, gpu, sm_percent=60),
        ]
    )
    tel = source.read(h100)
    shares = {p.pod: p.sm_util for p in tel.processes}
    assert shares == {A: 60.0, B: 40.0}
    assert tel.values[gpu][F.GPU_UTIL.name] == 100
    assert tel.values[gpu][F.FB_USED.name] == 1000 + 2048


def test_mps_limits_are_enforced(h100: Machine) -> None:
    gpu = h100.gpus[0].uuid
    source = SimulatedTelemetry(
        workloads=[
            Workload(
                A, gpu, sm_percent=90, memory_mib=30000, sm_limit_percent=50, memory_limit_mib=20000
            ),
            Workload(B, gpu, sm_percent=10, sm_limit_percent=50, memory_limit_mib=20000),
        ]
    )
    tel = source.read(h100)
    by_pod = {p.pod: p for p in tel.processes}
    assert by_pod[A].sm_util == 50.0 and by_pod[A].used_memory_bytes == 20000 * 1024 * 1024
    assert tel.values[gpu][F.GPU_UTIL.name] == 60


def test_values_breathe_with_the_clock_and_energy_accumulates(h100: Machine) -> None:
    gpu = h100.gpus[0].uuid
    now = [0.0]
    source = SimulatedTelemetry(clock=lambda: now[0], workloads=[Workload(A, gpu, sm_percent=50)])
    first = source.read(h100).values[gpu]
    now[0] = 75.0  # a quarter period: demand x 1.1
    second = source.read(h100).values[gpu]
    now[0] = 150.0
    third = source.read(h100).values[gpu]
    assert (first[F.GPU_UTIL.name], second[F.GPU_UTIL.name], third[F.GPU_UTIL.name]) == (50, 55, 50)
    assert first[F.TOTAL_ENERGY.name] == 0
    # 75 s at the first reading's power, in mJ.
    assert second[F.TOTAL_ENERGY.name] == int(first[F.POWER_USAGE.name] * 75 * 1000)
    assert third[F.TOTAL_ENERGY.name] > second[F.TOTAL_ENERGY.name]


def test_mig_gpus_report_memory_per_mig_device_and_no_utilisation() -> None:
    a100 = apply_layout(load_machine("a100-40gb"), {0: {"3g.20gb": 2}})
    gpu = a100.gpus[0]
    mig = gpu.mig_devices[0]
    tel = SimulatedTelemetry(workloads=[Workload(A, mig.uuid, memory_mib=4096)]).read(a100)
    assert F.GPU_UTIL.name not in tel.values[gpu.uuid]
    assert tel.values[mig.uuid] == {
        F.FB_USED.name: 4096,
        F.FB_FREE.name: mig.memory_mib - 4096,
        F.FB_RESERVED.name: 0,
    }
    assert tel.values[gpu.mig_devices[1].uuid][F.FB_USED.name] == 0
    assert [p.device_uuid for p in tel.processes] == [mig.uuid]


def test_injected_failures_drop_the_field() -> None:
    t4 = load_machine("t4")
    source = SimulatedTelemetry()
    source.fail.add(("*", F.POWER_USAGE.name))
    tel = source.read(t4)
    assert F.POWER_USAGE.name not in tel.values[t4.gpus[0].uuid]
    assert [f.field for f in tel.failures] == [F.POWER_USAGE.name]
