"""The DCGM-exporter-compatible Prometheus exporter.

Modules: ``collector`` (per-node targets into metric families: :class:`Exporter`),
``exposition`` (the text format), ``fields`` (dcgm-exporter's metric names), ``sources``
(the telemetry protocol), ``nvml_source`` and ``simulated`` (telemetry from NVML or from the
simulator), ``attribution`` and ``cgroups`` (device -> pod), ``server`` (``/metrics`` over
HTTP).
"""

from kgpu.metrics.attribution import Attribution
from kgpu.metrics.collector import Exporter, NodeTarget
from kgpu.metrics.server import MetricsServer, parse_address
from kgpu.metrics.simulated import SimulatedTelemetry
from kgpu.metrics.sources import Telemetry, TelemetrySource

__all__ = [
    "Attribution",
    "Exporter",
    "MetricsServer",
    "NodeTarget",
    "SimulatedTelemetry",
    "Telemetry",
    "TelemetrySource",
    "parse_address",
]
