"""Telemetry from real GPUs through NVML (``nvidia-ml-py``), read at scrape time.

Each metric is one NVML call (or one field of a shared call), so a failing call drops only the
series it feeds and is reported as a :class:`~kgpu.metrics.sources.ReadFailure`; the exporter
counts it in ``kgpu_exporter_errors_total`` and serves the rest. "Not supported" is not a
failure: the field does not exist on that device (encoder on a GPU without one, utilisation on a
MIG-enabled GPU) and is not asked again.

Per-process accounting comes from ``nvmlDeviceGetComputeRunningProcesses`` (pid, used memory)
and ``nvmlDeviceGetProcessUtilization`` (per-pid SM samples since the last scrape). The last XID
per GPU comes from an NVML event set of this source's own, drained without waiting on each
scrape. Nothing here writes to a GPU.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import time
from collections.abc import Callable
from typing import Any

from kgpu.hardware.backend import BackendError
from kgpu.hardware.model import Gpu, Machine, MigDevice
from kgpu.metrics import fields as F
from kgpu.metrics.sources import ProcessSample, ReadFailure, Telemetry

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
_NO_INSTANCE = 0xFFFFFFFF
REUSE_SAMPLE_US = 5_000_000


class NvmlTelemetry:
    """A :class:`~kgpu.metrics.sources.TelemetrySource` over NVML.

    ``nvml`` is the ``pynvml`` module (a stand-in in tests); it is initialised here and shut
    down by :meth:`close` (NVML counts initialisations, so sharing a process with
    :class:`kgpu.hardware.nvml.NvmlBackend` is fine).
    """

    name = "nvml"

    def __init__(self, nvml: Any = None, processes: bool = True) -> None:
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError:
                raise BackendError(
                    "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
                ) from None
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise BackendError(f"NVML could not start: {exc}") from None
        self._processes = processes
        self._handles: dict[str, Any] = {}
        self._unsupported: set[tuple[str, str]] = set()
        self._last_sample_ts: dict[str, int] = {}
        self._last_xid: dict[str, int] = {}
        self._last_sm: dict[tuple[str, int], tuple[float, int]] = {}
        self._events: Any = None
        self._events_for: frozenset[str] = frozenset()
        self._not_supported = getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)
        self._not_found = getattr(nvml, "NVML_ERROR_NOT_FOUND", 6)
        self._timeout = getattr(nvml, "NVML_ERROR_TIMEOUT", 10)

    # -- plumbing ------------------------------------------------------------------------------

    def _handle(self, uuid: str, mig: MigDevice | None, parent: Any = None) -> Any:
        handle = self._handles.get(uuid)
        if handle is None:
            nvml = self._nvml
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
            except nvml.NVMLError:
                if mig is None or parent is None:
                    raise
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, mig.index)
            self._handles[uuid] = handle
        return handle

    def _call(
        self,
        tel: Telemetry,
        uuid: str,
        field: str,
        fn: Callable[[], Any],
    ) -> Any:
        """``fn()``, or None after recording why not."""
        if (uuid, field) in self._unsupported:
            return None
        nvml = self._nvml
        try:
            return fn()
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == self._not_supported:
                self._unsupported.add((uuid, field))
            else:
                tel.failures.append(ReadFailure(field, str(exc), uuid))
        except AttributeError:  # an nvidia-ml-py too old to have the function
            self._unsupported.add((uuid, field))
        except Exception as exc:
            tel.failures.append(ReadFailure(field, f"{type(exc).__name__}: {exc}", uuid))
        return None

    # -- reading -------------------------------------------------------------------------------

    def read(self, machine: Machine) -> Telemetry:
        tel = Telemetry()
        self._drain_xids(machine)
        for gpu in machine.gpus:
            try:
                handle = self._handle(gpu.uuid, None)
            except Exception as exc:
                tel.failures.append(ReadFailure("handle", str(exc), gpu.uuid))
                continue
            tel.values[gpu.uuid] = self._gpu_values(tel, gpu, handle)
            if gpu.mig_enabled:
                for mig in gpu.mig_devices:
                    self._read_mig(tel, gpu, mig, handle)
            elif self._processes:
                self._read_processes(tel, gpu.uuid, handle, utilization=True)
        return tel

    def _gpu_values(self, tel: Telemetry, gpu: Gpu, h: Any) -> dict[str, float]:
        nvml = self._nvml
        uuid = gpu.uuid
        out: dict[str, float] = {}

        def put(spec: F.MetricSpec, fn: Callable[[], Any]) -> None:
            value = self._call(tel, uuid, spec.name, fn)
            if value is not None:
                out[spec.name] = value

        put(F.SM_CLOCK, lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
        put(F.MEM_CLOCK, lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM))
        put(F.GPU_TEMP, lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))
        put(F.POWER_USAGE, lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
        put(F.TOTAL_ENERGY, lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h))
        put(F.PCIE_REPLAY, lambda: nvml.nvmlDeviceGetPcieReplayCounter(h))
        if not gpu.mig_enabled:
            util = self._call(
                tel, uuid, "utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(h)
            )
            if util is not None:
                out[F.GPU_UTIL.name] = util.gpu
                out[F.MEM_COPY_UTIL.name] = util.memory
            put(F.ENC_UTIL, lambda: nvml.nvmlDeviceGetEncoderUtilization(h)[0])
            put(F.DEC_UTIL, lambda: nvml.nvmlDeviceGetDecoderUtilization(h)[0])
            mem = self._call(tel, uuid, "memory", lambda: nvml.nvmlDeviceGetMemoryInfo(h))
            if mem is not None:
                out[F.FB_FREE.name] = mem.free // _MIB
                out[F.FB_USED.name] = mem.used // _MIB
        out[F.XID_ERRORS.name] = self._last_xid.get(uuid, 0)
        links = sum(link.links for link in gpu.nvlinks)
        if links:
            put(F.NVLINK_BANDWIDTH_TOTAL, lambda: self._nvlink_total(h, links))
        return out

    def _nvlink_total(self, h: Any, links: int) -> int:
        """KiB moved over all links (data TX + RX), from NVML's per-link throughput fields."""
        nvml = self._nvml
        tx = nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
        rx = nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
        requests = [(fid, link) for link in range(links) for fid in (tx, rx)]
        total = 0
        answered = False
        for fv in nvml.nvmlDeviceGetFieldValues(h, requests):
            if fv.nvmlReturn == 0:
                total += int(fv.value.ullVal)
                answered = True
        if not answered:
            raise nvml.NVMLError(self._not_supported)
        return total

    def _read_mig(self, tel: Telemetry, gpu: Gpu, mig: MigDevice, parent: Any) -> None:
        nvml = self._nvml
        try:
            h = self._handle(mig.uuid, mig, parent)
        except Exception as exc:
            tel.failures.append(ReadFailure("handle", str(exc), mig.uuid))
            return
        mem = self._call(tel, mig.uuid, "memory", lambda: nvml.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            tel.values[mig.uuid] = {
                F.FB_FREE.name: mem.free // _MIB,
                F.FB_USED.name: mem.used // _MIB,
            }
        if self._processes:
            self._read_processes(tel, mig.uuid, h, utilization=False)

    def _read_processes(self, tel: Telemetry, uuid: str, h: Any, utilization: bool) -> None:
        nvml = self._nvml
        procs = self._call(
            tel, uuid, "processes", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(h)
        )
        if not procs:
            return
        sm: dict[int, float] = {}
        sampled = False  # a process without a sample since the last scrape was idle: 0 %
        if utilization and (uuid, "process_utilization") not in self._unsupported:
            sampled = True
            last = self._last_sample_ts.get(uuid, 0)
            try:
                samples = nvml.nvmlDeviceGetProcessUtilization(h, last)
            except nvml.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code == self._not_supported:
                    self._unsupported.add((uuid, "process_utilization"))
                    sampled = False
                elif code != self._not_found:  # NOT_FOUND: no sample since ``last``
                    tel.failures.append(ReadFailure("process_utilization", str(exc), uuid))
                    sampled = False
                samples = []
            newest: dict[int, int] = {}
            for s in samples:
                if s.timeStamp >= newest.get(s.pid, -1):
                    newest[s.pid] = s.timeStamp
                    sm[s.pid] = float(s.smUtil)
                self._last_sample_ts[uuid] = max(self._last_sample_ts.get(uuid, 0), s.timeStamp)
            # Scrapes faster than NVML's sampling period find no new sample: a process sampled
            # within the last REUSE_SAMPLE_US keeps its last value instead of reading as idle.
            now_us = int(time.time() * 1e6)
            running = {int(p.pid) for p in procs}
            for pid in running:
                key = (uuid, pid)
                if pid in sm:
                    self._last_sm[key] = (sm[pid], newest[pid])
                elif key in self._last_sm and now_us - self._last_sm[key][1] < REUSE_SAMPLE_US:
                    sm[pid] = self._last_sm[key][0]
            for key in [k for k in self._last_sm if k[0] == uuid and k[1] not in running]:
                del self._last_sm[key]
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            tel.processes.append(
                ProcessSample(
                    pid=int(p.pid),
                    device_uuid=uuid,
                    used_memory_bytes=int(used) if used is not None else None,
                    sm_util=sm.get(int(p.pid), 0.0 if sampled else None),
                )
            )

    def _drain_xids(self, machine: Machine) -> None:
        """Record the newest XID per GPU from this source's event set, without blocking."""
        nvml = self._nvml
        uuids = frozenset(g.uuid for g in machine.gpus)
        if self._events is None or uuids != self._events_for:
            self._events_for = uuids
            try:
                self._events = nvml.nvmlEventSetCreate()
                for gpu in machine.gpus:
                    try:
                        nvml.nvmlDeviceRegisterEvents(
                            self._handle(gpu.uuid, None),
                            nvml.nvmlEventTypeXidCriticalError,
                            self._events,
                        )
                    except Exception:
                        continue
            except Exception:
                self._events = None
                return
        for _ in range(64):
            try:
                data = nvml.nvmlEventSetWait_v2(self._events, 0)
            except Exception:
                return
            try:
                uuid = nvml.nvmlDeviceGetUUID(data.device)
                uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            except Exception:
                continue
            self._last_xid[uuid] = int(data.eventData)

    def close(self) -> None:
        nvml = self._nvml
        if self._events is not None:
            with contextlib.suppress(Exception):
                nvml.nvmlEventSetFree(self._events)
            self._events = None
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
