"""A stand-in for the ``pynvml`` module over a simulated machine, for NvmlTelemetry tests.

It answers the NVML calls NvmlTelemetry makes with pynvml's own error classes and constants:
handles by UUID, clocks, temperature, power in mW, energy in mJ, utilisation rates, memory info
in bytes (v1, and v2 with the driver's reservation), field values (memory temperature, NVLink
throughput; a field a device lacks answers ``NVML_ERROR_NOT_SUPPORTED`` in its own return code,
as NVML does), remapped rows, vGPU licensing (not supported: bare metal), running compute
processes and process utilisation samples newer than the timestamp asked for
(``NVML_ERROR_NOT_FOUND`` when there are none, as NVML does).

GPM as NVML does it: ``nvmlGpmQueryDeviceSupport`` says yes for compute capability 9.0 and newer
(Hopper), samples are allocated, filled by ``nvmlGpmSampleGet``/``nvmlGpmMigSampleGet`` with
the device's counters at that moment, and ``nvmlGpmMetricsGet`` refuses two samples that are not
in time order or were freed (``NVML_ERROR_INVALID_ARGUMENT``); a metric is the value the device
state held between the two samples. Sampling an unsupported GPU answers ``NOT_SUPPORTED``.
``fail`` makes a named function raise a given NVML error, for one device or all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

from kgpu.hardware.model import Machine

MIB = 1024 * 1024


@dataclass
class FakeGpuState:
    sm_clock: int = 1980
    mem_clock: int = 2619
    temp: int = 50
    power_mw: int = 350_000
    energy_mj: int = 1_000_000
    replay: int = 0
    util: int = 0
    mem_util: int = 0
    enc: int = 0
    dec: int = 0
    used_bytes: int = 0
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    samples: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, ts, smUtil)
    reserved_bytes: int = 0
    mem_temp: int | None = 48  # None: the GPU has no memory sensor (GDDR)
    remapped: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # corr, unc, pending, failure
    # GPM metric id -> value (percent, or MiB/s for PCIe)
    gpm: dict[int, float] = field(default_factory=dict)


@dataclass
class FakeGpmSample:
    device: str = ""
    taken: int = 0  # sample order; 0 = never filled
    values: dict[int, float] = field(default_factory=dict)
    freed: bool = False


class FakeGpmMetricsGet:
    """Stands for ``c_nvmlGpmMetricsGet_t``: the fields NvmlTelemetry sets and reads."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: FakeGpmSample | None = None
        self.sample2: FakeGpmSample | None = None
        self.metrics = [
            SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0)
            for _ in range(pynvml.NVML_GPM_METRIC_MAX)
        ]


class FakeNvml:
    NVMLError = pynvml.NVMLError

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        self.state: dict[str, FakeGpuState] = {g.uuid: FakeGpuState() for g in machine.gpus}
        for gpu in machine.gpus:
            for mig in gpu.mig_devices:
                self.state[mig.uuid] = FakeGpuState()
        self.fail: dict[tuple[str, str], int] = {}  # (function, uuid or "*") -> NVML error code
        self.calls: list[str] = []
        self.initialised = 0
        self.gpm_supported = {g.uuid: g.compute_capability >= (9, 0) for g in machine.gpus}
        self.samples: list[FakeGpmSample] = []
        self._taken = 0

    nvmlMemory_v2 = pynvml.nvmlMemory_v2
    c_nvmlGpmMetricsGet_t = FakeGpmMetricsGet

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "nvmlEventType")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _check(self, fn: str, handle: str) -> FakeGpuState:
        self.calls.append(fn)
        code = self.fail.get((fn, handle), self.fail.get((fn, "*")))
        if code is not None:
            raise pynvml.NVMLError(code)
        return self.state[handle]

    def _memory_of(self, uuid: str) -> int:
        found = self.machine.by_uuid(uuid)
        return found.memory_mib * MIB

    # lifecycle and handles
    def nvmlInit(self) -> None:
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self._check("nvmlDeviceGetHandleByUUID", uuid)
        return uuid

    # device fields
    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        s = self._check("nvmlDeviceGetClockInfo", h)
        return s.sm_clock if clock == pynvml.NVML_CLOCK_SM else s.mem_clock

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        return self._check("nvmlDeviceGetTemperature", h).temp

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return self._check("nvmlDeviceGetPowerUsage", h).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h: str) -> int:
        return self._check("nvmlDeviceGetTotalEnergyConsumption", h).energy_mj

    def nvmlDeviceGetPcieReplayCounter(self, h: str) -> int:
        return self._check("nvmlDeviceGetPcieReplayCounter", h).replay

    def nvmlDeviceGetUtilizationRates(self, h: str) -> Any:
        s = self._check("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=s.util, memory=s.mem_util)

    def nvmlDeviceGetEncoderUtilization(self, h: str) -> list[int]:
        return [self._check("nvmlDeviceGetEncoderUtilization", h).enc, 167000]

    def nvmlDeviceGetDecoderUtilization(self, h: str) -> list[int]:
        return [self._check("nvmlDeviceGetDecoderUtilization", h).dec, 167000]

    def nvmlDeviceGetMemoryInfo(self, h: str, version: int | None = None) -> Any:
        s = self._check("nvmlDeviceGetMemoryInfo", h)
        total = self._memory_of(h)
        if version is None:  # v1: used includes the driver's reservation
            used = s.used_bytes + s.reserved_bytes
            return SimpleNamespace(total=total, used=used, free=total - used)
        self._check("nvmlDeviceGetMemoryInfo_v2", h)
        free = total - s.used_bytes - s.reserved_bytes
        return SimpleNamespace(
            version=version, total=total, reserved=s.reserved_bytes, used=s.used_bytes, free=free
        )

    def nvmlDeviceGetFieldValues(self, h: str, requests: list[Any]) -> list[Any]:
        s = self._check("nvmlDeviceGetFieldValues", h)
        out = []
        for request in requests:
            field_id = request[0] if isinstance(request, tuple) else request
            if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                supported = s.mem_temp is not None
                out.append(
                    SimpleNamespace(
                        nvmlReturn=0 if supported else pynvml.NVML_ERROR_NOT_SUPPORTED,
                        valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                        value=SimpleNamespace(uiVal=s.mem_temp or 0),
                    )
                )
            else:
                out.append(
                    SimpleNamespace(
                        nvmlReturn=0,
                        valueType=pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                        value=SimpleNamespace(ullVal=1000),
                    )
                )
        return out

    def nvmlDeviceGetRemappedRows(self, h: str) -> tuple[int, int, int, int]:
        s = self._check("nvmlDeviceGetRemappedRows", h)
        if s.remapped is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return s.remapped

    def nvmlDeviceGetGridLicensableFeatures(self, h: str) -> Any:
        self._check("nvmlDeviceGetGridLicensableFeatures", h)
        return SimpleNamespace(
            isGridLicenseSupported=0, licensableFeaturesCount=0, gridLicensableFeatures=[]
        )

    # GPM
    def nvmlGpmQueryDeviceSupport(self, h: str) -> Any:
        self._check("nvmlGpmQueryDeviceSupport", h)
        return SimpleNamespace(version=1, isSupportedDevice=int(self.gpm_supported[h]))

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:
        self.calls.append("nvmlGpmSampleAlloc")
        sample = FakeGpmSample()
        self.samples.append(sample)
        return sample

    def nvmlGpmSampleFree(self, sample: FakeGpmSample) -> None:
        self.calls.append("nvmlGpmSampleFree")
        if sample.freed:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        sample.freed = True

    def _fill(self, device: str, sample: FakeGpmSample) -> FakeGpmSample:
        if sample.freed:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._taken += 1
        sample.device, sample.taken = device, self._taken
        sample.values = dict(self.state[device].gpm)
        return sample

    def nvmlGpmSampleGet(self, h: str, sample: FakeGpmSample) -> FakeGpmSample:
        self._check("nvmlGpmSampleGet", h)
        if not self.gpm_supported.get(h, False):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._fill(h, sample)

    def nvmlGpmMigSampleGet(self, h: str, gi_id: int, sample: FakeGpmSample) -> FakeGpmSample:
        self._check("nvmlGpmMigSampleGet", h)
        if not self.gpm_supported.get(h, False):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        parent = self.machine.by_uuid(h)
        mig = next(m for m in getattr(parent, "mig_devices", ()) if m.gi_id == gi_id)
        return self._fill(mig.uuid, sample)

    def nvmlGpmMetricsGet(self, get: FakeGpmMetricsGet) -> FakeGpmMetricsGet:
        self.calls.append("nvmlGpmMetricsGet")
        first, second = get.sample1, get.sample2
        if (
            first is None
            or second is None
            or first.freed
            or second.freed
            or not 0 < first.taken < second.taken
            or first.device != second.device
        ):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for metric in get.metrics[: get.numMetrics]:
            if metric.metricId in second.values:
                metric.nvmlReturn, metric.value = 0, second.values[metric.metricId]
            else:
                metric.nvmlReturn, metric.value = pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0
        return get

    # processes
    def nvmlDeviceGetComputeRunningProcesses(self, h: str) -> list[Any]:
        s = self._check("nvmlDeviceGetComputeRunningProcesses", h)
        return [
            SimpleNamespace(
                pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF
            )
            for pid, used in s.processes
        ]

    def nvmlDeviceGetProcessUtilization(self, h: str, last_seen: int) -> list[Any]:
        s = self._check("nvmlDeviceGetProcessUtilization", h)
        newer = [
            SimpleNamespace(pid=pid, timeStamp=ts, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
            for pid, ts, sm in s.samples
            if ts > last_seen
        ]
        if not newer:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return newer

    # events: none ever arrive
    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, h: str, types: int, event_set: object) -> None:
        return None

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: object) -> None:
        return None
