"""KEDA's ScaledObject: the guide's file, validation, query answers and the activation loop.

``data/keda_prometheus.yaml`` ports kedacore/keda's prometheus scaler tables. The executor's own
tests (scale_scaledobjects_test.go) drive gomock clients; their cases (activate from 0, stay
above min, deactivate after the cooldown, idle replicas) are written out below instead.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.autoscaling.hpa import HPAState, Reading, Target, reconcile
from kgpu.autoscaling.keda import (
    KedaState,
    TriggerValue,
    hpa_object,
    hpa_spec,
    parse_scaled_object,
    poll,
    threshold_milli,
    trigger_value,
)
from kgpu.autoscaling.replicas import PodState
from kgpu.errors import FieldError
from kgpu.promql import History, Sample, Scalar, query

GUIDE_QUERY = "sum(DCGM_FI_DEV_GPU_UTIL) / count(DCGM_FI_DEV_GPU_UTIL) / 100"
DATA = yaml.safe_load((Path(__file__).parent / "data" / "keda_prometheus.yaml").read_text())


def scaled_object(**spec: Any) -> dict[str, Any]:
    trigger = {
        "type": "prometheus",
        "metadata": {
            "serverAddress": "http://prometheus:9090",
            "query": "avg(DCGM_FI_DEV_GPU_UTIL) / 100",
            "threshold": "0.5",
        },
    }
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "so", "namespace": "ml"},
        "spec": {"scaleTargetRef": {"name": "app"}, "triggers": [trigger], **spec},
    }


def test_the_guides_scaled_object(acceptance: Path) -> None:
    doc = yaml.safe_load((acceptance / "vks-samples" / "scale-gpu.yaml").read_text())
    so = parse_scaled_object(doc)
    assert (so.target_kind, so.target_name, so.target_api_version) == (
        "Deployment",
        "scaling-app",
        "apps/v1",
    )
    assert (so.min_replica_count, so.max_replica_count) == (1, 3)
    assert (so.polling_interval, so.cooldown_period) == (30, 300)
    assert [t.metric_name for t in so.triggers] == ["s0-prometheus", "s1-prometheus"]
    assert {t.metric_type for t in so.triggers} == {"AverageValue"}
    hpa = hpa_object(so)
    assert hpa["metadata"]["name"] == "keda-hpa-scaled-object"
    assert hpa["spec"]["minReplicas"] == 1 and hpa["spec"]["maxReplicas"] == 3
    assert hpa["spec"]["metrics"][0] == {
        "type": "External",
        "external": {
            "metric": {
                "name": "s0-prometheus",
                "selector": {"matchLabels": {"scaledobject.keda.sh/name": "scaled-object"}},
            },
            "target": {"type": "AverageValue", "averageValue": "500m"},
        },
    }
    assert "behavior" not in hpa["spec"]  # the controller's older rules apply
    parsed = hpa_spec(so)
    assert parsed.min_replicas == 1 and parsed.behavior is None


def test_defaults_and_behavior_pass_through() -> None:
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 60}}
    so = parse_scaled_object(
        scaled_object(
            advanced={"horizontalPodAutoscalerConfig": {"behavior": behavior, "name": "x"}}
        )
    )
    assert (so.min_replica_count, so.max_replica_count, so.hpa_min_replicas) == (0, 100, 1)
    hpa = hpa_object(so)
    assert hpa["metadata"]["name"] == "x" and hpa["spec"]["behavior"] == behavior
    spec = hpa_spec(so)
    assert spec.behavior is not None and spec.behavior.scale_down.stabilization_window_seconds == 60


@pytest.mark.parametrize(
    ("spec", "path", "message"),
    [
        (
            {"minReplicaCount": 5, "maxReplicaCount": 2},
            "spec",
            "minReplicaCount must be less than or equal to maxReplicaCount",
        ),
        ({"pollingInterval": 0}, "spec.pollingInterval", "should be greater than or equal to 1"),
        ({"cooldownPeriod": "5m"}, "spec.cooldownPeriod", "must be of type integer"),
        (
            {"idleReplicaCount": 1, "minReplicaCount": 1},
            "spec.idleReplicaCount",
            "IdleReplicaCount=1 must be less than MinReplicaCount=1",
        ),
        ({"triggers": []}, "spec.triggers", "no triggers defined in the ScaledObject/ScaledJob"),
        ({"scaleTargetRef": {}}, "spec.scaleTargetRef.name", "Required value"),
        (
            {
                "triggers": [
                    {
                        "type": "prometheus",
                        "metricType": "Utilization",
                        "metadata": {"serverAddress": "s", "query": "up", "threshold": "1"},
                    }
                ]
            },
            "spec.triggers[0].metricType",
            "'Utilization' metric type is unsupported for external metrics",
        ),
        (
            {
                "triggers": [
                    {
                        "type": "prometheus",
                        "metadata": {"serverAddress": "s", "query": "up", "threshold": 1},
                    }
                ]
            },
            "spec.triggers[0].metadata.threshold",
            "must be of type string",
        ),
        (
            {
                "triggers": [
                    {
                        "type": "prometheus",
                        "metadata": {"serverAddress": "s", "query": "sum(up", "threshold": "1"},
                    }
                ]
            },
            "spec.triggers[0].metadata.query",
            '1:7: unexpected end of input in aggregation, expected "," or ")"',
        ),
        (
            {
                "triggers": [
                    {
                        "type": "prometheus",
                        "metadata": {
                            "serverAddress": "s",
                            "query": "topk(1, up)",
                            "threshold": "1",
                        },
                    }
                ]
            },
            "spec.triggers[0].metadata.query",
            'unsupported by kgpu\'s PromQL evaluator: aggregation "topk"',
        ),
        (
            {
                "triggers": [
                    {
                        "type": "prometheus",
                        "name": "a",
                        "metadata": {"serverAddress": "s", "query": "up", "threshold": "1"},
                    }
                ]
                * 2
            },
            "spec.triggers[1].name",
            "triggerName 'a' is defined multiple times",
        ),
    ],
)
def test_scaled_object_validation(spec: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(FieldError) as caught:
        parse_scaled_object(scaled_object(**spec))
    problems = {p.path: p.message for p in caught.value.problems}
    assert path in problems, problems
    assert message in problems[path]


def test_long_names_and_other_triggers() -> None:
    obj = scaled_object()
    obj["metadata"]["name"] = "x" * 60
    with pytest.raises(FieldError, match="HPA name 'keda-hpa-x"):
        parse_scaled_object(obj)
    obj = scaled_object(
        triggers=[{"type": "kafka", "metadata": {"topic": "t"}}],
        fallback={"failureThreshold": 3, "replicas": 2},
    )
    so = parse_scaled_object(obj)
    assert so.triggers == () and len(so.not_simulated) == 2
    assert "trigger type 'kafka' is not simulated" in so.not_simulated[0]


@pytest.mark.parametrize(
    "case", DATA["metadata"], ids=[str(i) for i in range(len(DATA["metadata"]))]
)
def test_prometheus_metadata(case: dict[str, Any]) -> None:
    obj = scaled_object(triggers=[{"type": "prometheus", "metadata": case["metadata"]}])
    if case["error"]:
        with pytest.raises(FieldError):
            parse_scaled_object(obj)
    else:
        (trigger,) = parse_scaled_object(obj).triggers
        assert trigger.query == "up" and trigger.threshold == 100


@pytest.mark.parametrize(
    "case", DATA["query_results"], ids=[c["name"] for c in DATA["query_results"]]
)
def test_query_results(case: dict[str, Any]) -> None:
    obj = scaled_object()
    obj["spec"]["triggers"][0]["metadata"]["ignoreNullValues"] = str(
        case["ignore_null_values"]
    ).lower()
    (trigger,) = parse_scaled_object(obj).triggers
    result = [Sample((("i", str(i)),), float(v)) for i, v in enumerate(case["result"])]
    got = trigger_value(trigger, result)
    if case.get("error"):
        assert got.error and not got.active
    else:
        assert not got.error and got.value_milli == case["value"] * 1000


def test_query_answers_as_the_hpa_and_the_scale_loop_see_them() -> None:
    obj = scaled_object()
    obj["spec"]["triggers"][0]["metadata"]["activationThreshold"] = "0.2"
    (trigger,) = parse_scaled_object(obj).triggers
    assert trigger_value(trigger, [Sample((), 0.7512)]) == TriggerValue(
        "s0-prometheus", 751, True, raw=0.7512
    )
    assert trigger_value(trigger, [Sample((), 0.2)]).active is False  # not above the threshold
    assert trigger_value(trigger, [Sample((), -3.0)]).value_milli == 0
    assert "instant vectors" in trigger_value(trigger, Scalar(1.0)).error
    assert (
        "returned multiple elements"
        in trigger_value(trigger, [Sample((), 1), Sample((("a", "b"),), 2)]).error
    )
    assert trigger_value(trigger, None, error="connection refused").error == "connection refused"
    assert [threshold_milli(v) for v in (0.5, 0.0005, 0.0004, 1e6, math.nan, -1)] == [
        500,
        1,
        0,
        10**9,
        0,
        0,
    ]


def test_activation_cooldown_and_events() -> None:
    so = parse_scaled_object(scaled_object(cooldownPeriod=60))  # min 0: KEDA scales 0 <-> 1
    on = [TriggerValue("s0-prometheus", 800, True)]
    off = [TriggerValue("s0-prometheus", 0, False)]
    d = poll(so, KedaState(), 0, on, now=30)
    assert d.replicas == 1
    assert [(e.reason, e.message) for e in d.events] == [
        ("ScaledObjectReady", "ScaledObject is ready for scaling"),
        (
            "KEDAScaleTargetActivated",
            "Scaled apps/v1.Deployment ml/app from 0 to 1, triggered by s0-prometheus",
        ),
    ]
    assert d.events[1].object == "ScaledObject/ml/so"
    d = poll(so, d.state, 3, on, now=60)  # the HPA has it from here: KEDA only notes the time
    assert d.replicas is None and d.state.last_active_time == 60 and not d.events
    for t in (90, 120):  # inactive, still cooling down (60 + 60 is not before 120)
        d = poll(so, d.state, 3, off, now=t)
        assert d.replicas is None
        assert {c[0]: c[2] for c in d.state.conditions}["Active"] == "ScalerCooldown"
    d = poll(so, d.state, 3, off, now=150)
    assert d.replicas == 0
    assert d.events[0].message == "Deactivated apps/v1.Deployment ml/app from 3 to 0"
    assert d.status["lastActiveTime"] == 60 and d.status["hpaName"] == "keda-hpa-so"


def test_minimums_and_idle_replicas() -> None:
    so = parse_scaled_object(scaled_object(minReplicaCount=2))
    off = [TriggerValue("s0-prometheus", 0, False)]
    assert poll(so, KedaState(), 1, off, now=0).replicas == 2  # below min: raised, no event
    assert poll(so, KedaState(), 2, off, now=999).replicas is None  # min > 0: never to zero
    assert poll(so, KedaState(), 0, [TriggerValue("s0-prometheus", 1, True)], now=0).replicas == 2
    idle = parse_scaled_object(scaled_object(minReplicaCount=2, idleReplicaCount=0))
    d = poll(idle, KedaState(), 2, off, now=10)  # never active: the initial cooldown (0) applies
    assert d.replicas == 0
    d = poll(idle, d.state, 0, [TriggerValue("s0-prometheus", 1, True)], now=20)
    assert d.replicas == 2
    failing = [TriggerValue("s0-prometheus", error="boom")]
    d = poll(so, KedaState(), 3, failing, now=0)
    assert d.replicas is None
    assert {c[0]: c[2] for c in d.state.conditions}["Ready"] == "TriggerError"


def test_the_guides_arithmetic_end_to_end() -> None:
    """Row 12's numbers without a simulator: one T4 per node, the guide's two queries, KEDA's
    AverageValue target 0.5 and the HPA's rules. Average utilisation over all GPUs is at most
    1.0, so the HPA asks for at most ceil(1.0 / 0.5) = 2 replicas: the node group grows to 2 of
    its 3 nodes, not to its maximum."""
    so = parse_scaled_object(
        {
            "metadata": {"name": "scaled-object"},
            "spec": {
                "scaleTargetRef": {"name": "scaling-app"},
                "minReplicaCount": 1,
                "maxReplicaCount": 3,
                "triggers": [
                    {
                        "type": "prometheus",
                        "metadata": {
                            "serverAddress": "http://prometheus:9090",
                            "query": GUIDE_QUERY,
                            "threshold": "0.5",
                        },
                    }
                ],
            },
        }
    )
    hpa = hpa_spec(so)
    history = History()

    def scrape(t: float, busy: list[float]) -> None:
        samples = [
            ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": f"n{i}"}, u)
            for i, u in enumerate(busy)
        ]
        history.scrape(t, samples, {"job": "dcgm-exporter", "instance": "dcgm"})

    def value(t: float) -> TriggerValue:
        return trigger_value(so.triggers[0], query(history, so.triggers[0].query, t))

    state, replicas = HPAState(), 1
    # heavy load on the one pod's GPU of the one node: 100% -> metric 1.0 -> ceil(1.0/0.5) = 2
    scrape(0, [100.0])
    d = reconcile(
        hpa,
        state,
        Target(replicas, replicas, "app=scaling-app", (PodState("p0"),)),
        [Reading(values=(value(0).value_milli,))],
        0,
    )
    assert d.replicas == 2
    # the new pod lands on a new node (cluster-autoscaler): two GPUs, both at 100% -> still 2
    scrape(15, [100.0, 100.0])
    pods = (PodState("p0"), PodState("p1"))
    d = reconcile(
        hpa,
        d.state,
        Target(2, 2, "app=scaling-app", pods),
        [Reading(values=(value(15).value_milli,))],
        15,
    )
    assert d.replicas is None and value(15).value_milli == 1000
    # load stops: 0 -> the HPA wants 1, but holds 2 for its 300 s window
    scrape(30, [0.0, 0.0])
    assert value(30).value_milli == 0
    d = reconcile(hpa, d.state, Target(2, 2, "app=scaling-app", pods), [Reading(values=(0,))], 30)
    assert d.replicas is None
    d = reconcile(hpa, d.state, Target(2, 2, "app=scaling-app", pods), [Reading(values=(0,))], 316)
    assert (
        d.replicas == 1 and d.events[0].message == "New size: 1; reason: All metrics below target"
    )
    # and KEDA never goes below minReplicaCount 1 (min > 0: no deactivation to zero)
    assert poll(so, KedaState(), 1, [value(30)], now=1000).replicas is None
