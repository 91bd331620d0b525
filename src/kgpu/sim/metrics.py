"""``kgpu sim --serve-metrics``: the simulated cluster's GPU metrics over HTTP.

Every simulated node with GPUs becomes one exporter target (``Hostname`` = node name) whose
values come from :class:`~kgpu.metrics.simulated.SimulatedTelemetry`, fed at each scrape with
the pods the simulator bound to that node (``node.allocations``), their
``metrics.kgpu.dev/*`` annotations and the load a ``traffic`` step puts on them
(``sim.gpu_loads()``), on the simulator's clock. Attribution is exact: the simulator knows
which container holds which device, so no kubelet or ``/proc`` is involved. Shares of GPUs
published for sharing (DRA consumable capacity) come from the allocated claims in the
simulated API server (``kgpu_dra_share_*``, per claim and pod).

The simulator's own Prometheus (:mod:`kgpu.sim.prometheus`) scrapes each node's exposition
separately (:meth:`SimMetrics.scrape_each`), as a real one scrapes each exporter pod.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from kgpu.dra.allocated_shares import ClaimShare, claim_shares, shared_devices
from kgpu.dra.api import RESOURCE_API
from kgpu.drivers.attribution import build_attribution
from kgpu.hardware.model import Machine
from kgpu.kubelet.podresources import ContainerResources, PodResources
from kgpu.metrics.attribution import Attribution
from kgpu.metrics.collector import Exporter, NodeTarget
from kgpu.metrics.counters import DEFAULT as DEFAULT_COUNTERS
from kgpu.metrics.counters import CounterSet
from kgpu.metrics.server import MetricsServer
from kgpu.metrics.simulated import SimulatedTelemetry, workloads_from_allocations
from kgpu.store import list_read_only

T = TypeVar("T")


def _const(value: T) -> Callable[[], T]:
    return lambda: value


def _nodes(sim: Any) -> Iterable[Any]:
    nodes = sim.nodes
    return list(nodes.values()) if isinstance(nodes, Mapping) else list(nodes)


def _now(sim: Any) -> float:
    now = sim.now
    return float(now() if callable(now) else now)


def live_allocations(
    node: Any, finished: Container[str] | None = None
) -> dict[str, dict[str, list[str]]]:
    """``{"ns/pod": {container: [device ids]}}`` of the pods running on ``node`` (the
    exporter's view of it; the HTML report draws the same).

    Device-plugin devices come from ``node.allocations``, less those of the pods in
    ``finished`` (default: the node's own pod records that have finished); devices a DRA claim
    gave a container come from the ``NVIDIA_VISIBLE_DEVICES`` (GPU/MIG UUIDs) the simulated DRA
    driver set.
    """
    pods = getattr(node, "pods", {}) or {}
    out: dict[str, dict[str, list[str]]] = {}
    for key, containers in (node.allocations or {}).items():
        if finished is not None:
            if key in finished:
                continue
        else:
            record = pods.get(key)
            if record is not None and getattr(record, "finished", False):
                continue
        out[key] = {c: list(ids) for c, ids in containers.items()}
    for key, record in pods.items():
        if getattr(record, "finished", False) or not getattr(record, "admitted", True):
            continue
        for container, env in (getattr(record, "env", {}) or {}).items():
            if container in out.get(key, {}):
                continue
            visible = [
                v.strip()
                for v in str(env.get("NVIDIA_VISIBLE_DEVICES", "")).split(",")
                if v.strip().startswith(("GPU-", "MIG-"))
            ]
            if visible:
                out.setdefault(key, {})[container] = visible
    return out


def share_holders(store: Any) -> dict[str, tuple[ClaimShare, ...]]:
    """GPU UUID -> the claims holding shares of it, from the simulated API server's slices and
    allocated claims (empty when no GPU is published for sharing)."""
    if store is None:
        return {}
    devices = shared_devices(list_read_only(store, RESOURCE_API, "ResourceSlice"))
    if not devices:
        return {}
    out: dict[str, list[ClaimShare]] = {}
    for share in claim_shares(list_read_only(store, RESOURCE_API, "ResourceClaim")):
        device = devices.get(share.key)
        if device is not None and device.uuid:
            out.setdefault(device.uuid, []).append(share)
    return {k: tuple(v) for k, v in out.items()}


def _loads(sim: Any) -> Mapping[str, float]:
    """The steady GPU load per pod that ``traffic`` steps set (none on other simulators)."""
    loads = getattr(sim, "gpu_loads", None)
    return loads() if callable(loads) else {}


class SimMetrics:
    """Exporter targets for every GPU node of a running simulation."""

    def __init__(
        self, sim: Any, hostname_label: str = "Hostname", counters: CounterSet = DEFAULT_COUNTERS
    ) -> None:
        self.sim = sim
        self.hostname_label = hostname_label
        self.counters = counters
        self._sources: dict[str, SimulatedTelemetry] = {}
        self._lock = threading.Lock()
        self.exporter = Exporter(self._targets, hostname_label=hostname_label, counters=counters)
        #: per node: its own exporter (own error counts, as one exporter pod per node has) and
        #: the target it serves, refreshed before each scrape
        self._per_node: dict[str, tuple[Exporter, list[NodeTarget]]] = {}

    def _target(
        self,
        node: Any,
        loads: Mapping[str, float],
        shares: Mapping[str, tuple[ClaimShare, ...]] | None = None,
    ) -> NodeTarget | None:
        view = node.view
        # the MIG layout the node runs (the simulator keeps node.machine equal to it)
        machine: Machine | None = view.machine if view is not None else node.machine
        if machine is None or not machine.gpus:
            return None
        source = self._sources.get(node.name)
        if source is None:
            source = SimulatedTelemetry(clock=lambda: _now(self.sim))
            self._sources[node.name] = source
        source.set_xids(getattr(node, "xids", {}))
        allocations = live_allocations(node)
        pods = getattr(node, "pods", {}) or {}
        objs = {key: getattr(rec, "obj", {}) for key, rec in pods.items()}
        if view is not None:
            source.set_workloads(workloads_from_allocations(view, allocations, objs, loads))
        attribution = _attribution(allocations, view, machine)
        if shares:
            mine = {g.uuid: shares[g.uuid] for g in machine.gpus if g.uuid in shares}
            if mine:
                attribution = replace(attribution, shares=mine)
        return NodeTarget(
            machine=_const(machine),
            source=source,
            attribution=_const(attribution),
            hostname=node.name,
        )

    def _shares(self) -> dict[str, tuple[ClaimShare, ...]]:
        """The GPU shares to serve: read only when the scenario publishes shared GPUs (a
        12,500-node cluster without shares lists no slices per scrape)."""
        scenario = getattr(self.sim, "scenario", None)
        policy = getattr(scenario, "dra_shares", None)
        if policy is not None and not policy.enabled:
            return {}
        return share_holders(getattr(self.sim, "store", None))

    def _targets(self) -> list[NodeTarget]:
        loads = _loads(self.sim)
        shares = self._shares()
        with self._lock:
            targets = [
                _target for n in _nodes(self.sim) if (_target := self._target(n, loads, shares))
            ]
        return targets

    def scrape(self) -> str:
        return self.exporter.scrape()

    def serve_only(self, counters: CounterSet) -> None:
        """Serve these families from the per-node exporters of :meth:`scrape_each` (what a
        dcgm-exporter counters CSV does): a scraper that keeps a few metrics asks for few."""
        with self._lock:
            self.counters = counters
            self._per_node.clear()

    def scrape_each(self) -> list[tuple[Any, str]]:
        """``(node, its exposition)`` for every GPU node: what scraping each node's exporter
        pod would return. Nodes gone since are forgotten."""
        loads = _loads(self.sim)
        shares = self._shares()
        out = []
        with self._lock:
            nodes = _nodes(self.sim)
            names = {n.name for n in nodes}
            for name in [n for n in self._per_node if n not in names]:
                del self._per_node[name]
                self._sources.pop(name, None)
            for node in nodes:
                target = self._target(node, loads, shares)
                if target is None:
                    continue
                entry = self._per_node.get(node.name)
                if entry is None:
                    serves: list[NodeTarget] = []
                    exporter = Exporter(
                        _const(serves), hostname_label=self.hostname_label, counters=self.counters
                    )
                    entry = self._per_node[node.name] = (exporter, serves)
                entry[1][:] = [target]
                out.append((node, entry[0].scrape()))
        return out


def _attribution(
    allocations: Mapping[str, Mapping[str, list[str]]], view: Any, machine: Machine
) -> Attribution:
    pods = []
    for key, containers in allocations.items():
        namespace, _, name = key.partition("/")
        pods.append(
            PodResources(
                namespace,
                name,
                tuple(
                    ContainerResources(container, (("", tuple(ids)),))
                    for container, ids in containers.items()
                ),
            )
        )
    return build_attribution(pods, (), view, machine)


def serve_sim_metrics(
    sim: Any, address: str, hostname_label: str = "Hostname", block: bool = False
) -> MetricsServer:
    """Serve ``/metrics`` for every simulated GPU node on ``address`` (``HOST:PORT``).

    Starts a background server thread and returns it (``.port``, ``.stop()``); with
    ``block=True`` serves in the calling thread until interrupted.
    """
    metrics = SimMetrics(sim, hostname_label=hostname_label)
    server = MetricsServer(address, metrics.scrape)
    if block:
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
        return server
    server.start()
    return server
