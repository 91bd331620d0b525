"""Where GPU telemetry comes from: the :class:`TelemetrySource` protocol and its sample types.

A source reads, at scrape time, the values of :data:`kgpu.metrics.fields.DCGM_METRICS` for
every GPU and MIG device of a machine snapshot, plus the per-process accounting NVML keeps
(running compute processes, process utilisation samples). Two implementations exist:
:class:`kgpu.metrics.nvml_source.NvmlTelemetry` (real GPUs) and
:class:`kgpu.metrics.simulated.SimulatedTelemetry` (values derived from the workloads the
simulator placed). The collector cannot tell them apart.

A field a device cannot give is simply absent from its mapping; a field whose read *failed* is
absent too and is listed in :attr:`Telemetry.failures`, so the exporter drops only that series
and counts the failure in ``kgpu_exporter_errors_total``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from kgpu.hardware.model import Machine


@dataclass(frozen=True, order=True)
class PodRef:
    """One container of one pod, as the kubelet names it."""

    namespace: str
    name: str
    container: str


@dataclass(frozen=True)
class ProcessSample:
    """One process using a GPU (or MIG device) as NVML accounts for it.

    ``device_uuid`` is the GPU or MIG device the process runs on. ``used_memory_bytes`` is
    NVML's ``usedGpuMemory`` (None where NVML cannot report it); ``sm_util`` is the process'
    SM utilisation in % from its latest utilisation sample (None where there is none).
    ``pod`` is set only by sources that already know the owner (the simulator); real sources
    leave it None and the exporter resolves the pid through ``/proc/<pid>/cgroup``.
    """

    pid: int
    device_uuid: str
    used_memory_bytes: int | None = None
    sm_util: float | None = None
    pod: PodRef | None = None


@dataclass(frozen=True)
class ReadFailure:
    """One failed read: the metric (or operation) it was for and why."""

    field: str
    reason: str
    device_uuid: str = ""


@dataclass
class Telemetry:
    """One scrape's worth of readings.

    ``values`` maps a GPU or MIG device UUID to {metric name: value}.
    """

    values: dict[str, dict[str, float]] = field(default_factory=dict)
    processes: list[ProcessSample] = field(default_factory=list)
    failures: list[ReadFailure] = field(default_factory=list)


class TelemetrySource(Protocol):
    """Reads telemetry for the devices of a machine snapshot, now."""

    name: str  # "nvml" | "simulated": the ``source`` label of kgpu_exporter_errors_total

    def read(self, machine: Machine) -> Telemetry:
        """Never raises for a single failing field; may raise if the whole source is gone."""
        ...

    def close(self) -> None: ...
