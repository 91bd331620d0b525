"""Acceptance row 11: the KEDA queries of vks-samples/scale-gpu.yaml, evaluated by a real
Prometheus server scraping ``serve_sim_metrics`` while the simulator runs the Deployment of
vks-samples/scaling-app.yaml on a dgx-h100 node; and ``promtool check metrics`` on the
exposition.

Prometheus is Debian's ``prometheus`` package (scripts/test.sh installs it as root). Locally a
missing binary skips these tests; under CI=true it fails them.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_helper import free_port, query, require_binary, running_prometheus, scrape_config

from kgpu.metrics.server import MetricsServer
from kgpu.metrics.simulated import DEFAULT_MEM_COPY_PERCENT, DEFAULT_SM_PERCENT
from kgpu.sim.metrics import SimMetrics, serve_sim_metrics
from kgpu.sim.scenario import ObjectRef, scenario_from_dict
from kgpu.sim.simulation import Simulation, run_scenario

pytestmark = pytest.mark.slow

DCGM_COUNTERS = {
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
}


def simulate(acceptance: Path) -> Simulation:
    """The simulator running scaling-app.yaml (unchanged) on one simulated dgx-h100 node."""
    scenario = scenario_from_dict(
        {
            "name": "row-11",
            "nodes": [{"name": "gpu-node-0", "machine": "dgx-h100"}],
            "apply": ["scaling-app.yaml"],
        },
        base=acceptance / "vks-samples",
    )
    return run_scenario(scenario)


def scale(sim: Simulation, replicas: int) -> None:
    """What KEDA does to the Deployment: set its replicas, and let the cluster settle."""
    sim.scale(ObjectRef(kind="Deployment", name="scaling-app"), replicas)
    sim.settle()


@pytest.fixture
def keda_queries(acceptance: Path) -> list[str]:
    doc = yaml.safe_load((acceptance / "vks-samples" / "scale-gpu.yaml").read_text())
    queries = [t["metadata"]["query"] for t in doc["spec"]["triggers"]]
    assert len(queries) == 2
    return queries


@pytest.fixture
def deployment(acceptance: Path) -> dict[str, Any]:
    return yaml.safe_load((acceptance / "vks-samples" / "scaling-app.yaml").read_text())


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A Prometheus on loopback scraping 127.0.0.1:<exporter port> every second."""
    exporter_port = free_port()
    config = scrape_config([f"127.0.0.1:{exporter_port}"])
    with running_prometheus(tmp_path, config) as url:
        yield url, exporter_port


def wait_for_value(url: str, promql: str, expected: float, timeout_s: float = 30) -> float:
    deadline = time.monotonic() + timeout_s
    last: float | None = None
    while time.monotonic() < deadline:
        result = query(url, promql)
        if result:
            last = float(result[0]["value"][1])
            if last == pytest.approx(expected):
                return last
        time.sleep(0.25)
    raise AssertionError(f"{promql} = {last}, expected {expected}")


def test_keda_queries_in_real_prometheus(
    prometheus: tuple[str, int],
    keda_queries: list[str],
    deployment: dict[str, Any],
    acceptance: Path,
) -> None:
    url, exporter_port = prometheus
    sim = simulate(acceptance)
    (node,) = sim.nodes
    assert node.machine is not None
    gpus = len(node.machine.gpus)
    replicas = deployment["spec"]["replicas"]
    assert sum(len(c) for c in node.allocations.values()) == replicas
    server = serve_sim_metrics(sim, f"127.0.0.1:{exporter_port}")
    try:
        util_query, copy_query = keda_queries
        # One busy GPU per replica at the default simulated load, the other GPUs idle.
        wait_for_value(url, util_query, replicas * DEFAULT_SM_PERCENT / gpus / 100)
        wait_for_value(url, copy_query, replicas * DEFAULT_MEM_COPY_PERCENT / gpus / 100)
        # KEDA scales the Deployment to its maxReplicaCount: the queries follow the new load.
        scale(sim, 3)
        wait_for_value(url, util_query, 3 * DEFAULT_SM_PERCENT / gpus / 100)
        wait_for_value(url, copy_query, 3 * DEFAULT_MEM_COPY_PERCENT / gpus / 100)
        targets = json.load(urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5))
        (target,) = targets["data"]["activeTargets"]
        assert target["health"] == "up", target
        # The series carry the pod that holds each GPU and the node's name as Hostname.
        held = query(url, 'DCGM_FI_DEV_GPU_UTIL{pod!=""}')
        pods = sorted(key.split("/", 1)[1] for key in node.allocations)
        assert sorted(r["metric"]["pod"] for r in held) == pods
        assert len(pods) == 3 and all(p.startswith("scaling-app-") for p in pods)
        assert {r["metric"]["Hostname"] for r in held} == {"gpu-node-0"}
        assert {r["metric"]["container"] for r in held} == {"cuda-sample-vector-add"}
    finally:
        server.stop()
        sim.close()


def test_promtool_accepts_the_exposition(acceptance: Path) -> None:
    promtool = require_binary("promtool")
    sim = simulate(acceptance)
    scale(sim, 2)
    text = SimMetrics(sim).scrape()
    sim.close()
    assert "kgpu_pod_gpu_memory_used_bytes" in text
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    # Exit 1 is a parse error; 3 is lint advice. The only advice allowed is what dcgm-exporter's
    # own names draw (counters without _total, camelCase label names): they are the contract.
    assert done.returncode in (0, 3), done.stdout + done.stderr
    for line in (done.stdout + done.stderr).splitlines():
        if not line.strip():
            continue
        name, _, problem = line.partition(" ")
        if 'should have "_total" suffix' in problem or "should not include type" in problem:
            assert name in DCGM_COUNTERS, line
        else:
            assert "label names should be written in 'snake_case'" in problem, line


def test_metrics_server_answers_http(acceptance: Path) -> None:
    sim = simulate(acceptance)
    server = MetricsServer("127.0.0.1:0", SimMetrics(sim).scrape)
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert b"DCGM_FI_DEV_GPU_UTIL{" in r.read()
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/nope", timeout=5)
    finally:
        server.stop()
