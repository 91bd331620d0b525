"""The ``traffic`` step: a workload's GPU load, spread over its Running pods' devices, as the
simulated DCGM exporter reports it (what ``kgpu sim --serve-metrics`` serves and what the
cluster's Prometheus scrapes)."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kgpu.errors import FieldError
from kgpu.promql import parse_exposition
from kgpu.sim.metrics import SimMetrics, serve_sim_metrics
from kgpu.sim.scenario import ObjectRef, scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.testing.manifests import deployment

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


GPU = {"nvidia.com/gpu": 1}


def metric(sim: Simulation, name: str) -> dict[str, float]:
    """``{gpu index or pod name: value}`` of one series family, as the exporter serves it."""
    out = {}
    for labels, value in parse_exposition(SimMetrics(sim).scrape()):
        if labels["__name__"] == name:
            out[labels.get("pod") if name.startswith("kgpu_pod") else labels["gpu"]] = value
    return out


def test_load_spreads_over_the_running_pods_and_follows_them_as_they_scale() -> None:
    sim = Simulation(
        scenario_from_dict(
            {"nodes": [{"name": "n", "machine": "dgx-h100"}], "apply": [deployment("web", 3, GPU)]}
        ),
        plugins=False,
    ).run()
    idle_power = metric(sim, "DCGM_FI_DEV_POWER_USAGE")["0"]
    sim.step({"traffic": {"name": "web", "gpuUtilization": 300}})
    util = metric(sim, "DCGM_FI_DEV_GPU_UTIL")
    assert sorted(util.values()) == [0] * 5 + [100] * 3  # three GPUs busy, five idle
    assert sorted(metric(sim, "DCGM_FI_DEV_MEM_COPY_UTIL").values()) == [0] * 5 + [50] * 3
    assert list(metric(sim, "kgpu_pod_gpu_sm_utilization").values()) == [100.0] * 3
    busy = [g for g, v in util.items() if v == 100]
    assert all(metric(sim, "DCGM_FI_DEV_POWER_USAGE")[g] > idle_power for g in busy)
    # the load follows the pods: six of them share the same 300 %
    sim.scale(ObjectRef("Deployment", "web"), 6)
    sim.settle()
    assert sorted(metric(sim, "DCGM_FI_DEV_GPU_UTIL").values()) == [0] * 2 + [50] * 6
    # and it stops: no load is 0 %, not the default demand of a pod without traffic
    sim.step({"traffic": {"kind": "Deployment", "name": "web", "gpuUtilization": 0}})
    assert set(metric(sim, "DCGM_FI_DEV_GPU_UTIL").values()) == {0}


def test_a_time_sliced_gpu_sums_its_pods_shares_capped_at_100() -> None:
    sim = Simulation(
        scenario_from_dict(
            {
                "nodes": [
                    {
                        "name": "n",
                        "machine": "rtx-2080ti",
                        "labels": {"nvidia.com/device-plugin.config": "rtx-2080ti"},
                    }
                ],
                "configs": [str(EXAMPLES / "quickstart" / "multiple-gpu-sharing.yaml")],
                "apply": [deployment("shared", 4, GPU), deployment("other", 0, GPU)],
            }
        ),
        plugins=False,
    ).run()
    assert [r.phase for r in sim.pods.values()] == ["Running"] * 4  # 4 slices of one GPU
    sim.step({"traffic": {"name": "shared", "gpuUtilization": 40}})
    assert metric(sim, "DCGM_FI_DEV_GPU_UTIL") == {"0": 40}
    assert set(metric(sim, "kgpu_pod_gpu_sm_utilization").values()) == {10.0}
    sim.step({"traffic": {"name": "shared", "gpuUtilization": 400}})
    assert metric(sim, "DCGM_FI_DEV_GPU_UTIL") == {"0": 100}  # four shares of 100, capped
    assert set(metric(sim, "kgpu_pod_gpu_sm_utilization").values()) == {25.0}


def test_pods_without_traffic_keep_their_default_demand_and_serve_metrics_shows_the_load() -> None:
    sim = Simulation(
        scenario_from_dict(
            {
                "nodes": [{"name": "n", "machine": "dgx-h100"}],
                "apply": [deployment("steady", 1, GPU), deployment("loaded", 1, GPU)],
                "steps": [{"traffic": {"name": "loaded", "gpuUtilization": 30}}],
            }
        ),
        plugins=False,
    ).run()
    per_pod = {
        pod.split("-")[0]: value
        for pod, value in metric(sim, "kgpu_pod_gpu_sm_utilization").items()
    }
    assert per_pod == {"steady": 80.0, "loaded": 30.0}  # 80: kgpu's default demand
    server = serve_sim_metrics(sim, "127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        server.stop()
    values = sorted(
        v for labels, v in parse_exposition(text) if labels["__name__"] == "DCGM_FI_DEV_GPU_UTIL"
    )
    assert values[-2:] == [30, 80]


@pytest.mark.parametrize(
    ("value", "path", "words"),
    [
        ({"name": "web", "gpuUtilization": -5}, "steps[0].traffic.gpuUtilization", "percent"),
        ({"name": "web"}, "steps[0].traffic.gpuUtilization", "300: three GPUs busy"),
        (
            {"kind": "Service", "name": "web", "gpuUtilization": 5},
            "steps[0].traffic.kind",
            "Deployment",
        ),
        ({"name": "web", "gpuUtilisation": 5}, "steps[0].traffic.gpuUtilisation", "unknown field"),
        ({"gpuUtilization": 5}, "steps[0].traffic.name", "Required"),
    ],
)
def test_bad_traffic_steps_name_the_field(value: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(FieldError) as err:
        scenario_from_dict({"nodes": [], "steps": [{"traffic": value}]})
    assert any(p.path == path and words in p.message for p in err.value.problems), [
        str(p) for p in err.value.problems
    ]
