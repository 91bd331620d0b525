"""The fields dcgm-exporter serves by default that come from NVML beyond the basics: memory
temperature, reserved framebuffer, remapped rows, vGPU licensing and the GPM profiling fields."""

from __future__ import annotations

import pynvml
import pytest

from kgpu.hardware.mig import apply_layout
from kgpu.hardware.model import Machine
from kgpu.hardware.profiles import load_machine
from kgpu.metrics import fields as F
from kgpu.metrics.collector import Exporter, NodeTarget
from kgpu.metrics.counters import DEFAULT, CounterSet, parse_counters
from kgpu.metrics.nvml_source import NvmlTelemetry

from .conftest import series
from .fake_nvml import MIB, FakeNvml

GPM = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 42.0,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 30.0,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 12.5,
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 100.0,
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: 250.0,
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def exporter(
    machine: Machine, nvml: FakeNvml, counters: CounterSet = DEFAULT, clock: Clock | None = None
) -> tuple[Exporter, NvmlTelemetry]:
    clock = clock or Clock()
    source = NvmlTelemetry(nvml, counters=counters, clock=clock, sleep=clock.sleep)
    target = NodeTarget(machine=lambda: machine, source=source, hostname="n")
    return Exporter([target], counters=counters), source


def test_memory_temperature_reserved_framebuffer_and_remapped_rows(h100: Machine) -> None:
    nvml = FakeNvml(h100)
    uuid = h100.gpus[1].uuid
    state = nvml.state[uuid]
    state.used_bytes, state.reserved_bytes, state.mem_temp = 4096 * MIB, 512 * MIB, 61
    state.remapped = (3, 1, 0, 1)
    text = exporter(h100, nvml)[0].scrape()
    value = {
        name: series(text, name, UUID=uuid)[0][1]
        for name in F.DCGM_BY_NAME
        if series(text, name, UUID=uuid)
    }
    assert value["DCGM_FI_DEV_MEMORY_TEMP"] == 61
    # v2 memory info: used without the driver's reservation, as DCGM reports it
    assert value["DCGM_FI_DEV_FB_USED"] == 4096
    assert value["DCGM_FI_DEV_FB_RESERVED"] == 512
    assert value["DCGM_FI_DEV_FB_FREE"] == h100.gpus[1].memory_mib - 4096 - 512
    assert value["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == 3
    assert value["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] == 1
    assert value["DCGM_FI_DEV_ROW_REMAP_FAILURE"] == 1
    # bare metal: NVML says vGPU licensing is not supported -> no series, no error
    assert "DCGM_FI_DEV_VGPU_LICENSE_STATUS" not in value
    assert series(text, "kgpu_exporter_errors_total") == []
    assert "# TYPE DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS counter" in text


def test_a_gddr_gpu_without_memory_sensor_or_row_remapping_has_no_such_series(
    h100: Machine,
) -> None:
    nvml = FakeNvml(h100)
    for state in nvml.state.values():
        state.mem_temp, state.remapped = None, None
    exp, _ = exporter(h100, nvml)
    text = exp.scrape()
    assert series(text, "DCGM_FI_DEV_MEMORY_TEMP") == []
    assert series(text, "DCGM_FI_DEV_ROW_REMAP_FAILURE") == []
    assert series(text, "kgpu_exporter_errors_total") == []
    asked = nvml.calls.count("nvmlDeviceGetRemappedRows")
    exp.scrape()
    assert nvml.calls.count("nvmlDeviceGetRemappedRows") == asked  # not asked again


def test_gpm_fields_from_two_samples_on_hopper(h100: Machine) -> None:
    nvml = FakeNvml(h100)
    uuid = h100.gpus[0].uuid
    nvml.state[uuid].gpm = dict(GPM)
    clock = Clock()
    exp, source = exporter(h100, nvml, clock=clock)
    text = exp.scrape()
    # the first scrape sampled every GPU, waited once, and sampled again
    assert clock.slept == [0.1]
    assert series(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", UUID=uuid)[0][1] == pytest.approx(0.42)
    assert series(text, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", UUID=uuid)[0][1] == pytest.approx(0.3)
    assert series(text, "DCGM_FI_PROF_DRAM_ACTIVE", UUID=uuid)[0][1] == pytest.approx(0.125)
    assert series(text, "DCGM_FI_PROF_PCIE_TX_BYTES", UUID=uuid)[0][1] == 100 * MIB
    assert series(text, "DCGM_FI_PROF_PCIE_RX_BYTES", UUID=uuid)[0][1] == 250 * MIB
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" in text and "0.420000" in text  # %f, as DCGM doubles
    # later scrapes measure from the previous scrape's sample: no more waiting
    nvml.state[uuid].gpm[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL] = 90.0
    clock.now += 15
    text = exp.scrape()
    assert clock.slept == [0.1]
    assert series(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", UUID=uuid)[0][1] == pytest.approx(0.9)
    # one live sample per GPU between scrapes; all freed on close
    live = [s for s in nvml.samples if not s.freed]
    assert len(live) == len(h100.gpus)
    source.close()
    assert all(s.freed for s in nvml.samples)


def test_scrapes_closer_than_nvml_can_measure_reuse_the_last_values(h100: Machine) -> None:
    nvml = FakeNvml(h100)
    uuid = h100.gpus[0].uuid
    nvml.state[uuid].gpm = dict(GPM)
    clock = Clock()
    exp, _ = exporter(h100, nvml, clock=clock)
    exp.scrape()
    taken = nvml.calls.count("nvmlGpmSampleGet")
    nvml.state[uuid].gpm[pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL] = 10.0
    clock.now += 0.01
    text = exp.scrape()
    assert nvml.calls.count("nvmlGpmSampleGet") == taken
    assert series(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", UUID=uuid)[0][1] == pytest.approx(0.42)


def test_before_hopper_the_profiling_fields_are_absent_not_zero() -> None:
    a100 = load_machine("p4de.24xlarge", hostname="n")
    nvml = FakeNvml(a100)
    for state in nvml.state.values():
        state.gpm = dict(GPM)  # even if the counters were there, NVML says no GPM
    clock = Clock()
    text = exporter(a100, nvml, clock=clock)[0].scrape()
    for spec in F.PROF_METRICS:
        assert spec.name not in text
    assert clock.slept == []
    assert "nvmlGpmSampleGet" not in nvml.calls
    assert series(text, "kgpu_exporter_errors_total") == []


def test_mig_devices_report_their_own_activity(h100: Machine) -> None:
    machine = apply_layout(h100, {0: {"3g.40gb": 2}})
    nvml = FakeNvml(machine)
    gpu = machine.gpus[0]
    nvml.state[gpu.uuid].gpm = dict(GPM)
    first = gpu.mig_devices[0]
    nvml.state[first.uuid].gpm = {pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 77.0}
    text = exporter(machine, nvml)[0].scrape()
    mig_series = series(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU_I_ID=str(first.gi_id))
    assert [v for _, v in mig_series] == [pytest.approx(0.77)]
    assert mig_series[0][0]["GPU_I_PROFILE"] == "3g.40gb"
    # the whole GPU keeps its own series; PCIe is a GPU-level field only
    whole = [lab for lab, _ in series(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", UUID=gpu.uuid)]
    assert sum("GPU_I_ID" not in lab for lab in whole) == 1
    assert all("GPU_I_ID" not in lab for lab, _ in series(text, "DCGM_FI_PROF_PCIE_TX_BYTES"))


def test_a_failing_gpm_read_drops_only_the_profiling_series(h100: Machine) -> None:
    nvml = FakeNvml(h100)
    for state in nvml.state.values():
        state.gpm = dict(GPM)
    nvml.fail[("nvmlGpmSampleGet", h100.gpus[3].uuid)] = pynvml.NVML_ERROR_UNKNOWN
    text = exporter(h100, nvml)[0].scrape()
    assert len(series(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")) == 7
    assert len(series(text, "DCGM_FI_DEV_GPU_TEMP")) == 8
    (error,) = series(text, "kgpu_exporter_errors_total", source="nvml", field="gpm")
    assert error[1] >= 1


def test_a_counters_file_selects_what_is_read_and_served(h100: Machine) -> None:
    counters = parse_counters(
        "# mine\n"
        "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, graphics engine activity\n",
        "counters.csv",
    )
    nvml = FakeNvml(h100)
    text = exporter(h100, nvml, counters)[0].scrape()
    names = {line.split("{")[0] for line in text.splitlines() if line and line[0] != "#"}
    assert names == {"DCGM_FI_DEV_GPU_TEMP"}  # no GPM counters in this fake state: absent
    assert "DCGM_FI_DRIVER_VERSION" not in text  # the file did not ask for the label
    assert "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C)." in text
    for unread in ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetMemoryInfo", "nvmlEventSetCreate"):
        assert unread not in nvml.calls
    assert "nvmlGpmSampleGet" in nvml.calls
