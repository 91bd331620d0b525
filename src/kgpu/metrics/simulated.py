"""Simulated telemetry: GPU values that follow the workloads placed on each GPU.

The simulator (or a test) tells :class:`SimulatedTelemetry` which container holds which device
(:class:`Workload`); every read derives the GPU's values from that load and the simulated clock,
so dashboards and autoscalers can be tried against ``kgpu sim`` and tests can predict every
number:

* each workload demands SM and memory-copy utilisation (percent of one device), framebuffer
  memory, and optionally encoder/decoder utilisation; demands breathe with the clock by
  ``1 + amplitude * sin(2*pi*now/period)`` (exactly the demand at ``now == 0``);
* a load set from outside (``loads`` of :func:`workloads_from_allocations`: the simulator's
  ``traffic`` step, percent of one device per device a pod holds) replaces the pod's demand and
  holds steady (no breathing): its SM share is the load, capped as any demand, and its
  memory-copy utilisation :data:`MEM_COPY_PER_SM` of the SM share it gets (the ratio of the
  default demands: a GPU busy 100 % copies at 50 % however much more is asked);
* an MPS limit is enforced: SM share capped at the active-thread percentage, memory at the
  pinned-memory limit (the only limits real GPUs enforce between sharers);
* sharers of one device (time-slicing, MPS replicas) split it: when demands add up to more than
  100 %, each gets ``demand * 100 / total``; memory that does not fit is scaled down alike;
* device utilisation is the sum of its processes' shares, FB used the sum of their memory;
  SM clock is at boost while the GPU is busy, power moves linearly from idle (10 % of the power
  limit) to 85 % of it with load, temperature from 30 to 70 C, and energy and NVLink traffic are
  integrated over the simulated clock;
* a MIG-enabled GPU reports no GPU/memory-copy/encoder/decoder utilisation (NVML answers "not
  supported" there); its MIG devices report framebuffer use, and its load is the
  compute-slice-weighted load of its MIG devices;
* the driver reserves 0.75 % of a GPU's memory (``FB_RESERVED``; free = total - reserved -
  used), none of a MIG device's;
* HBM GPUs (the MIG-capable ones: A30, A100, H100, H200, GB200) report memory temperature
  (32 to 75 C with load) and remapped rows (none, no failure); GDDR GPUs report neither, as
  their NVML does not;
* GPUs with GPM (compute capability 9.0 and newer) report the profiling fields: graphics
  activity = load, tensor activity = 0.6 x load, DRAM activity = memory-copy utilisation,
  PCIe 5 MB/s idle + 2 GB/s (TX) / 4 GB/s (RX) at full load; MIG devices report their own three
  activities. Older GPUs have no such series, as kgpu's NVML path has none there;
* the vGPU license status is 0 (a simulated machine is bare metal and unlicensed);
* the last XID per GPU is the last one injected (``inject_xid``, or the ``xids`` callable that
  reads a simulated backend's or node's injected XIDs), 0 before any.

Values are a pure function of (workloads, clock readings so far), so tests are deterministic.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgpu.hardware.model import Gpu, Machine
from kgpu.hardware.profiles import product_by_name
from kgpu.metrics import fields as F
from kgpu.metrics.sources import PodRef, ProcessSample, ReadFailure, Telemetry
from kgpu.node.ids import strip_replica
from kgpu.node.model import NodeView

#: Pod annotations that set a simulated workload's demand (values are numbers).
ANNOTATION_PREFIX = "metrics.kgpu.dev/"
SM_ANNOTATION = ANNOTATION_PREFIX + "sm-utilization"
MEM_COPY_ANNOTATION = ANNOTATION_PREFIX + "memory-copy-utilization"
MEMORY_ANNOTATION = ANNOTATION_PREFIX + "memory-mib"
ENC_ANNOTATION = ANNOTATION_PREFIX + "encoder-utilization"
DEC_ANNOTATION = ANNOTATION_PREFIX + "decoder-utilization"

DEFAULT_SM_PERCENT = 80.0
DEFAULT_MEM_COPY_PERCENT = 40.0
DEFAULT_MEMORY_MIB = 2048
#: Memory-copy utilisation per unit of SM load under a set load (40 % / 80 %).
MEM_COPY_PER_SM = DEFAULT_MEM_COPY_PERCENT / DEFAULT_SM_PERCENT

FIRST_PID = 4000

# (idle SM MHz, boost SM MHz, memory MHz) by architecture; values of typical SKUs.
_CLOCKS: dict[str, tuple[int, int, int]] = {
    "turing": (300, 1545, 7000),
    "ampere": (210, 1410, 1593),
    "ada-lovelace": (210, 2520, 10501),
    "hopper": (345, 1980, 2619),
    "blackwell": (345, 1965, 3996),
}
_DEFAULT_CLOCKS = (300, 1500, 5000)
_DEFAULT_POWER_LIMIT_W = 300.0
_NVLINK_KIB_PER_S_PER_LINK = 2_500_000.0  # at full load: 10 % of a 25 GB/s lane
RESERVED_FRACTION = 0.0075
TENSOR_SHARE = 0.6
_PCIE_IDLE_BYTES = 5e6
_PCIE_TX_BYTES = 2e9
_PCIE_RX_BYTES = 4e9


def has_hbm(gpu: Gpu) -> bool:
    """HBM memory: memory temperature and row remapping. Among the simulated products the
    MIG-capable ones are exactly the HBM ones (the product decides, so a snapshot of a GPU with
    MIG turned off still counts)."""
    if gpu.mig_capable:
        return True
    product = product_by_name(gpu.product_name)
    return product is not None and product.mig is not None


def has_gpm(gpu: Gpu) -> bool:
    """NVML GPU Performance Monitoring: Hopper (compute capability 9.0) and newer."""
    return gpu.compute_capability >= (9, 0)


@dataclass(frozen=True)
class Workload:
    """One container's use of one device (a whole GPU or a MIG device).

    ``sm_limit_percent``/``memory_limit_mib`` are the MPS limits of the replica it holds, if any.
    A ``steady`` demand (a load set from outside) does not breathe with the clock.
    """

    pod: PodRef
    device_uuid: str
    sm_percent: float = DEFAULT_SM_PERCENT
    mem_copy_percent: float = DEFAULT_MEM_COPY_PERCENT
    memory_mib: int = DEFAULT_MEMORY_MIB
    enc_percent: float = 0.0
    dec_percent: float = 0.0
    sm_limit_percent: int | None = None
    memory_limit_mib: int | None = None
    steady: bool = False


@dataclass
class _Integrals:
    last_t: float
    last_power_w: float = 0.0
    last_nvlink_rate: float = 0.0
    energy_mj: float = 0.0
    nvlink_kib: float = 0.0


@dataclass
class _DeviceLoad:
    sm: float = 0.0
    mem_copy: float = 0.0
    enc: float = 0.0
    dec: float = 0.0
    memory_mib: int = 0
    processes: list[ProcessSample] = field(default_factory=list)


def _number(annotations: Mapping[str, Any], key: str, default: float) -> float:
    raw = annotations.get(key)
    if raw is None:
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return default
    return value if math.isfinite(value) and value >= 0 else default


def workloads_from_allocations(
    view: NodeView,
    allocations: Mapping[str, Mapping[str, Sequence[str]]],
    pods: Mapping[str, Mapping[str, Any]] | None = None,
    loads: Mapping[str, float] | None = None,
) -> list[Workload]:
    """Workloads from the simulator's allocations ``{"ns/pod": {container: [device ids]}}``.

    Device ids resolve through the node view (replica ids, MIG ids, renamed resources), or are
    GPU/MIG UUIDs themselves (devices a DRA claim gave the container); a pod's
    demands come from its ``metrics.kgpu.dev/*`` annotations (``pods`` maps the same keys to the
    pod objects) or the defaults. A pod in ``loads`` (same keys) instead puts that steady SM
    load (percent of one device) on each device it holds, and :data:`MEM_COPY_PER_SM` of it
    as memory-copy load. Other ids are skipped.
    """
    index = {dev.id: dev for res in view.resources for dev in res.devices}
    known = {gpu.uuid for gpu in view.machine.gpus} | {
        mig.uuid for gpu in view.machine.gpus for mig in gpu.mig_devices
    }
    out: list[Workload] = []
    for key in sorted(allocations):
        namespace, _, name = key.partition("/")
        pod_obj = (pods or {}).get(key) or {}
        annotations = (pod_obj.get("metadata") or {}).get("annotations") or {}
        load = (loads or {}).get(key)
        sm = _number(annotations, SM_ANNOTATION, DEFAULT_SM_PERCENT) if load is None else load
        copy = (
            _number(annotations, MEM_COPY_ANNOTATION, DEFAULT_MEM_COPY_PERCENT)
            if load is None
            else load * MEM_COPY_PER_SM
        )
        for container in sorted(allocations[key]):
            for device_id in allocations[key][container]:
                dev = index.get(device_id)
                uuid = dev.backing_uuid if dev is not None else strip_replica(device_id)
                if dev is None and uuid not in known:
                    continue
                out.append(
                    Workload(
                        pod=PodRef(namespace, name, container),
                        device_uuid=uuid,
                        sm_percent=sm,
                        mem_copy_percent=copy,
                        memory_mib=int(_number(annotations, MEMORY_ANNOTATION, DEFAULT_MEMORY_MIB)),
                        enc_percent=_number(annotations, ENC_ANNOTATION, 0.0),
                        dec_percent=_number(annotations, DEC_ANNOTATION, 0.0),
                        sm_limit_percent=(
                            dev.mps.active_thread_percentage if dev and dev.mps else None
                        ),
                        memory_limit_mib=(
                            dev.mps.pinned_memory_limit_mib if dev and dev.mps else None
                        ),
                        steady=load is not None,
                    )
                )
    return out


def _split(demands: list[float], cap: float = 100.0) -> list[float]:
    total = sum(demands)
    if total <= cap or total <= 0:
        return demands
    return [d * cap / total for d in demands]


class SimulatedTelemetry:
    """A :class:`~kgpu.metrics.sources.TelemetrySource` for simulated machines.

    ``fail`` injects read failures: ``{(device uuid or "*", metric name)}``; such a field is
    dropped and reported as a failure, as a failing NVML call would be.
    """

    name = "simulated"

    def __init__(
        self,
        clock: Callable[[], float] = lambda: 0.0,
        workloads: Iterable[Workload] = (),
        amplitude: float = 0.1,
        period_s: float = 300.0,
        xids: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self._clock = clock
        self._xids = xids
        self._amplitude = amplitude
        self._period = period_s
        self._lock = threading.Lock()
        self._workloads: tuple[Workload, ...] = tuple(workloads)
        self._integrals: dict[str, _Integrals] = {}
        self._xid: dict[str, int] = {}
        self.fail: set[tuple[str, str]] = set()

    def set_workloads(self, workloads: Iterable[Workload]) -> None:
        with self._lock:
            self._workloads = tuple(workloads)

    def workloads(self) -> tuple[Workload, ...]:
        return self._workloads

    def inject_xid(self, gpu_uuid: str, xid: int) -> None:
        """Record ``xid`` as the GPU's last XID error (DCGM_FI_DEV_XID_ERRORS)."""
        with self._lock:
            self._xid[gpu_uuid] = xid

    def set_xids(self, xids: Mapping[str, int]) -> None:
        """Take the last XID per GPU UUID from whoever injects them (the simulator's node)."""
        with self._lock:
            self._xid.update(xids)

    def close(self) -> None:
        pass

    def _factor(self, now: float) -> float:
        if not self._amplitude or not self._period:
            return 1.0
        return 1.0 + self._amplitude * math.sin(2.0 * math.pi * now / self._period)

    def _loads(self, now: float, memory_of: Mapping[str, int]) -> dict[str, _DeviceLoad]:
        factor = self._factor(now)
        by_device: dict[str, list[Workload]] = {}
        for w in self._workloads:
            by_device.setdefault(w.device_uuid, []).append(w)
        loads: dict[str, _DeviceLoad] = {}
        pid = FIRST_PID
        for uuid in sorted(by_device):
            group = by_device[uuid]
            scale = [1.0 if w.steady else factor for w in group]
            sm_demand = [
                min(w.sm_percent * f, float(w.sm_limit_percent))
                if w.sm_limit_percent is not None
                else w.sm_percent * f
                for w, f in zip(group, scale, strict=True)
            ]
            sm = _split([min(d, 100.0) for d in sm_demand])
            # a steady load copies memory in proportion to the work its GPU really does
            copy = _split(
                [
                    min(share * w.mem_copy_percent / w.sm_percent, 100.0)
                    if w.steady and w.sm_percent > 0
                    else min(w.mem_copy_percent * f, 100.0)
                    for w, f, share in zip(group, scale, sm, strict=True)
                ]
            )
            mem_demand = [
                min(w.memory_mib, w.memory_limit_mib)
                if w.memory_limit_mib is not None
                else w.memory_mib
                for w in group
            ]
            capacity = memory_of.get(uuid, sum(mem_demand))
            total_mem = sum(mem_demand)
            if total_mem > capacity > 0:
                mem = [d * capacity // total_mem for d in mem_demand]
            else:
                mem = mem_demand
            load = _DeviceLoad(
                sm=sum(sm),
                mem_copy=sum(copy),
                enc=min(100.0, sum(w.enc_percent for w in group)),
                dec=min(100.0, sum(w.dec_percent for w in group)),
                memory_mib=sum(mem),
            )
            for w, share, mib in zip(group, sm, mem, strict=True):
                load.processes.append(
                    ProcessSample(
                        pid=pid,
                        device_uuid=uuid,
                        used_memory_bytes=mib * 1024 * 1024,
                        sm_util=round(share, 6),
                        pod=w.pod,
                    )
                )
                pid += 1
            loads[uuid] = load
        return loads

    def read(self, machine: Machine) -> Telemetry:
        with self._lock:
            now = float(self._clock())
            memory_of: dict[str, int] = {}
            for gpu in machine.gpus:
                memory_of[gpu.uuid] = gpu.memory_mib
                for mig in gpu.mig_devices:
                    memory_of[mig.uuid] = mig.memory_mib
            loads = self._loads(now, memory_of)
            if self._xids is not None:
                self._xid.update(self._xids())
            tel = Telemetry()
            for gpu in machine.gpus:
                self._read_gpu(gpu, now, loads, tel)
                for load in (loads.get(gpu.uuid), *(loads.get(m.uuid) for m in gpu.mig_devices)):
                    if load is not None:
                        tel.processes.extend(load.processes)
            self._apply_failures(tel)
            return tel

    def _read_gpu(
        self, gpu: Gpu, now: float, loads: Mapping[str, _DeviceLoad], tel: Telemetry
    ) -> None:
        values: dict[str, float] = {}
        if gpu.mig_enabled and gpu.mig_devices:
            slices = sum(m.compute_slices for m in gpu.mig_devices) or 1
            busy = sum(
                (loads[m.uuid].sm if m.uuid in loads else 0.0) * m.compute_slices
                for m in gpu.mig_devices
            )
            level = min(1.0, busy / 100.0 / max(slices, 7))
            copy = 0.0
            for mig in gpu.mig_devices:
                mig_load = loads.get(mig.uuid) or _DeviceLoad()
                used = mig_load.memory_mib
                copy += mig_load.mem_copy * mig.compute_slices / max(slices, 7)
                mig_values: dict[str, float] = {
                    F.FB_USED.name: used,
                    F.FB_FREE.name: max(mig.memory_mib - used, 0),
                    F.FB_RESERVED.name: 0,
                }
                if has_gpm(gpu):
                    mig_values.update(_activity(min(1.0, mig_load.sm / 100.0), mig_load.mem_copy))
                tel.values[mig.uuid] = mig_values
        else:
            load = loads.get(gpu.uuid) or _DeviceLoad()
            level = min(1.0, load.sm / 100.0)
            copy = load.mem_copy
            reserved = round(gpu.memory_mib * RESERVED_FRACTION)
            values[F.GPU_UTIL.name] = round(load.sm)
            values[F.MEM_COPY_UTIL.name] = round(load.mem_copy)
            values[F.ENC_UTIL.name] = round(load.enc)
            values[F.DEC_UTIL.name] = round(load.dec)
            values[F.FB_USED.name] = load.memory_mib
            values[F.FB_RESERVED.name] = reserved
            values[F.FB_FREE.name] = max(gpu.memory_mib - reserved - load.memory_mib, 0)
        idle_clock, boost_clock, mem_clock = _CLOCKS.get(gpu.architecture, _DEFAULT_CLOCKS)
        limit = gpu.power_limit_w or _DEFAULT_POWER_LIMIT_W
        idle_w = 0.1 * limit
        power = round(idle_w + (0.85 * limit - idle_w) * level, 3)
        links = sum(link.links for link in gpu.nvlinks)
        nvlink_rate = links * _NVLINK_KIB_PER_S_PER_LINK * level
        acc = self._integrals.get(gpu.uuid)
        if acc is None:
            acc = self._integrals[gpu.uuid] = _Integrals(last_t=now)
        if now > acc.last_t:
            acc.energy_mj += acc.last_power_w * (now - acc.last_t) * 1000.0
            acc.nvlink_kib += acc.last_nvlink_rate * (now - acc.last_t)
            acc.last_t = now
        acc.last_power_w = power
        acc.last_nvlink_rate = nvlink_rate
        values[F.SM_CLOCK.name] = boost_clock if level > 0 else idle_clock
        values[F.MEM_CLOCK.name] = mem_clock
        values[F.GPU_TEMP.name] = round(30 + 40 * level)
        values[F.POWER_USAGE.name] = power
        values[F.TOTAL_ENERGY.name] = int(acc.energy_mj)
        values[F.PCIE_REPLAY.name] = 0
        values[F.XID_ERRORS.name] = self._xid.get(gpu.uuid, 0)
        if links:
            values[F.NVLINK_BANDWIDTH_TOTAL.name] = int(acc.nvlink_kib)
        values[F.VGPU_LICENSE_STATUS.name] = 0
        if has_hbm(gpu):
            values[F.MEMORY_TEMP.name] = round(32 + 43 * level)
            values[F.CORRECTABLE_REMAPPED_ROWS.name] = 0
            values[F.UNCORRECTABLE_REMAPPED_ROWS.name] = 0
            values[F.ROW_REMAP_FAILURE.name] = 0
        if has_gpm(gpu):
            values.update(_activity(level, copy))
            values[F.PCIE_TX_BYTES.name] = _PCIE_IDLE_BYTES + _PCIE_TX_BYTES * level
            values[F.PCIE_RX_BYTES.name] = _PCIE_IDLE_BYTES + _PCIE_RX_BYTES * level
        tel.values[gpu.uuid] = values

    def _apply_failures(self, tel: Telemetry) -> None:
        if not self.fail:
            return
        for uuid, values in tel.values.items():
            for name in list(values):
                if (uuid, name) in self.fail or ("*", name) in self.fail:
                    del values[name]
                    tel.failures.append(ReadFailure(name, "injected", uuid))


def _activity(level: float, mem_copy_percent: float) -> dict[str, float]:
    """The three GPM activity ratios of a device busy ``level`` (0..1)."""
    return {
        F.GR_ENGINE_ACTIVE.name: round(level, 6),
        F.PIPE_TENSOR_ACTIVE.name: round(TENSOR_SHARE * level, 6),
        F.DRAM_ACTIVE.name: round(min(mem_copy_percent, 100.0) / 100.0, 6),
    }
