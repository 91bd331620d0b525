"""The seed guide's autoscaling story in ``kgpu sim``: KEDA on DCGM metrics scales a GPU
Deployment and a T4 node group of 1..3 follows (acceptance rows 11 and 12).

``examples/autoscaling/t4-keda.yaml`` (kgpu's own manifests) and the same scenario with the
guide's ``scale-gpu.yaml`` and ``scaling-app.yaml`` unchanged must tell the arithmetic the
example's comments give: 2 replicas and 2 nodes under load, whatever the load, and back to 1
and 1 when it stops, at the times the HPA's stabilization window and cluster-autoscaler's
scale-down delay say.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kgpu.promql import parse
from kgpu.sim.plugins import Event
from kgpu.sim.scenario import load_scenario, scenario_from_dict
from kgpu.sim.simulation import Simulation

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "autoscaling" / "t4-keda.yaml"
GPU_QUERY = "sum(DCGM_FI_DEV_GPU_UTIL) / count(DCGM_FI_DEV_GPU_UTIL) / 100"
COPY_QUERY = "sum(DCGM_FI_DEV_MEM_COPY_UTIL) / count(DCGM_FI_DEV_MEM_COPY_UTIL) / 100"


def replicas(sim: Simulation) -> int:
    return int(sim.store.get("apps/v1", "Deployment", "scaling-app", "default")["spec"]["replicas"])


def running_on(sim: Simulation) -> list[str]:
    return sorted(r.node for r in sim.pods.values() if r.phase == "Running")


def first(sim: Simulation, reason: str, message: str = "") -> Event:
    return next(e for e in sim.events if e.reason == reason and message in e.message)


def value(sim: Simulation, query: str) -> float:
    result = sim.prometheus.query(parse(query), query)
    assert isinstance(result, list) and len(result) == 1
    return result[0].value


def tell_the_story(sim: Simulation, hpa: str) -> None:
    """The example's steps one by one, checking what its comments promise."""
    sim.start()
    assert [n.name for n in sim.nodes] == ["t4-0"] and replicas(sim) == 1
    sim.step({"traffic": {"name": "scaling-app", "gpuUtilization": 300}})
    sim.step({"advance": "5m"})
    up = first(sim, "SuccessfulRescale", "New size: 2")
    assert up.object == f"HorizontalPodAutoscaler/default/{hpa}"
    assert up.first_seen == 0 and up.message.startswith(
        "New size: 2; reason: external metric s0-prometheus(&LabelSelector{MatchLabels:"
    )
    scale_up = first(sim, "TriggeredScaleUp")
    assert scale_up.message == "pod triggered scale-up: [{t4 1->2 (max: 3)}]"
    assert scale_up.first_seen == 10
    assert replicas(sim) == 2 and running_on(sim) == ["t4-0", "t4-1"]
    assert value(sim, GPU_QUERY) == 1.0 and value(sim, COPY_QUERY) == 0.5
    # ten times the load: the mean over every GPU cannot pass 1.0, ceil(1.0 / 0.5) = 2
    sim.step({"traffic": {"name": "scaling-app", "gpuUtilization": 3000}})
    sim.step({"advance": "5m"})
    assert replicas(sim) == 2 and [n.name for n in sim.nodes] == ["t4-0", "t4-1"]
    assert not any(e.message.startswith("New size: 3") for e in sim.events)
    # the load stops at t=600: 300 s of stabilization after the last "2" (the 600 s sync)
    sim.step({"traffic": {"name": "scaling-app", "gpuUtilization": 0}})
    sim.step({"advance": "20m"})
    down = first(sim, "SuccessfulRescale", "New size: 1")
    assert down.message == "New size: 1; reason: All metrics below target"
    assert down.first_seen == 915
    removed = first(sim, "ScaleDown", "node removed")
    assert (removed.object, removed.first_seen) == ("Node/t4-1", 1520)  # 920 + 10 min
    assert replicas(sim) == 1 and running_on(sim) == ["t4-0"]
    assert [n.name for n in sim.nodes] == ["t4-0"]
    # t4-1's series went stale with it: the mean is over the one GPU left
    assert value(sim, "count(DCGM_FI_DEV_GPU_UTIL)") == 1
    assert not any(e.type == "Warning" and e.reason != "FailedScheduling" for e in sim.events)


def test_the_example_scales_the_deployment_and_the_group_and_back() -> None:
    sim = Simulation(load_scenario(EXAMPLE), plugins=False)
    tell_the_story(sim, "keda-hpa-scaling-app")
    # the cluster's Prometheus keeps only what the queries read, for as long as they read it
    names = {dict(s.labels)["__name__"] for s in sim.prometheus.history.series()}
    assert names == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "up"}
    assert max(len(s.times) for s in sim.prometheus.history.series()) <= 300 / 15 + 1


def guide_scenario(acceptance: Path) -> dict[str, Any]:
    """The example with the guide's two files, unchanged, in place of kgpu's."""
    samples = acceptance / "vks-samples"
    return {
        "name": "row-12",
        "nodes": [{"name": "t4", "machine": "t4", "autoscale": {"min": 1, "max": 3}}],
        "apply": [str(samples / "scaling-app.yaml"), str(samples / "scale-gpu.yaml")],
    }


def test_row_12_the_guides_files_unchanged_on_an_autoscaled_t4_group(acceptance: Path) -> None:
    sim = Simulation(scenario_from_dict(guide_scenario(acceptance)), plugins=False)
    tell_the_story(sim, "keda-hpa-scaled-object")


def test_row_11_the_guides_queries_on_the_simulated_clusters_metrics(acceptance: Path) -> None:
    """Both KEDA queries of scale-gpu.yaml, evaluated by kgpu's PromQL over what the cluster's
    Prometheus scraped from the simulated exporters (the real-Prometheus side of row 11 is
    tests/metrics/test_prometheus.py)."""
    import yaml

    doc = yaml.safe_load((acceptance / "vks-samples" / "scale-gpu.yaml").read_text())
    queries = [t["metadata"]["query"] for t in doc["spec"]["triggers"]]
    assert queries == [GPU_QUERY, COPY_QUERY]
    scenario = guide_scenario(acceptance)
    scenario["nodes"] = [{"name": "gpu", "machine": "dgx-h100"}]  # 8 GPUs, no autoscaling
    sim = Simulation(scenario_from_dict(scenario), plugins=False)
    sim.start()
    sim.step({"traffic": {"name": "scaling-app", "gpuUtilization": 100}})
    sim.step({"advance": 0})
    # one pod's GPU at 100 % of eight: 100 / 8 / 100; memory copy half that
    assert [value(sim, q) for q in queries] == [0.125, 0.0625]
    sim.step({"advance": "1m"})  # the HPA asks ceil(0.125 / 0.5) = 1: nothing changes
    assert replicas(sim) == 1
    assert [value(sim, q) for q in queries] == [0.125, 0.0625]


def test_before_any_traffic_pods_run_at_the_default_demand_and_no_load_passes_two() -> None:
    sim = Simulation(load_scenario(EXAMPLE), plugins=False)
    sim.start()
    sim.step({"advance": "2m"})  # no traffic step yet: the pod's default demand, 80 %
    assert replicas(sim) == 2  # ceil(0.8 / 0.5)
    sim.step({"traffic": {"name": "scaling-app", "gpuUtilization": 100_000}})
    sim.step({"advance": "10m"})
    assert replicas(sim) == 2 and len(sim.nodes) == 2
