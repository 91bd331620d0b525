"""Fixtures for the PromQL tests: one history of samples, and a real Prometheus holding the same.

The history has two parts. kgpu's own exposition: the simulator runs one GPU Deployment (as
vks-samples/scaling-app.yaml does) on a dgx-h100 node and is scraped every 15 s for 20 minutes
while the Deployment goes 1 -> 3 -> 2 -> 1 replicas, so the DCGM series come and go and the energy
counters climb. Synthetic series cover what kgpu's exporter never shows: counter resets, series
that start late or stop early, irregular intervals, NaN and negative values, escaped label values.

Prometheus gets the very same samples through ``promtool tsdb create-blocks-from openmetrics``
(backfill), then answers ``/api/v1/query?time=...`` like any server. Staleness markers cannot be
backfilled, so this history has none (their semantics are unit-tested against Prometheus' rules).
"""

from __future__ import annotations

import json
import math
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_helper import require_binary, running_prometheus

from kgpu.promql import History, parse_exposition

BASE = 1_700_000_000  # a fixed epoch second: every run sees the same data
STEP = 15
STEPS = 81  # 20 minutes
#: When each query is evaluated: mid-history, the last scrape, inside and past the lookback.
EVAL_TIMES = (BASE + 600, BASE + 1200, BASE + 1230, BASE + 1510)


def _kgpu_samples(history: History) -> None:
    from kgpu.sim.metrics import SimMetrics
    from kgpu.sim.scenario import ObjectRef, scenario_from_dict
    from kgpu.sim.simulation import run_scenario

    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "scaling-app", "labels": {"app": "scaling-app"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "scaling-app"}},
            "template": {
                "metadata": {"labels": {"app": "scaling-app"}},
                "spec": {
                    "containers": [
                        {
                            "name": "cuda-sample-vector-add",
                            "image": "cuda-sample:vectoradd",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ]
                },
            },
        },
    }
    sim = run_scenario(
        scenario_from_dict(
            {"name": "promql", "nodes": [{"name": "gpu-node-0", "machine": "dgx-h100"}]}
        )
    )
    try:
        sim.apply(deployment)
        sim.settle()
        metrics = SimMetrics(sim)
        replicas = {20: 3, 50: 2, 70: 1}
        ref = ObjectRef(kind="Deployment", name="scaling-app")
        for i in range(STEPS):
            if i in replicas:
                sim.scale(ref, replicas[i])
                sim.settle()
            sim.now = float(i * STEP)
            for labels, value in parse_exposition(metrics.scrape()):
                labels.update(job="dcgm-exporter", instance="10.0.0.10:9400")
                history.append(labels, BASE + i * STEP, value)
    finally:
        sim.close()


def _synthetic_samples(history: History) -> None:
    def add(labels: dict[str, str], t: float, value: float) -> None:
        history.append(labels, BASE + t, value)

    def requests(instance: str, code: str) -> dict[str, str]:
        return {"__name__": "http_requests_total", "job": "api", "instance": instance, "code": code}

    for i in range(STEPS):
        t = i * STEP
        # a counter that resets at 10 minutes
        add(requests("a:80", "200"), t, 10.0 * i if i < 40 else 3.0 + 7.0 * (i - 40))
        if i >= 30 and i % 2 == 0:  # starts late, scraped every 30 s
            add(requests("b:80", "200"), t + 3, 100.0 + 4.5 * (i - 30))
        if i <= 60:  # stops 5 minutes before the last scrape
            add(requests("a:80", "500"), t, float(i // 3))
        add({"__name__": "queue_depth", "queue": "q1"}, t, 20.0 * math.sin(i / 7) - 3.0)
        add({"__name__": "queue_depth", "queue": "q2"}, t, math.nan if i == 79 else float(i % 11))
        for sensor, room, base in (("s1", "a", 20.0), ("s2", "a", 21.0), ("s3", "b", 19.5)):
            add(
                {"__name__": "temperature_celsius", "sensor": sensor, "room": room},
                t,
                base + (i % 5) * 0.5,
            )
        for node, machine, used, capacity in (("n1", "t4", 2.0, 4.0), ("n2", "a100", 7.0, 8.0)):
            add({"__name__": "node_used", "node": node, "pool": "gpu"}, t, used + (i % 3))
            add({"__name__": "node_capacity", "node": node, "machine": machine}, t, capacity)
        add({"__name__": "dup_a", "x": "1"}, t, float(i))
        add({"__name__": "dup_b", "x": "1"}, t, float(2 * i))
        add({"__name__": "special", "path": '/a b"c\\d\nnext'}, t, 1.0)
    lone = {"__name__": "http_requests_total", "job": "batch", "instance": "c:80", "code": "200"}
    add(lone, 600, 5)  # a single sample: rate() has nothing to say


def build_history() -> History:
    """kgpu's exposition and the synthetic series, as one history."""
    history = History(retention_s=10 * 3600)
    _kgpu_samples(history)
    _synthetic_samples(history)
    return history


def _om_value(value: float | None) -> str:
    assert value is not None, "backfill cannot carry staleness markers"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _om_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def openmetrics(history: History) -> str:
    """The history as an OpenMetrics text for promtool's backfill (families contiguous)."""
    lines = []
    for series in sorted(history.series(), key=lambda s: s.labels):
        labels = dict(series.labels)
        name = labels.pop("__name__")
        body = ",".join(f'{k}="{_om_escape(v)}"' for k, v in sorted(labels.items()))
        prefix = f"{name}{{{body}}}" if body else name
        for t_ms, value in zip(series.times, series.values, strict=True):
            lines.append(f"{prefix} {_om_value(value)} {t_ms / 1000:.3f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


class PrometheusAPI:
    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, promql: str, at: float) -> dict[str, Any]:
        """The API's answer: ``{"status": "success", "data": ...}`` or the error body."""
        params = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query?{params}", timeout=10) as r:
                return dict(json.load(r))
        except urllib.error.HTTPError as exc:
            return dict(json.load(exc))


@contextmanager
def start_prometheus(history: History, work: Path) -> Iterator[PrometheusAPI]:
    """A real Prometheus over a backfilled copy of ``history``, stopped on exit."""
    require_binary("prometheus")  # skip before the backfill when Prometheus is absent
    promtool = require_binary("promtool")
    source = work / "history.om"
    source.write_text(openmetrics(history))
    data = work / "data"
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with running_prometheus(
        work,
        "global:\n  scrape_interval: 1h\n",
        data=data,
        args=["--storage.tsdb.retention.time=100y"],
    ) as url:
        yield PrometheusAPI(url)
