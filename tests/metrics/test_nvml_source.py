"""NVML telemetry: a failing call drops only its series and is counted; the scrape goes on."""

from __future__ import annotations

import pynvml

from kgpu.hardware.model import Machine
from kgpu.metrics.collector import Exporter, NodeTarget
from kgpu.metrics.nvml_source import NvmlTelemetry

from .conftest import series
from .fake_nvml import MIB, FakeNvml


def _exporter(machine: Machine, nvml: FakeNvml) -> Exporter:
    return Exporter([NodeTarget(machine=lambda: machine, source=NvmlTelemetry(nvml), hostname="n")])


def test_a_failing_field_drops_that_series_and_counts_the_error(h100: Machine) -> None:
    nvml = FakeNvml(h100)
    bad = h100.gpus[2].uuid
    nvml.fail[("nvmlDeviceGetPowerUsage", bad)] = pynvml.NVML_ERROR_UNKNOWN
    exporter = _exporter(h100, nvml)

    text = exporter.scrape()
    power = {lab["UUID"]: v for lab, v in series(text, "DCGM_FI_DEV_POWER_USAGE")}
    assert bad not in power and len(power) == 7
    assert all(v == 350.0 for v in power.values())  # mW -> W
    # Everything else of the failing GPU is still there.
    assert len(series(text, "DCGM_FI_DEV_GPU_TEMP", UUID=bad)) == 1
    assert len(series(text, "DCGM_FI_DEV_SM_CLOCK")) == 8
    errors = series(
        text, "kgpu_exporter_errors_total", source="nvml", field="DCGM_FI_DEV_POWER_USAGE"
    )
    assert [v for _, v in errors] == [1]

    text = exporter.scrape()
    errors = series(
        text, "kgpu_exporter_errors_total", source="nvml", field="DCGM_FI_DEV_POWER_USAGE"
    )
    assert [v for _, v in errors] == [2]

    del nvml.fail[("nvmlDeviceGetPowerUsage", bad)]
    text = exporter.scrape()
    assert len(series(text, "DCGM_FI_DEV_POWER_USAGE")) == 8


def test_not_supported_is_not_an_error_and_is_not_asked_again(h100: Machine) -> None:
    nvml = FakeNvml(h100)
    nvml.fail[("nvmlDeviceGetEncoderUtilization", "*")] = pynvml.NVML_ERROR_NOT_SUPPORTED
    exporter = _exporter(h100, nvml)
    text = exporter.scrape()
    assert series(text, "DCGM_FI_DEV_ENC_UTIL") == []
    assert series(text, "kgpu_exporter_errors_total") == []
    asked = nvml.calls.count("nvmlDeviceGetEncoderUtilization")
    exporter.scrape()
    assert nvml.calls.count("nvmlDeviceGetEncoderUtilization") == asked


def test_a_lost_gpu_leaves_the_others_served(h100: Machine) -> None:
    nvml = FakeNvml(h100)
    lost = h100.gpus[5].uuid
    nvml.fail[("nvmlDeviceGetHandleByUUID", lost)] = pynvml.NVML_ERROR_GPU_IS_LOST
    text = _exporter(h100, nvml).scrape()
    assert len(series(text, "DCGM_FI_DEV_GPU_UTIL")) == 7
    assert series(text, "DCGM_FI_DEV_GPU_UTIL", UUID=lost) == []
    assert series(text, "kgpu_exporter_errors_total", source="nvml", field="handle")[0][1] == 1


def test_values_and_units_follow_dcgm(h100: Machine) -> None:
    nvml = FakeNvml(h100)
    state = nvml.state[h100.gpus[0].uuid]
    state.util, state.mem_util, state.used_bytes, state.energy_mj = 64, 12, 1536 * MIB, 123456
    text = _exporter(h100, nvml).scrape()
    uuid = h100.gpus[0].uuid
    assert series(text, "DCGM_FI_DEV_GPU_UTIL", UUID=uuid)[0][1] == 64
    assert series(text, "DCGM_FI_DEV_MEM_COPY_UTIL", UUID=uuid)[0][1] == 12
    assert series(text, "DCGM_FI_DEV_FB_USED", UUID=uuid)[0][1] == 1536
    assert series(text, "DCGM_FI_DEV_FB_FREE", UUID=uuid)[0][1] == h100.gpus[0].memory_mib - 1536
    assert series(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", UUID=uuid)[0][1] == 123456
    # NVLink total is the sum of TX+RX data counters over the GPU's 18 links.
    assert series(text, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", UUID=uuid)[0][1] == 18 * 2 * 1000


def test_process_samples_survive_scrapes_faster_than_nvml_sampling(h100: Machine) -> None:
    import time

    nvml = FakeNvml(h100)
    uuid = h100.gpus[0].uuid
    now_us = int(time.time() * 1e6)
    state = nvml.state[uuid]
    state.processes = [(41, 100 * MIB), (42, 200 * MIB)]
    state.samples = [(41, now_us - 1000, 70), (42, now_us - 60_000_000, 20)]
    source = NvmlTelemetry(nvml)
    first = {p.pid: p.sm_util for p in source.read(h100).processes}
    assert first == {41: 70.0, 42: 20.0}
    # No sample newer than the last scrape: a recent one is kept, a stale one reads as idle.
    second = {p.pid: p.sm_util for p in source.read(h100).processes}
    assert second == {41: 70.0, 42: 0.0}
    assert {p.pid: p.used_memory_bytes for p in source.read(h100).processes} == {
        41: 100 * MIB,
        42: 200 * MIB,
    }
