"""Acceptance row 11: the KEDA queries of vks-samples/scale-gpu.yaml, evaluated by a real
Prometheus server scraping kgpu's exporter for a simulated dgx-h100 running the Deployment of
vks-samples/scaling-app.yaml; and ``promtool check metrics`` on the exposition.

Prometheus is Debian's ``prometheus`` package (scripts/test.sh installs it as root). Locally a
missing binary skips these tests; under CI=true it fails them.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from kgpu.config.loader import ConfigSet
from kgpu.hardware.profiles import load_machine
from kgpu.metrics.server import MetricsServer
from kgpu.metrics.simulated import DEFAULT_MEM_COPY_PERCENT, DEFAULT_SM_PERCENT
from kgpu.node.view import build_node_view
from kgpu.sim.metrics import SimMetrics, serve_sim_metrics

from .conftest import require_binary

pytestmark = pytest.mark.slow

DCGM_COUNTERS = {
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PlacedDeployment:
    """The scaling-app Deployment placed on a simulated dgx-h100, in the simulator's shape
    (``nodes`` with ``machine``/``view``/``allocations``, ``now``)."""

    def __init__(self, deployment: dict[str, Any]) -> None:
        machine = load_machine("dgx-h100", hostname="gpu-node-0")
        self.view = build_node_view(machine, ConfigSet(), {})
        self.template = deployment["spec"]["template"]
        self.name = deployment["metadata"]["name"]
        self.node = SimpleNamespace(
            name="gpu-node-0", machine=machine, view=self.view, allocations={}, pods={}
        )
        self.nodes = [self.node]
        self.now = 0.0

    def scale(self, replicas: int) -> None:
        free = [d.id for d in self.view.resource("nvidia.com/gpu").devices]
        allocations: dict[str, dict[str, list[str]]] = {}
        for i in range(replicas):
            containers = {}
            for container in self.template["spec"]["containers"]:
                want = int(container["resources"]["limits"].get("nvidia.com/gpu", 0))
                containers[container["name"]] = [free.pop(0) for _ in range(want)]
            allocations[f"default/{self.name}-{i}"] = containers
        self.node.allocations = allocations


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
    binary = require_binary("prometheus")
    exporter_port = free_port()
    web_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: kgpu\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{exporter_port}']\n"
    )
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{web_port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{web_port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"prometheus did not start:\n{(tmp_path / 'prometheus.log').read_text()}"
                )
            time.sleep(0.2)
        yield url, exporter_port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def query(url: str, promql: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(
        f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=5
    ) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


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
    prometheus: tuple[str, int], keda_queries: list[str], deployment: dict[str, Any]
) -> None:
    url, exporter_port = prometheus
    sim = PlacedDeployment(deployment)
    sim.scale(deployment["spec"]["replicas"])
    server = serve_sim_metrics(sim, f"127.0.0.1:{exporter_port}")
    try:
        gpus = len(sim.node.machine.gpus)
        util_query, copy_query = keda_queries
        replicas = deployment["spec"]["replicas"]
        # One busy GPU per replica at the default simulated load, the other GPUs idle.
        wait_for_value(url, util_query, replicas * DEFAULT_SM_PERCENT / gpus / 100)
        wait_for_value(url, copy_query, replicas * DEFAULT_MEM_COPY_PERCENT / gpus / 100)
        # KEDA scales the Deployment to its maxReplicaCount: the queries follow the new load.
        sim.scale(3)
        wait_for_value(url, util_query, 3 * DEFAULT_SM_PERCENT / gpus / 100)
        wait_for_value(url, copy_query, 3 * DEFAULT_MEM_COPY_PERCENT / gpus / 100)
        targets = json.load(urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5))
        (target,) = targets["data"]["activeTargets"]
        assert target["health"] == "up", target
        # The series carry the pod that holds each GPU and the node's name as Hostname.
        pods = query(url, 'DCGM_FI_DEV_GPU_UTIL{pod!=""}')
        assert sorted(r["metric"]["pod"] for r in pods) == [
            "scaling-app-0",
            "scaling-app-1",
            "scaling-app-2",
        ]
        assert {r["metric"]["Hostname"] for r in pods} == {"gpu-node-0"}
        assert {r["metric"]["container"] for r in pods} == {"cuda-sample-vector-add"}
    finally:
        server.stop()


def test_promtool_accepts_the_exposition(deployment: dict[str, Any]) -> None:
    promtool = require_binary("promtool")
    sim = PlacedDeployment(deployment)
    sim.scale(2)
    text = SimMetrics(sim).scrape()
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


def test_metrics_server_answers_http(deployment: dict[str, Any]) -> None:
    sim = PlacedDeployment(deployment)
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
