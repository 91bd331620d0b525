"""KEDA, the HPA controller and cluster-autoscaler in ``kgpu sim``, each on what a user of the
real one would notice: the events, the replicas, the nodes, when they change; how repeated
events are counted; bad scenarios and manifests refused before anything runs."""

from __future__ import annotations

from typing import Any

import pytest

from kgpu.errors import FieldError
from kgpu.sim.plugins import Event
from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.testing.manifests import deployment

GPU = {"nvidia.com/gpu": 1}


def scaled_object(target: str, query: str, threshold: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": target},
        "spec": {
            "scaleTargetRef": {"name": target},
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": "http://prometheus:9090",
                        "query": query,
                        "threshold": threshold,
                    },
                }
            ],
            **spec,
        },
    }


def run(scenario: dict[str, Any]) -> Simulation:
    return Simulation(scenario_from_dict(scenario), plugins=False).run()


def events(sim: Simulation, reason: str) -> list[Event]:
    return [e for e in sim.events if e.reason == reason]


def replicas(sim: Simulation, name: str) -> int:
    return int(sim.store.get("apps/v1", "Deployment", name, "default")["spec"]["replicas"])


# -- cluster-autoscaler -------------------------------------------------------------------------
def test_a_group_at_its_maximum_says_so_once_with_a_count_not_every_scan() -> None:
    sim = run(
        {
            "nodes": [{"name": "t4", "machine": "t4", "autoscale": {"min": 1, "max": 1}}],
            "apply": [deployment("app", 2, GPU)],
            "steps": [{"advance": "1m"}],
        }
    )
    [event] = events(sim, "NotTriggerScaleUp")
    assert event.message == "pod didn't trigger scale-up: 1 max node group size reached"
    # scans at 10 s .. 60 s (at 0 s the pod was too new: cluster-autoscaler waits a loop)
    assert (event.count, event.first_seen, event.last_seen) == (6, 10, 60)
    [shown] = [e for e in sim.report()["events"] if e["reason"] == "NotTriggerScaleUp"]
    assert (shown["count"], shown["firstTimestamp"], shown["lastTimestamp"]) == (
        6,
        "2025-01-01T00:00:10Z",
        "2025-01-01T00:01:00Z",
    )


def test_not_trigger_scale_up_gives_the_schedulers_reasons_on_the_template_node() -> None:
    sim = run(
        {
            "nodes": [{"name": "t4", "machine": "t4", "autoscale": {"min": 0, "max": 3}}],
            "apply": [
                deployment(
                    "a100-only",
                    1,
                    GPU,
                    nodeSelector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
                )
            ],
            "steps": [{"advance": "30s"}],
        }
    )
    assert [n.name for n in sim.nodes] == []  # min 0: the group starts empty
    [event] = events(sim, "NotTriggerScaleUp")
    assert event.message == (
        "pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity/selector"
    )


def test_a_group_scales_from_zero_with_the_labels_and_device_plugin_its_spec_implies() -> None:
    sim = run(
        {
            "nodes": [
                {
                    "name": "t4",
                    "machine": "t4",
                    "autoscale": {"min": 0, "max": 2},
                    "labels": {"pool": "inference"},
                }
            ],
            "clusterAutoscaler": {"provisioning-delay": "90s"},
            "apply": [deployment("app", 2, GPU, nodeSelector={"pool": "inference"})],
            "steps": [{"advance": "2m"}],
        }
    )
    [scaled] = events(sim, "ScaledUpGroup")
    assert scaled.message == "Scale-up: setting group t4 size to 2 instead of 0 (max: 2)"
    assert scaled.first_seen == 10  # the first scan after the pods were 2 s old
    joined = {e.object: e.first_seen for e in events(sim, "NodeReady")}
    assert joined == {"Node/t4-0": 100, "Node/t4-1": 100}  # 90 s of provisioning
    node = sim.node("t4-1")
    assert node.labels["pool"] == "inference"
    assert node.labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert node.allocatable["nvidia.com/gpu"] == 1
    assert sorted(r.node for r in sim.pods.values() if r.phase == "Running") == ["t4-0", "t4-1"]


def test_scale_down_evicts_the_pods_of_an_underused_node_then_deletes_it() -> None:
    sim = run(
        {
            "nodes": [
                {"name": "t4", "machine": "t4", "count": 2, "autoscale": {"min": 1, "max": 2}}
            ],
            "apply": [deployment("cpu-only", 2, {"cpu": "1"})],
        }
    )
    assert sorted(r.node for r in sim.pods.values()) == ["t4-0", "t4-1"]  # spread
    sim.step({"advance": "9m"})
    assert len(sim.nodes) == 2  # unneeded for less than 10 minutes
    sim.step({"advance": "2m"})
    assert [n.name for n in sim.nodes] == ["t4-1"]  # the group's minimum is 1
    assert [(e.object, e.message) for e in events(sim, "ScaleDown")][:1] == [
        ("Node/t4-0", "marked the node as toBeDeleted/unschedulable")
    ]
    evicted = [e for e in events(sim, "ScaleDown") if e.object.startswith("Pod/")]
    assert [e.message for e in evicted] == ["deleting pod for node scale down"]
    assert [(r.phase, r.node) for r in sim.pods.values()] == [("Running", "t4-1")] * 2


@pytest.mark.parametrize(
    ("node", "settings", "path", "words"),
    [
        ({"autoscale": {"min": 2, "max": 1}}, None, "nodes[0].autoscale.max", "at least min"),
        ({"autoscale": {"min": 1, "max": 3}, "count": 5}, None, "nodes[0].count", "between"),
        ({"autoscale": {"min": 1}}, None, "nodes[0].autoscale.max", "non-negative"),
        (
            {"autoscale": {"min": 1, "max": 2, "size": 1}},
            None,
            "nodes[0].autoscale.size",
            "unknown field",
        ),
        ({}, {"scan-interval": "0s"}, "clusterAutoscaler.scan-interval", "longer than 0"),
        ({}, {"scale-down-delay": "10m"}, "clusterAutoscaler.scale-down-delay", "flag names"),
    ],
)
def test_bad_autoscaling_settings_are_refused_at_their_field(
    node: dict[str, Any], settings: dict[str, Any] | None, path: str, words: str
) -> None:
    scenario: dict[str, Any] = {"nodes": [{"name": "t4", "machine": "t4", **node}]}
    if settings is not None:
        scenario["clusterAutoscaler"] = settings
    with pytest.raises(FieldError) as err:
        scenario_from_dict(scenario)
    assert any(p.path == path and words in p.message for p in err.value.problems), [
        str(p) for p in err.value.problems
    ]


# -- KEDA ---------------------------------------------------------------------------------------
def test_keda_activates_from_zero_and_deactivates_after_its_cooldown() -> None:
    """A worker Deployment at 0 replicas, scaled by the GPU load of another workload."""
    sim = Simulation(
        scenario_from_dict(
            {
                "nodes": [{"name": "n", "machine": "dgx-h100"}],
                "apply": [
                    deployment("feeder", 1, GPU),
                    deployment("worker", 0, {"cpu": "1"}),
                    scaled_object(
                        "worker",
                        "sum(DCGM_FI_DEV_GPU_UTIL)",
                        "100",
                        minReplicaCount=0,
                        pollingInterval=10,
                        cooldownPeriod=120,
                    ),
                ],
            }
        ),
        plugins=False,
    )
    sim.start()
    sim.step({"traffic": {"name": "feeder", "gpuUtilization": 0}})
    sim.step({"advance": "1m"})
    assert replicas(sim, "worker") == 0 and not events(sim, "KEDAScaleTargetActivated")
    sim.step({"traffic": {"name": "feeder", "gpuUtilization": 60}})
    sim.step({"advance": "1m"})
    [on] = events(sim, "KEDAScaleTargetActivated")
    assert on.message == (
        "Scaled apps/v1.Deployment default/worker from 0 to 1, triggered by s0-prometheus"
    )
    assert on.first_seen == 80  # the first poll after the first scrape under load (75 s)
    assert replicas(sim, "worker") == 1
    sim.step({"traffic": {"name": "feeder", "gpuUtilization": 0}})
    sim.step({"advance": "5m"})
    [off] = events(sim, "KEDAScaleTargetDeactivated")
    assert off.message == "Deactivated apps/v1.Deployment default/worker from 1 to 0"
    # last active at the 130 s poll (it still read the 120 s scrape); 120 s of cooldown: the
    # first poll after 250 s
    assert off.first_seen == 260
    assert replicas(sim, "worker") == 0
    status = sim.store.get("keda.sh/v1alpha1", "ScaledObject", "worker", "default")["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Active"] == "False"


def test_deleting_a_scaled_object_deletes_its_hpa() -> None:
    sim = run(
        {
            "nodes": [{"name": "n", "machine": "t4"}],
            "apply": [deployment("app", 1, GPU), scaled_object("app", "vector(0)", "1")],
        }
    )
    hpa = sim.store.get("autoscaling/v2", "HorizontalPodAutoscaler", "keda-hpa-app", "default")
    assert hpa["spec"]["metrics"][0]["external"]["target"] == {
        "type": "AverageValue",
        "averageValue": "1",
    }
    sim.step({"delete": {"kind": "ScaledObject", "name": "app", "apiVersion": "keda.sh/v1alpha1"}})
    assert sim.store.list("autoscaling/v2", "HorizontalPodAutoscaler") == []


def test_an_unsupported_query_is_refused_at_load_naming_the_part() -> None:
    with pytest.raises(FieldError) as err:
        scenario_from_dict({"apply": [scaled_object("app", "topk(1, DCGM_FI_DEV_GPU_UTIL)", "1")]})
    [problem] = err.value.problems
    assert problem.path == "apply[0].spec.triggers[0].metadata.query"
    assert '1:1: unsupported by kgpu\'s PromQL evaluator: aggregation "topk"' in problem.message


# -- the HPA controller -------------------------------------------------------------------------
def test_an_hpa_on_cpu_fails_to_get_its_metric_and_keeps_the_replicas() -> None:
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "app"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "app"},
            "minReplicas": 1,
            "maxReplicas": 5,
        },
    }
    sim = run(
        {
            "nodes": [{"name": "n", "machine": "t4"}],
            "apply": [deployment("app", 2, GPU), hpa],
            "steps": [{"advance": "1m"}],
        }
    )
    [failed] = events(sim, "FailedGetResourceMetric")
    assert failed.type == "Warning" and failed.count == 5  # syncs at 0, 15, 30, 45, 60 s
    assert "no metrics returned from resource metrics API" in failed.message
    assert replicas(sim, "app") == 2
    status = sim.store.get("autoscaling/v2", "HorizontalPodAutoscaler", "app", "default")["status"]
    active = {c["type"]: c for c in status["conditions"]}["ScalingActive"]
    assert (active["status"], active["reason"]) == ("False", "FailedGetResourceMetric")


def test_behavior_policies_limit_how_fast_keda_scales_up() -> None:
    """One pod per minute (``advanced.horizontalPodAutoscalerConfig.behavior``) although the
    metric asks for four at once."""
    behavior = {"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}
    sim = run(
        {
            "nodes": [{"name": "n", "machine": "dgx-h100"}],
            "apply": [
                deployment("app", 1, GPU),
                scaled_object(
                    "app",
                    "vector(4)",
                    "1",
                    minReplicaCount=1,
                    maxReplicaCount=8,
                    advanced={"horizontalPodAutoscalerConfig": {"behavior": behavior}},
                ),
            ],
            "steps": [{"advance": "2m"}],
        }
    )
    sizes = [(e.first_seen, e.message.split(";")[0]) for e in events(sim, "SuccessfulRescale")]
    # +1 per 60 s: the change at 0 s leaves the window at 60 s (the window is open there)
    assert sizes == [(0, "New size: 2"), (60, "New size: 3"), (120, "New size: 4")]
    assert replicas(sim, "app") == 4


# -- events -------------------------------------------------------------------------------------
def test_an_event_repeated_is_counted_but_a_different_outcome_in_between_stays() -> None:
    sim = Simulation(scenario_from_dict({"nodes": []}), plugins=False)
    ctx = sim.context
    for t, reason in [(0, "NotReady"), (10, "NotReady"), (20, "Ready"), (30, "NotReady")]:
        ctx.now = t
        ctx.emit("Normal", reason, "ComputeDomain/default/d", f"domain is {reason}")
    ctx.now = 40
    ctx.record(Event("Normal", "NotReady", "ComputeDomain/default/d", "domain is NotReady"))
    assert [(e.reason, e.count, e.first_seen, e.last_seen) for e in sim.events] == [
        ("NotReady", 2, 0, 10),
        ("Ready", 1, 20, 20),
        ("NotReady", 2, 30, 40),
    ]


# -- the cluster's Prometheus -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("query", "names", "keep"),
    [
        # a 10-minute range: 10 min + the 5-minute lookback of samples, one metric
        ("avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL[10m]))", {"DCGM_FI_DEV_GPU_UTIL"}, 900),
        # no metric name in the selector: every family the exporters serve is kept
        ('count({__name__=~"DCGM_FI_DEV_.*_UTIL"})', None, 300),
    ],
)
def test_prometheus_keeps_what_the_queries_read_for_as_long_as_they_read_it(
    query: str, names: set[str] | None, keep: int
) -> None:
    sim = run(
        {
            "nodes": [{"name": "n", "machine": "t4"}],
            "apply": [deployment("app", 1, GPU), scaled_object("app", query, "100")],
            "steps": [{"advance": "1h"}],
        }
    )
    history = sim.prometheus.history
    kept = {dict(s.labels)["__name__"] for s in history.series()}
    if names is None:
        assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"} <= kept
    else:
        assert kept == {*names, "up"}
    assert history.retention_ms == keep * 1000
    assert max(len(s.times) for s in history.series()) == keep // 15 + 1
