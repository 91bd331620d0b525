"""Telemetry from real GPUs through NVML (``nvidia-ml-py``), read at scrape time.

Each metric is one NVML call (or one field of a shared call), so a failing call drops only the
series it feeds and is reported as a :class:`~kgpu.metrics.sources.ReadFailure`; the exporter
counts it in ``kgpu_exporter_errors_total`` and serves the rest. "Not supported" is not a
failure: the field does not exist on that device (encoder on a GPU without one, utilisation on a
MIG-enabled GPU) and is not asked again.

Where each field comes from:

* clocks, temperatures, power, energy, PCIe replays, utilisation: one NVML getter each; memory
  temperature is the field value ``NVML_FI_DEV_MEMORY_TEMP`` (HBM GPUs report it);
* framebuffer free/used/reserved: ``nvmlDeviceGetMemoryInfo_v2`` (``used`` without the driver's
  reservation, as DCGM reports it), else the v1 call (no reserved field);
* remapped rows and row-remap failure: ``nvmlDeviceGetRemappedRows`` (Ampere and newer
  datacenter GPUs); vGPU license status: ``nvmlDeviceGetGridLicensableFeatures`` (vGPU guests;
  absent on bare metal, where NVML says licensing is not supported);
* the five profiling fields: NVML's GPU Performance Monitoring (GPM, Hopper and newer), as the
  difference of two samples — the previous scrape's and this one's (the first scrape takes two
  ``GPM_PRIME_S`` apart) — graphics activity, any-tensor activity and DRAM bandwidth
  utilisation (percent, served as DCGM's 0..1 ratios) and PCIe TX/RX (MiB/s, served in bytes/s);
  per MIG device too (``nvmlGpmMigSampleGet``) for the three activities. A GPU for which
  ``nvmlGpmQueryDeviceSupport`` says no has no such series at all (absent, not zero).

Per-process accounting comes from ``nvmlDeviceGetComputeRunningProcesses`` (pid, used memory)
and ``nvmlDeviceGetProcessUtilization`` (per-pid SM samples since the last scrape). The last XID
per GPU is what ``xids`` says: the process's one event reader
(:class:`~kgpu.hardware.events.EventHub`); a scrape never calls ``nvmlEventSetWait``, which on
a real driver queued each scrape behind the health monitor's wait (388-506 ms on an H200).
Fields the counter set does not select are not read. Nothing here writes to a GPU.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kgpu.hardware.backend import BackendError
from kgpu.hardware.model import Gpu, Machine, MigDevice
from kgpu.metrics import fields as F
from kgpu.metrics.counters import DEFAULT as DEFAULT_COUNTERS
from kgpu.metrics.counters import CounterSet
from kgpu.metrics.sources import ProcessSample, ReadFailure, Telemetry

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
_NO_INSTANCE = 0xFFFFFFFF
REUSE_SAMPLE_US = 5_000_000
#: The first GPM reading needs two samples: how far apart the first scrape takes them.
GPM_PRIME_S = 0.1
#: Scrapes closer together than this reuse the last GPM values (NVML needs an interval).
GPM_MIN_INTERVAL_S = 0.05
#: (field, NVML GPM metric id name, scale to DCGM's unit)
_GPM_FIELDS: tuple[tuple[F.MetricSpec, str, float], ...] = (
    (F.GR_ENGINE_ACTIVE, "NVML_GPM_METRIC_GRAPHICS_UTIL", 0.01),
    (F.PIPE_TENSOR_ACTIVE, "NVML_GPM_METRIC_ANY_TENSOR_UTIL", 0.01),
    (F.DRAM_ACTIVE, "NVML_GPM_METRIC_DRAM_BW_UTIL", 0.01),
    (F.PCIE_TX_BYTES, "NVML_GPM_METRIC_PCIE_TX_PER_SEC", float(_MIB)),
    (F.PCIE_RX_BYTES, "NVML_GPM_METRIC_PCIE_RX_PER_SEC", float(_MIB)),
)
_VALUE_FIELDS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


@dataclass
class _GpmState:
    """The last GPM sample of one GPU or MIG device, and the values it gave."""

    sample: Any
    at: float
    values: dict[str, float] = field(default_factory=dict)
    measured: bool = False  # values come from a measured interval (not just the first sample)


class NvmlTelemetry:
    """A :class:`~kgpu.metrics.sources.TelemetrySource` over NVML.

    ``nvml`` is the ``pynvml`` module (a stand-in in tests); it is initialised here and shut
    down by :meth:`close` (NVML counts initialisations, so sharing a process with
    :class:`kgpu.hardware.nvml.NvmlBackend` is fine). ``xids`` gives the newest XID per GPU
    UUID (the backend's event reader); without it no XID is known (0).
    """

    name = "nvml"

    def __init__(
        self,
        nvml: Any = None,
        processes: bool = True,
        counters: CounterSet = DEFAULT_COUNTERS,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        gpm_prime_s: float = GPM_PRIME_S,
        xids: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
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
        self._wanted = counters.names
        self._gpm_fields = [g for g in _GPM_FIELDS if g[0].name in self._wanted]
        self._clock = clock
        self._sleep = sleep
        self._gpm_prime_s = gpm_prime_s
        self._gpm: dict[str, _GpmState] = {}
        self._gpm_support: dict[str, bool] = {}
        self._handles: dict[str, Any] = {}
        self._unsupported: set[tuple[str, str]] = set()
        self._last_sample_ts: dict[str, int] = {}
        self._xids = xids
        self._last_xid: Mapping[str, int] = {}
        self._last_sm: dict[tuple[str, int], tuple[float, int]] = {}
        self._not_supported = getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", 3)
        self._no_function = getattr(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", 13)
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
        if F.XID_ERRORS.name in self._wanted and self._xids is not None:
            self._last_xid = self._xids()
        handles: dict[str, Any] = {}
        for gpu in machine.gpus:
            try:
                handles[gpu.uuid] = self._handle(gpu.uuid, None)
            except Exception as exc:
                tel.failures.append(ReadFailure("handle", str(exc), gpu.uuid))
        if self._gpm_fields:
            self._gpm_prime(tel, machine, handles)
        for gpu in machine.gpus:
            handle = handles.get(gpu.uuid)
            if handle is None:
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

        wanted = self._wanted

        def put(spec: F.MetricSpec, fn: Callable[[], Any]) -> None:
            if spec.name not in wanted:
                return
            value = self._call(tel, uuid, spec.name, fn)
            if value is not None:
                out[spec.name] = value

        def any_of(*specs: F.MetricSpec) -> bool:
            return any(spec.name in wanted for spec in specs)

        put(F.SM_CLOCK, lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
        put(F.MEM_CLOCK, lambda: nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM))
        put(F.MEMORY_TEMP, lambda: self._field_value(h, nvml.NVML_FI_DEV_MEMORY_TEMP))
        put(F.GPU_TEMP, lambda: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))
        put(F.POWER_USAGE, lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
        put(F.TOTAL_ENERGY, lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h))
        put(F.PCIE_REPLAY, lambda: nvml.nvmlDeviceGetPcieReplayCounter(h))
        if not gpu.mig_enabled:
            if any_of(F.GPU_UTIL, F.MEM_COPY_UTIL):
                util = self._call(
                    tel, uuid, "utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(h)
                )
                if util is not None:
                    out[F.GPU_UTIL.name] = util.gpu
                    out[F.MEM_COPY_UTIL.name] = util.memory
            put(F.ENC_UTIL, lambda: nvml.nvmlDeviceGetEncoderUtilization(h)[0])
            put(F.DEC_UTIL, lambda: nvml.nvmlDeviceGetDecoderUtilization(h)[0])
            self._memory(tel, uuid, h, out)
        if F.XID_ERRORS.name in wanted:
            out[F.XID_ERRORS.name] = self._last_xid.get(uuid, 0)
        links = sum(link.links for link in gpu.nvlinks)
        if links:
            put(F.NVLINK_BANDWIDTH_TOTAL, lambda: self._nvlink_total(h, links))
        put(F.VGPU_LICENSE_STATUS, lambda: self._vgpu_license(h))
        if any_of(F.UNCORRECTABLE_REMAPPED_ROWS, F.CORRECTABLE_REMAPPED_ROWS, F.ROW_REMAP_FAILURE):
            rows = self._call(tel, uuid, "remapped_rows", lambda: nvml.nvmlDeviceGetRemappedRows(h))
            if rows is not None:
                corrected, uncorrected, _pending, failed = rows
                out[F.CORRECTABLE_REMAPPED_ROWS.name] = corrected
                out[F.UNCORRECTABLE_REMAPPED_ROWS.name] = uncorrected
                out[F.ROW_REMAP_FAILURE.name] = failed
        if self._gpm_fields:
            out.update(self._gpm_values(tel, uuid, self._gpu_sampler(h), self._gpm_fields))
        return {name: value for name, value in out.items() if name in wanted}

    def _memory(self, tel: Telemetry, uuid: str, h: Any, out: dict[str, float]) -> None:
        """FB free/used/reserved in MiB: the v2 call (used without the reservation), else v1."""
        if not {F.FB_FREE.name, F.FB_USED.name, F.FB_RESERVED.name} & self._wanted:
            return
        nvml = self._nvml
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None and (uuid, "memory_v2") not in self._unsupported:
            try:
                mem = nvml.nvmlDeviceGetMemoryInfo(h, version=version)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) not in (self._not_supported, self._no_function):
                    tel.failures.append(ReadFailure("memory", str(exc), uuid))
                    return
                mem = None
            except TypeError:  # an nvidia-ml-py without the version argument
                mem = None
            if mem is not None:
                out[F.FB_FREE.name] = mem.free // _MIB
                out[F.FB_USED.name] = mem.used // _MIB
                out[F.FB_RESERVED.name] = mem.reserved // _MIB
                return
            self._unsupported.add((uuid, "memory_v2"))
        mem = self._call(tel, uuid, "memory", lambda: nvml.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            out[F.FB_FREE.name] = mem.free // _MIB
            out[F.FB_USED.name] = mem.used // _MIB

    def _field_value(self, h: Any, field_id: int) -> float:
        """One ``nvmlDeviceGetFieldValues`` field; its own return code raised as NVMLError."""
        (fv,) = self._nvml.nvmlDeviceGetFieldValues(h, [field_id])
        if fv.nvmlReturn != 0:
            raise self._nvml.NVMLError(fv.nvmlReturn)
        return float(getattr(fv.value, _VALUE_FIELDS.get(int(fv.valueType), "ullVal")))

    def _vgpu_license(self, h: Any) -> int:
        """1 when the vGPU feature is licensed, 0 when not; "not supported" off vGPU guests."""
        nvml = self._nvml
        features = nvml.nvmlDeviceGetGridLicensableFeatures(h)
        if not features.isGridLicenseSupported:
            raise nvml.NVMLError(self._not_supported)
        vgpu = nvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU
        listed = features.gridLicensableFeatures[: features.licensableFeaturesCount]
        return int(any(f.featureCode == vgpu and f.featureState for f in listed))

    # -- GPM (profiling fields) ----------------------------------------------------------------

    def _gpm_supported(self, uuid: str, h: Any) -> bool:
        known = self._gpm_support.get(uuid)
        if known is None:
            try:
                known = bool(self._nvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice)
            except Exception:  # not supported, or an NVML / nvidia-ml-py without GPM
                known = False
            self._gpm_support[uuid] = known
        return known

    def _gpm_prime(self, tel: Telemetry, machine: Machine, handles: dict[str, Any]) -> None:
        """Take a first sample of every GPM device that has none, then wait once, so the first
        scrape already has an interval to measure."""
        per_mig = any(spec.also_mig for spec, _, _ in self._gpm_fields)
        primed = False
        for gpu in machine.gpus:
            h = handles.get(gpu.uuid)
            if h is None or not self._gpm_supported(gpu.uuid, h):
                continue
            takers: list[tuple[str, Callable[[Any], Any]]] = []
            if gpu.uuid not in self._gpm:
                takers.append((gpu.uuid, self._gpu_sampler(h)))
            for mig in gpu.mig_devices if gpu.mig_enabled and per_mig else ():
                if mig.uuid not in self._gpm:
                    takers.append((mig.uuid, self._mig_sampler(h, mig.gi_id)))
            for uuid, take in takers:
                sample = self._call(tel, uuid, "gpm", partial(self._new_sample, take))
                if sample is not None:
                    self._gpm[uuid] = _GpmState(sample, self._clock())
                    primed = True
        if primed and self._gpm_prime_s > 0:
            self._sleep(self._gpm_prime_s)

    def _gpu_sampler(self, h: Any) -> Callable[[Any], Any]:
        return lambda sample: self._nvml.nvmlGpmSampleGet(h, sample)

    def _mig_sampler(self, h: Any, gi_id: int) -> Callable[[Any], Any]:
        return lambda sample: self._nvml.nvmlGpmMigSampleGet(h, gi_id, sample)

    def _new_sample(self, take: Callable[[Any], Any]) -> Any:
        nvml = self._nvml
        sample = nvml.nvmlGpmSampleAlloc()
        try:
            take(sample)
        except BaseException:
            with contextlib.suppress(Exception):
                nvml.nvmlGpmSampleFree(sample)
            raise
        return sample

    def _gpm_values(
        self,
        tel: Telemetry,
        uuid: str,
        take: Callable[[Any], Any],
        fields: Sequence[tuple[F.MetricSpec, str, float]],
    ) -> dict[str, float]:
        """The GPM fields between this device's last sample and a new one."""
        state = self._gpm.get(uuid)
        if state is None or not fields:
            return {}
        now = self._clock()
        if state.measured and now - state.at < GPM_MIN_INTERVAL_S:
            return state.values
        nvml = self._nvml
        sample = self._call(tel, uuid, "gpm", lambda: self._new_sample(take))
        if sample is None:
            return {}

        def metrics() -> Any:
            get = nvml.c_nvmlGpmMetricsGet_t()
            get.version = nvml.NVML_GPM_METRICS_GET_VERSION
            get.numMetrics = len(fields)
            get.sample1 = state.sample
            get.sample2 = sample
            for i, (_spec, metric, _scale) in enumerate(fields):
                get.metrics[i].metricId = getattr(nvml, metric)
            return nvml.nvmlGpmMetricsGet(get)

        result = self._call(tel, uuid, "gpm", metrics)
        with contextlib.suppress(Exception):
            nvml.nvmlGpmSampleFree(state.sample)
        state.sample, state.at, state.measured = sample, now, True
        state.values = {}
        if result is not None:
            for i, (spec, _metric, scale) in enumerate(fields):
                metric = result.metrics[i]
                if metric.nvmlReturn == 0:
                    state.values[spec.name] = float(metric.value) * scale
        return state.values

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
        try:
            h = self._handle(mig.uuid, mig, parent)
        except Exception as exc:
            tel.failures.append(ReadFailure("handle", str(exc), mig.uuid))
            return
        values: dict[str, float] = {}
        self._memory(tel, mig.uuid, h, values)
        mig_fields = [g for g in self._gpm_fields if g[0].also_mig]
        if mig_fields and self._gpm_support.get(gpu.uuid):
            values.update(
                self._gpm_values(tel, mig.uuid, self._mig_sampler(parent, mig.gi_id), mig_fields)
            )
        if values:
            tel.values[mig.uuid] = {k: v for k, v in values.items() if k in self._wanted}
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

    def close(self) -> None:
        nvml = self._nvml
        for state in self._gpm.values():
            with contextlib.suppress(Exception):
                nvml.nvmlGpmSampleFree(state.sample)
        self._gpm.clear()
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
