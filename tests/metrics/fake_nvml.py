"""A stand-in for the ``pynvml`` module over a simulated machine, for NvmlTelemetry tests.

It answers the NVML calls NvmlTelemetry makes with pynvml's own error classes and constants:
handles by UUID, clocks, temperature, power in mW, energy in mJ, utilisation rates, memory info
in bytes, running compute processes and process utilisation samples newer than the timestamp
asked for (``NVML_ERROR_NOT_FOUND`` when there are none, as NVML does). ``fail`` makes a named
function raise a given NVML error, for one device or all.
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

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_") or name.startswith("nvmlEventType"):
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

    def nvmlDeviceGetMemoryInfo(self, h: str) -> Any:
        s = self._check("nvmlDeviceGetMemoryInfo", h)
        total = self._memory_of(h)
        return SimpleNamespace(total=total, used=s.used_bytes, free=total - s.used_bytes)

    def nvmlDeviceGetFieldValues(self, h: str, requests: list[Any]) -> list[Any]:
        self._check("nvmlDeviceGetFieldValues", h)
        return [SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(ullVal=1000)) for _ in requests]

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
