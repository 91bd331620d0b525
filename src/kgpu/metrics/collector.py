"""From one scrape's readings to metric families, and the exporter that never fails a scrape.

:func:`collect` is pure: (machine snapshot, telemetry, who owns which device and process,
options) -> series appended to a :class:`FamilySet`. :class:`Exporter` is the thin shell around
it: it reads the sources at scrape time (no background thread rewrites values), resolves process
owners through ``/proc/<pid>/cgroup``, counts every failed read in
``kgpu_exporter_errors_total`` and renders text. Any one failure drops only what it touched.

Series layout, as dcgm-exporter's: labels ``gpu``, ``UUID``, ``pci_bus_id``, ``device``
(``nvidia<gpu>``), ``modelName``, then ``GPU_I_PROFILE``/``GPU_I_ID`` on MIG devices, then
``Hostname`` (or ``hostname``), ``DCGM_FI_DRIVER_VERSION``, and ``container``, ``namespace``,
``pod`` when exactly one container holds the device; ``DCGM_FI_DEV_XID_ERRORS`` ends with
``err_code`` and ``err_msg`` (the XID and its name, :mod:`kgpu.metrics.xid_names`) as
dcgm-exporter's does. MIG series carry the parent GPU's index,
UUID and PCI bus id, as dcgm-exporter's do.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kgpu.dra.allocated_shares import ClaimShare
from kgpu.hardware.model import Gpu, Machine, MigDevice
from kgpu.metrics import fields as F
from kgpu.metrics.attribution import Attribution
from kgpu.metrics.cgroups import ProcCgroups
from kgpu.metrics.counters import DEFAULT as DEFAULT_COUNTERS
from kgpu.metrics.counters import CounterSet
from kgpu.metrics.exposition import Family, escape_label_value, render
from kgpu.metrics.sources import PodRef, ProcessSample, Telemetry, TelemetrySource
from kgpu.metrics.xid_names import xid_name

log = logging.getLogger(__name__)

HOSTNAME_LABELS = ("Hostname", "hostname")


class FamilySet:
    """Families in exposition order; series of several nodes merge under one HELP/TYPE.

    ``counters`` selects the DCGM families (and their TYPE/HELP); which of them a GPU, a
    MIG-enabled GPU and a MIG device report is worked out once here."""

    def __init__(self, counters: CounterSet = DEFAULT_COUNTERS) -> None:
        self.counters = counters
        metrics = counters.metrics
        self.per_gpu = tuple(s for s in metrics if not s.per_mig)  # a MIG-enabled GPU
        self.whole_gpu = tuple(metrics)  # a GPU without MIG is its own (only) device
        self.per_mig = tuple(s for s in metrics if s.per_mig or s.also_mig)
        self.families: dict[str, Family] = {
            spec.name: Family(spec)
            for spec in (
                *metrics,
                F.POD_MEMORY_USED,
                F.POD_SM_UTIL,
                F.SHARE_MEMORY,
                F.SHARE_COMPUTE,
                F.EXPORTER_ERRORS,
            )
        }

    def __getitem__(self, name: str) -> Family:
        return self.families[name]

    def render(self) -> str:
        return render(list(self.families.values()), keep_empty=(F.EXPORTER_ERRORS.name,))


def _pair(name: str, value: str) -> str:
    return f'{name}="{escape_label_value(value)}"'


def _pod_labels(ref: PodRef) -> str:
    return (
        f",{_pair('container', ref.container)},{_pair('namespace', ref.namespace)}"
        f",{_pair('pod', ref.name)}"
    )


def device_labels(
    machine: Machine,
    gpu: Gpu,
    mig: MigDevice | None,
    hostname: str,
    hostname_label: str = "Hostname",
    driver_version: bool = True,
) -> str:
    """The label text every series of one GPU (or MIG device) starts with."""
    parts = [
        _pair("gpu", str(gpu.index)),
        _pair("UUID", gpu.uuid),
        _pair("pci_bus_id", gpu.pci_bus_id),
        _pair("device", f"nvidia{gpu.index}"),
        _pair("modelName", gpu.product_name),
    ]
    if mig is not None:
        parts.append(_pair("GPU_I_PROFILE", mig.profile))
        parts.append(_pair("GPU_I_ID", str(mig.gi_id)))
    if hostname:
        parts.append(_pair(hostname_label, hostname))
    if driver_version:
        parts.append(_pair(F.DRIVER_VERSION_LABEL, machine.driver_version))
    return ",".join(parts)


def collect(
    families: FamilySet,
    machine: Machine,
    telemetry: Telemetry,
    attribution: Attribution,
    owners: Mapping[int, PodRef],
    hostname: str = "",
    hostname_label: str = "Hostname",
) -> None:
    """Append one node's series to ``families`` (pure apart from that)."""
    values = telemetry.values
    per_device: dict[str, dict[PodRef, list[ProcessSample]]] = {}
    for proc in telemetry.processes:
        owner = proc.pod or owners.get(proc.pid)
        if owner is not None:
            per_device.setdefault(proc.device_uuid, {}).setdefault(owner, []).append(proc)
    driver_label = families.counters.driver_version_label
    for gpu in machine.gpus:
        base = device_labels(machine, gpu, None, hostname, hostname_label, driver_label)
        specs = families.per_gpu if gpu.mig_enabled else families.whole_gpu
        _device_series(families, base, gpu.uuid, values, specs, attribution)
        _per_pod(families, base, per_device.get(gpu.uuid))
        _shares(families, base, attribution.shares.get(gpu.uuid, ()))
        for mig in gpu.mig_devices if gpu.mig_enabled else ():
            mig_base = device_labels(machine, gpu, mig, hostname, hostname_label, driver_label)
            _device_series(families, mig_base, mig.uuid, values, families.per_mig, attribution)
            _per_pod(families, mig_base, per_device.get(mig.uuid))


def _device_series(
    families: FamilySet,
    base: str,
    uuid: str,
    values: Mapping[str, Mapping[str, float]],
    specs: Sequence[F.MetricSpec],
    attribution: Attribution,
) -> None:
    """The device's DCGM series, labelled with its one holder when exactly one holds it."""
    device_values = values.get(uuid)
    if not device_values:
        return
    owner = attribution.owner(uuid)
    labels = base + _pod_labels(owner) if owner else base
    for spec in specs:
        value = device_values.get(spec.name)
        if value is not None:
            if spec is F.XID_ERRORS:
                families[spec.name].add(labels + xid_labels(int(value)), value)
            else:
                families[spec.name].add(labels, value)


def xid_labels(xid: int) -> str:
    """The attributes dcgm-exporter adds to every XID series, after the others."""
    return f",{_pair('err_code', str(xid))},{_pair('err_msg', xid_name(xid))}"


def _per_pod(
    families: FamilySet, base: str, by_pod: Mapping[PodRef, list[ProcessSample]] | None
) -> None:
    if not by_pod:
        return
    for ref in sorted(by_pod):
        procs = by_pod[ref]
        labels = base + _pod_labels(ref)
        mems = [p.used_memory_bytes for p in procs if p.used_memory_bytes is not None]
        if mems:
            families[F.POD_MEMORY_USED.name].add(labels, sum(mems))
        sms = [p.sm_util for p in procs if p.sm_util is not None]
        if sms:
            families[F.POD_SM_UTIL.name].add(labels, sum(sms))


def _shares(families: FamilySet, base: str, shares: Sequence[ClaimShare]) -> None:
    """``kgpu_dra_share_*``: per claim holding a share of the GPU, per pod using the claim
    (``pod`` empty while none does), labelled ``namespace``, ``claim``, ``pod``."""
    for share in shares:
        memory, compute = share.memory_bytes, share.compute_shares
        for pod in share.pods or ("",):
            labels = (
                f"{base},{_pair('namespace', share.namespace)},{_pair('claim', share.claim)}"
                f",{_pair('pod', pod)}"
            )
            if memory:
                families[F.SHARE_MEMORY.name].add(labels, memory)
            if compute is not None:
                families[F.SHARE_COMPUTE.name].add(labels, compute)


@dataclass
class NodeTarget:
    """One node an exporter serves: how to get its snapshot, telemetry and attribution."""

    machine: Callable[[], Machine]
    source: TelemetrySource
    attribution: Callable[[], Attribution] = Attribution
    hostname: str = ""
    proc: ProcCgroups | None = None  # None: processes are attributed only by their source


@dataclass
class ErrorCounts:
    """``kgpu_exporter_errors_total`` by (source, field); thread-safe."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, source: str, name: str, n: int = 1) -> None:
        with self.lock:
            self.counts[(source, name)] += n

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self.lock:
            return dict(self.counts)


class Exporter:
    """Renders ``/metrics`` for one or more nodes, reading everything at scrape time."""

    def __init__(
        self,
        targets: Sequence[NodeTarget] | Callable[[], Sequence[NodeTarget]],
        hostname_label: str = "Hostname",
        errors: ErrorCounts | None = None,
        counters: CounterSet = DEFAULT_COUNTERS,
    ) -> None:
        if hostname_label not in HOSTNAME_LABELS:
            raise ValueError(f"hostname label must be one of {', '.join(HOSTNAME_LABELS)}")
        self._targets = targets
        self.counters = counters
        self.hostname_label = hostname_label
        self.errors = errors or ErrorCounts()
        self._scrape_lock = threading.Lock()

    def _target_list(self) -> Sequence[NodeTarget]:
        return self._targets() if callable(self._targets) else self._targets

    def scrape(self) -> str:
        """The exposition text; never raises."""
        with self._scrape_lock:  # sources keep per-scrape state (NVML sample timestamps)
            families = FamilySet(self.counters)
            try:
                targets = list(self._target_list())
            except Exception as exc:
                log.warning("metrics: listing nodes failed: %s", exc)
                self.errors.add("exporter", "targets")
                targets = []
            for target in targets:
                try:
                    self._scrape_target(families, target)
                except Exception as exc:  # keep other nodes' series and the error count
                    log.warning("metrics: scrape of %s failed: %s", target.hostname, exc)
                    self.errors.add("exporter", "collect")
            errors = families[F.EXPORTER_ERRORS.name]
            for (source, name), count in sorted(self.errors.snapshot().items()):
                errors.add(f"{_pair('source', source)},{_pair('field', name)}", count)
            return families.render()

    def _scrape_target(self, families: FamilySet, target: NodeTarget) -> None:
        machine = target.machine()
        try:
            attribution = target.attribution()
        except Exception:
            self.errors.add("exporter", "attribution")
            attribution = Attribution()
        try:
            telemetry = target.source.read(machine)
        except Exception as exc:
            log.warning("metrics: %s telemetry read failed: %s", target.source.name, exc)
            self.errors.add(target.source.name, "read")
            telemetry = Telemetry()
        for failure in telemetry.failures:
            self.errors.add(target.source.name, failure.field)
        owners = self._owners(target, telemetry.processes, attribution)
        collect(
            families,
            machine,
            telemetry,
            attribution,
            owners,
            target.hostname,
            self.hostname_label,
        )

    def _owners(
        self, target: NodeTarget, processes: Iterable[ProcessSample], attribution: Attribution
    ) -> dict[int, PodRef]:
        owners: dict[int, PodRef] = {}
        proc = target.proc
        pids: set[int] = set()
        for sample in processes:
            if sample.pod is not None or proc is None:
                continue
            pids.add(sample.pid)
            try:
                ident = proc.identity(sample.pid)
            except OSError:
                self.errors.add("proc", "cgroup")
                ident = None
            owner = attribution.resolve_process(ident, sample.device_uuid)
            if owner is not None:
                owners[sample.pid] = owner
        if proc is not None:
            proc.retain(pids)
        return owners
