"""The exporter as a part of the node agent (and of ``kgpu metrics``).

:class:`MetricsComponent` wires the shells together: a telemetry source for the agent's
backend (NVML on a real node, :class:`~kgpu.metrics.simulated.SimulatedTelemetry` on a
simulated one), PodResources attribution refreshed in the background from
``<kubelet-root>/pod-resources/kubelet.sock`` and the kubelet's device checkpoint, process
ownership from ``/proc``, and an HTTP server for ``/metrics``. It implements the agent's
``Component`` protocol: ``start()``, ``stop()``, ``on_view(view)``.

On a simulated backend the workloads behind the values come from the same PodResources answer:
every container holding a device runs the default simulated load on it, so a simulated agent
driven by a (fake) kubelet shows load where pods are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from kgpu.dra.allocated_shares import ClaimShare
from kgpu.drivers.attribution import AttributionCache
from kgpu.hardware.backend import Backend
from kgpu.hardware.model import Machine
from kgpu.kubelet.podresources import PodResourcesClient, read_device_checkpoint
from kgpu.metrics.attribution import Attribution, DraKey
from kgpu.metrics.cgroups import ProcCgroups
from kgpu.metrics.collector import Exporter, NodeTarget
from kgpu.metrics.counters import DEFAULT as DEFAULT_COUNTERS
from kgpu.metrics.counters import CounterSet
from kgpu.metrics.server import DEFAULT_ADDRESS, MetricsServer
from kgpu.metrics.simulated import SimulatedTelemetry, Workload
from kgpu.metrics.sources import TelemetrySource
from kgpu.node.model import NodeView

log = logging.getLogger(__name__)


def source_for(backend: Backend, counters: CounterSet = DEFAULT_COUNTERS) -> TelemetrySource:
    """The telemetry the backend offers (:meth:`Backend.telemetry`): NVML read through the
    backend's own NVML library (reading only what ``counters`` selects), or simulated telemetry
    on a clock that starts now (values breathe and energy accumulates in real time). The last
    XID per GPU comes from what the backend offers too: the process's one event reader on a
    real node, the injected XIDs (the agent's ``--fault-dir``) on a simulated one."""
    access = backend.telemetry()
    if access.nvml is not None:
        from kgpu.metrics.nvml_source import NvmlTelemetry

        return NvmlTelemetry(access.nvml, counters=counters, xids=access.xids)
    started = time.monotonic()
    return SimulatedTelemetry(clock=lambda: time.monotonic() - started, xids=access.xids)


def workloads_from_holders(attribution: Attribution, view: NodeView | None) -> list[Workload]:
    """The default simulated load for every container holding a device, with the MPS limits of
    the device's replicas when it is MPS-shared."""
    mps: dict[str, tuple[int, int]] = {}
    if view is not None:
        for res in view.resources:
            for dev in res.devices:
                if dev.mps is not None:
                    mps[dev.backing_uuid] = (
                        dev.mps.active_thread_percentage,
                        dev.mps.pinned_memory_limit_mib,
                    )
    out = []
    for uuid in sorted(attribution.holders):
        limits = mps.get(uuid)
        for ref in attribution.holders[uuid]:
            out.append(
                Workload(
                    pod=ref,
                    device_uuid=uuid,
                    sm_limit_percent=limits[0] if limits else None,
                    memory_limit_mib=limits[1] if limits else None,
                )
            )
    return out


class MetricsComponent:
    """Serves ``/metrics`` for one node.

    ``kubelet_root`` None (or "") turns pod attribution off. ``source`` overrides the telemetry
    source chosen for ``backend``. ``counters`` selects the DCGM fields served (a counters CSV,
    :func:`kgpu.metrics.counters.counters_for`; default: dcgm-exporter's default set).
    """

    def __init__(
        self,
        address: str,
        backend: Backend,
        kubelet_root: Path | str | None,
        node_name: str,
        *,
        hostname_label: str = "Hostname",
        proc_root: Path | str = "/proc",
        refresh_interval_s: float = 10.0,
        source: TelemetrySource | None = None,
        counters: CounterSet = DEFAULT_COUNTERS,
    ) -> None:
        self.address = address or DEFAULT_ADDRESS
        self.backend = backend
        self.node_name = node_name
        self.counters = counters
        self.source = source if source is not None else source_for(backend, counters)
        # The event reader feeding the XIDs served, held while serving (``kgpu metrics`` alone
        # has no health loop to start it; in the agent the health loop shares it).
        self._hub = backend.telemetry().hub if source is None else None
        self._holding = False
        self._view: NodeView | None = None
        self._machine: Machine | None = None
        self._server: MetricsServer | None = None
        self.cache: AttributionCache | None = None
        if kubelet_root:
            root = Path(kubelet_root)
            self._client = PodResourcesClient.for_kubelet_root(root)
            self.cache = AttributionCache(
                self._client.list,
                lambda: read_device_checkpoint(root),
                interval_s=refresh_interval_s,
                on_error=lambda op, reason: self.exporter.errors.add("podresources", op),
            )
        self.exporter = Exporter(
            [
                NodeTarget(
                    machine=self._current_machine,
                    source=self.source,
                    attribution=self._attribution,
                    hostname=node_name,
                    proc=ProcCgroups(proc_root),
                )
            ],
            hostname_label=hostname_label,
            counters=counters,
        )

    # -- what the scrape reads (never blocking on the kubelet) ---------------------------------

    def _current_machine(self) -> Machine:
        if self._view is not None:
            return self._view.machine
        if self._machine is None:
            self._machine = self.backend.snapshot()
            if self.cache is not None:
                self.cache.set_machine(self._machine)
        return self._machine

    def _attribution(self) -> Attribution:
        attribution = self.cache.current() if self.cache is not None else Attribution()
        if isinstance(self.source, SimulatedTelemetry):
            self.source.set_workloads(workloads_from_holders(attribution, self._view))
        return attribution

    # -- Component protocol --------------------------------------------------------------------

    def on_view(self, view: NodeView) -> None:
        """A new node view (config change, MIG change, health change): ids map through it."""
        self._view = view
        if self.cache is not None:
            self.cache.set_view(view)

    def set_dra_devices(self, mapping: dict[DraKey, str]) -> None:
        """Exact DRA (driver, pool, device) -> GPU/MIG UUID names, from the DRA driver."""
        if self.cache is not None:
            self.cache.set_dra_devices(mapping)

    def set_share_source(
        self, fetch: Callable[[], Mapping[str, tuple[ClaimShare, ...]]] | None
    ) -> None:
        """The DRA driver's prepared GPU shares (GPU UUID -> claims), read on each attribution
        refresh: ``kgpu_dra_share_*`` per claim and pod. Without attribution, none."""
        if self.cache is not None:
            self.cache.set_share_source(fetch)

    def start(self) -> None:
        self._current_machine()
        if self._hub is not None and not self._holding:
            self._hub.acquire()
            self._holding = True
        if self.cache is not None:
            self.cache.start()
        try:
            self._server = MetricsServer(self.address, self.scrape)  # binds here
        except OSError as exc:  # say where: the daemon's log line names no address otherwise
            raise OSError(
                exc.errno, f"cannot serve metrics on {self.address}: {exc.strerror}"
            ) from None
        self._server.start()
        log.info("metrics: serving /metrics on %s:%d", self._server.host, self._server.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self.cache is not None:
            self.cache.stop()
            self._client.close()
        if self._hub is not None and self._holding:
            self._hub.release()
            self._holding = False
        self.source.close()

    # -- for tests and the CLI -----------------------------------------------------------------

    def scrape(self) -> str:
        return self.exporter.scrape()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("metrics component is not started")
        return self._server.port
