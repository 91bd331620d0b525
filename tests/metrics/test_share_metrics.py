"""Per-claim series of a shared GPU (issue 27): ``kgpu_dra_share_memory_limit_bytes`` and
``kgpu_dra_share_compute_percent``, labelled with the GPU, namespace, claim and pod, in the
simulator's exporters and in the agent's (from the claims its DRA driver prepared)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from kgpu.agent.components import load_metrics
from kgpu.dra.allocated_shares import ClaimShare
from kgpu.dra.shares import MEMORY as MEMORY_MODE
from kgpu.dra.shares import SharePolicy
from kgpu.drivers.attribution import AttributionCache
from kgpu.drivers.dra import DraComponent
from kgpu.drivers.metrics import MetricsComponent
from kgpu.hardware.model import Machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet.checkpoint import ClaimRecord, ClaimState
from kgpu.sim.metrics import SimMetrics
from kgpu.sim.scenario import load_scenario
from kgpu.sim.simulation import Simulation
from kgpu.store import MemoryStore

from .conftest import series

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "sharing" / "memory-shares-h100.yaml"
MEMORY = "kgpu_dra_share_memory_limit_bytes"
COMPUTE = "kgpu_dra_share_compute_percent"
GIB = 2**30


def test_simulated_shared_gpu_has_one_series_per_claim() -> None:
    sim = Simulation(load_scenario(EXAMPLE)).run()
    try:
        metrics = SimMetrics(sim)
        text = metrics.scrape()
        ((_, each),) = metrics.scrape_each()
    finally:
        sim.close()
    memory = sorted(series(text, MEMORY), key=lambda s: s[1])
    assert [v for _, v in memory] == [20 * GIB, 40 * GIB]
    labels = memory[0][0]
    assert labels["gpu"] == "0" and labels["UUID"].startswith("GPU-")
    assert labels["Hostname"] == "h100-node" and labels["namespace"] == "default"
    assert labels["pod"].startswith("chat-20g-") and labels["claim"].startswith(labels["pod"])
    assert [v for _, v in series(text, COMPUTE)] == [0, 0]  # no compute share asked
    # the GPU's own series stay unattributed: two pods hold it
    ((util, _),) = series(text, "DCGM_FI_DEV_GPU_UTIL")
    assert "pod" not in util
    assert len(series(each, MEMORY)) == 2  # what the simulator's Prometheus scrapes


def test_no_share_series_without_shares() -> None:
    sim = Simulation(load_scenario(REPO / "examples" / "mps-job.yaml")).run()
    try:
        text = SimMetrics(sim).scrape()
    finally:
        sim.close()
    assert MEMORY not in text and COMPUTE not in text


def _share(pods: tuple[str, ...] = ("infer-0",), compute: str = "30") -> ClaimShare:
    return ClaimShare(
        driver="gpu.nvidia.com",
        pool="node-a",
        device="gpu-2",
        namespace="ml",
        claim="infer-gpu",
        share_id="3f1c",
        consumed={"memory": "20Gi", "computeShares": compute},
        pods=pods,
    )


def test_cache_reads_shares_on_refresh_and_keeps_the_last_on_error() -> None:
    errors: list[str] = []
    answers: list[Any] = [{"GPU-x": (_share(),)}, RuntimeError("store down")]

    def fetch() -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    cache = AttributionCache(lambda: [], on_error=lambda op, reason: errors.append(op))
    cache.set_share_source(fetch)
    assert cache.current().shares == {"GPU-x": (_share(),)}
    assert cache.refresh()
    assert cache.current().shares == {"GPU-x": (_share(),)} and errors == ["dra-shares"]


def _component(h100: Machine, store: MemoryStore, claim: dict[str, Any]) -> DraComponent:
    dra = DraComponent(
        Path("/nonexistent"), Path("/nonexistent"), "node-a", SimulatedBackend(h100), store
    )
    record = ClaimRecord(
        str(claim["metadata"]["uid"]),
        "ml",
        "infer-gpu",
        ClaimState.PREPARE_COMPLETED,
        handler_state={
            "devices": {"gpu-2": {"uuid": h100.gpus[2].uuid, "parentUUID": h100.gpus[2].uuid}}
        },
    )
    dra.gpu = SimpleNamespace(shares=SharePolicy(MEMORY_MODE))  # type: ignore[assignment]
    dra.plugins["gpu.nvidia.com"] = SimpleNamespace(prepared=lambda: {record.uid: record})  # type: ignore[assignment]
    return dra


def _claim(uid: str = "u-1") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "infer-gpu", "namespace": "ml", "uid": uid},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.nvidia.com",
                            "pool": "node-a",
                            "device": "gpu-2",
                            "shareID": "3f1c",
                            "consumedCapacity": {"memory": "20Gi", "computeShares": "30"},
                        }
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "infer-0", "uid": "p-1"}],
        },
    }


def test_agent_exporter_serves_the_shares_its_dra_driver_prepared(
    tmp_path: Path, h100: Machine
) -> None:
    store = MemoryStore()
    claim = store.create(_claim())
    dra = _component(h100, store, claim)
    shares = dra.prepared_shares()
    assert shares == {h100.gpus[2].uuid: (_share(),)}
    exporter = load_metrics("127.0.0.1:0", SimulatedBackend(h100), tmp_path, "node-a")
    assert isinstance(exporter, MetricsComponent)
    exporter.set_share_source(dra.prepared_shares)
    text = exporter.scrape()
    ((labels, memory),) = series(text, MEMORY)
    assert memory == 20 * GIB
    assert (labels["UUID"], labels["namespace"], labels["claim"], labels["pod"]) == (
        h100.gpus[2].uuid,
        "ml",
        "infer-gpu",
        "infer-0",
    )
    assert [v for _, v in series(text, COMPUTE, claim="infer-gpu")] == [30]


def test_a_claim_recreated_under_the_same_name_is_not_the_prepared_one(h100: Machine) -> None:
    store = MemoryStore()
    store.create(_claim(uid="u-2"))
    dra = _component(h100, store, _claim(uid="u-1"))
    assert dra.prepared_shares() == {}


def test_without_shared_gpus_the_driver_reads_no_claims(h100: Machine) -> None:
    store = MemoryStore()
    claim = store.create(_claim())
    dra = _component(h100, store, claim)
    dra.gpu = SimpleNamespace(shares=SharePolicy())  # type: ignore[assignment]
    assert dra.prepared_shares() == {}
