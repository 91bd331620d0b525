"""The simulated cluster's Prometheus: every GPU node's exporter scraped on the clock, kept as
history for the PromQL queries KEDA runs.

What a real Prometheus with dcgm-exporter's (or kgpu's) ServiceMonitor does: every scrape
interval (15 s) each node's exporter pod is scraped (its exposition, from
:class:`~kgpu.sim.metrics.SimMetrics`, the same text ``--serve-metrics`` serves), each sample
labelled ``job`` and ``instance`` (``<node IP>:9400``) and ``up`` recorded; a series an
exporter stops exposing, and every series of a node that left, gets a staleness marker
(:class:`kgpu.promql.History`). Queries are evaluated by :mod:`kgpu.promql` at the current
instant.

Memory is bounded by what the queries can read: only the metric names they select are kept
(every name when one selects by labels alone) and samples older than their longest range plus
offset and the 5-minute lookback are dropped. Scraping starts once a query is known — the
queries of every ScaledObject in the scenario's manifests are known from the start, so their
history begins at 0 — and costs nothing when no query exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from kgpu.metrics.counters import DEFAULT as DEFAULT_COUNTERS
from kgpu.promql import (
    LOOKBACK_MS,
    MAX_RANGE_MS,
    Expr,
    History,
    Value,
    evaluate,
    max_range_ms,
    metric_names,
)
from kgpu.promql.history import parse_exposition
from kgpu.sim.context import SimContext
from kgpu.sim.loops import SCRAPE
from kgpu.sim.metrics import SimMetrics
from kgpu.sim.state import SimNode
from kgpu.sim.traffic import gpu_loads

#: Prometheus' scrape interval (kube-prometheus-stack's ServiceMonitor default is 30 s; the
#: GPU Operator's dcgm-exporter ServiceMonitor asks 15 s).
SCRAPE_INTERVAL = 15.0
JOB = "kgpu-metrics"
PORT = 9400


class _Cluster:
    """What :class:`SimMetrics` reads of the cluster: its nodes, clock and GPU load."""

    def __init__(self, ctx: SimContext) -> None:
        self._ctx = ctx

    @property
    def nodes(self) -> list[SimNode]:
        return self._ctx.nodes

    @property
    def now(self) -> float:
        return self._ctx.now

    def gpu_loads(self) -> dict[str, float]:
        return gpu_loads(self._ctx)


class SimPrometheus:
    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        self.history = History(retention_s=LOOKBACK_MS / 1000)
        #: metric names the queries read; None: every name (a selector without one)
        self.names: set[str] | None = set()
        self.metrics = SimMetrics(_Cluster(ctx))
        self._scraping = False
        self._targets: dict[str, dict[str, str]] = {}  # node -> its target labels

    def watch(self, exprs: Iterable[Expr]) -> None:
        """Keep what these queries read from now on (and start scraping)."""
        before = None if self.names is None else set(self.names)
        for expr in exprs:
            names = metric_names(expr)
            if not names:
                self.names = None
            elif self.names is not None:
                self.names |= names
            # KEDA refused longer ranges (MAX_RANGE_MS); the cap keeps memory bounded whatever
            keep = (min(max_range_ms(expr), MAX_RANGE_MS) + LOOKBACK_MS) / 1000
            self.history.retention_ms = max(self.history.retention_ms, round(keep * 1000))
            if not self._scraping:
                self._scraping = True
                self.ctx.loops.at(self.ctx.now, SCRAPE, self.scrape)
        if self.names != before:
            # the exporters serve only the DCGM families the queries read (all: every one)
            wanted = self.names
            self.metrics.serve_only(
                DEFAULT_COUNTERS
                if wanted is None
                else replace(
                    DEFAULT_COUNTERS,
                    metrics=tuple(m for m in DEFAULT_COUNTERS.metrics if m.name in wanted),
                )
            )

    def scrape(self, now: float) -> bool:
        """One scrape of every node's exporter; never changes the cluster."""
        names = self.names
        seen: set[str] = set()
        for node, text in self.metrics.scrape_each():
            target = self._targets.get(node.name)
            if target is None:
                target = {"job": JOB, "instance": f"{node.ip}:{PORT}"}
                self._targets[node.name] = target
            seen.add(node.name)
            self.history.scrape(now, parse_exposition(text, names), target)
        for gone in [n for n in self._targets if n not in seen]:
            self.history.scrape(now, [], self._targets.pop(gone), up=False)  # all stale
        self.history.trim(now)
        self.ctx.loops.at(now + SCRAPE_INTERVAL, SCRAPE, self.scrape)
        return False

    def query(self, expr: Expr, text: str = "") -> Value:
        """The query's value now (:class:`~kgpu.promql.PromQLError` on a run-time error)."""
        return evaluate(expr, self.history, self.ctx.now, text)


__all__ = ["JOB", "SCRAPE_INTERVAL", "SimPrometheus"]
