"""The chart's Grafana dashboard (deploy/helm/kgpu/files/dashboard.json) queries kgpu's series.

Every PromQL expression names only metric families kgpu exports (:mod:`kgpu.metrics.fields`)
and label names its series carry, and every expression and template variable returns data from
a real Prometheus (Debian's ``prometheus``, as tests/metrics use) scraping two kgpu expositions:
the built-in quickstart simulation (time-sliced, MPS and MIG GPUs with per-pod series) and
``kgpu metrics --once`` on a simulated p4de.24xlarge (the exporter's own error counter).
Grafana's variables are replaced as Grafana would for "All": ``$Hostname``/``$gpu`` by ``.*``
and ``$__rate_interval`` by ``1m``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_helper import query, running_prometheus, scrape_config
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.metrics import fields
from kgpu.metrics.server import MetricsServer
from kgpu.sim.metrics import SimMetrics
from kgpu.sim.quickstart import quickstart_path
from kgpu.sim.scenario import load_scenario
from kgpu.sim.simulation import run_scenario

from .conftest import CHART

DASHBOARD = CHART / "files" / "dashboard.json"
KGPU_METRICS = {spec.name for spec in vars(fields).values() if isinstance(spec, fields.MetricSpec)}
_PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}


def dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def expressions() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p["targets"]]


def variables() -> list[tuple[str, str]]:
    """Grafana's ``label_values(<series selector>, <label>)`` variables as (selector, label)."""
    out = []
    for v in dashboard()["templating"]["list"]:
        if v["type"] == "query":
            match = re.fullmatch(r"label_values\((.*), *(\w+)\)", v["query"]["query"])
            assert match, v["query"]["query"]
            out.append((match.group(1), match.group(2)))
    return out


def metric_names(expr: str) -> set[str]:
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    return {
        m.group(0)
        for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s)
        if m.group(0) not in _PROMQL_WORDS and not re.match(r"\s*\(", s[m.end() :])
    }


def label_names(expr: str) -> set[str]:
    names = set()
    for body in re.findall(r"\{([^}]*)\}", expr):
        names |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", body))
    for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        names |= {g.strip() for g in group.split(",") if g.strip()}
    return names


def grafana_to_promql(expr: str) -> str:
    return expr.replace("$__rate_interval", "1m").replace("$Hostname", ".*").replace("$gpu", ".*")


@pytest.fixture(scope="module")
def expositions(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    sim = run_scenario(load_scenario(quickstart_path()))
    try:
        simulated = SimMetrics(sim).scrape()
    finally:
        sim.close()
    # a kubelet root without the PodResources socket: the exporter counts the failed read
    no_kubelet = tmp_path_factory.mktemp("kubelet")
    result = CliRunner().invoke(
        app, ["metrics", "--machine", "p4de.24xlarge", "--once", "--kubelet-root", str(no_kubelet)]
    )
    assert result.exit_code == 0, result.output
    assert "kgpu_exporter_errors_total{" in result.stdout
    return [simulated, result.stdout]


def test_dashboard_queries_name_only_kgpus_metrics_and_labels(expositions: list[str]) -> None:
    exported_labels = {
        name for text in expositions for name in re.findall(r'[{,]([A-Za-z_]\w*)="', text)
    } | {"instance", "job"}  # what Prometheus adds to every scraped series
    assert {"Hostname", "gpu", "pod", "namespace", "GPU_I_PROFILE"} <= exported_labels
    queries = expressions() + [selector for selector, _ in variables()]
    assert len(expressions()) >= 15
    assert {label for _, label in variables()} <= exported_labels
    used: set[str] = set()
    for expr in queries:
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= KGPU_METRICS, f"{expr!r}: not exported by kgpu: {names - KGPU_METRICS}"
        assert label_names(expr) <= exported_labels, expr
        used |= names
    legends = {
        label
        for p in dashboard()["panels"]
        for t in p["targets"]
        for label in re.findall(r"\{\{(\w+)\}\}", t["legendFormat"])
    }
    assert legends <= exported_labels
    assert "kgpu_pod_gpu_memory_used_bytes" in used and "DCGM_FI_DEV_GPU_UTIL" in used


def test_the_name_checks_catch_a_foreign_series() -> None:
    assert metric_names('sum by (pod) (rate(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0"}[5m]))') == {
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
    }
    assert label_names('max by (node) (DCGM_FI_DEV_GPU_TEMP{Hostname=~"a"})') == {
        "node",
        "Hostname",
    }


@pytest.fixture
def prometheus(tmp_path: Path, expositions: list[str]) -> Iterator[str]:
    """A Prometheus on loopback scraping each exposition as its own target every second."""
    servers = [MetricsServer("127.0.0.1:0", lambda text=text: text) for text in expositions]
    for server in servers:
        server.start()
    try:
        config = scrape_config([f"127.0.0.1:{s.port}" for s in servers])
        with running_prometheus(tmp_path, config) as url:
            yield url
    finally:
        for server in servers:
            server.stop()


def _wait_nonempty(url: str, promql: str, deadline: float) -> list[dict[str, Any]]:
    while True:
        try:
            result = query(url, promql)
        except urllib.error.HTTPError as exc:  # Prometheus refused the expression
            raise AssertionError(f"{promql}: {exc.read().decode()}") from None
        except OSError:  # not listening yet
            result = []
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.25)


@pytest.mark.slow
def test_every_dashboard_query_returns_data_in_real_prometheus(prometheus: str) -> None:
    deadline = time.monotonic() + 45
    empty = []
    for expr in expressions():
        if not _wait_nonempty(prometheus, grafana_to_promql(expr), deadline):
            empty.append(expr)
    assert not empty, "no data for:\n" + "\n".join(empty)
    for selector, label in variables():
        params = urllib.parse.urlencode({"match[]": grafana_to_promql(selector)})
        with urllib.request.urlopen(f"{prometheus}/api/v1/label/{label}/values?{params}") as r:
            values = json.load(r)["data"]
        assert values, f"template variable label_values({selector}, {label}) has no values"
