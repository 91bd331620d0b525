"""The HPA controller's rules: upstream's own test tables (as data) and a controller's life.

``data/hpa_normalization.yaml`` and ``data/hpa_replica_calculator.yaml`` are ported from
kubernetes/kubernetes ``pkg/controller/podautoscaler`` tests. Skipped upstream tests: those that
need the API machinery (selector overlap, scale subresource errors, status update retries) and
TestReplicaCalcComputedToleranceAlgImplementation (it derives its inputs in code; the tolerance
edge is covered by the Tolerance cases).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.autoscaling.hpa import (
    ControllerConfig,
    HPAState,
    Reading,
    ScaleEvent,
    Target,
    _Sync,
    convert_with_behavior_rate,
    convert_with_rules,
    reconcile,
    replicas_changed_in,
    scale_down_limit,
    scale_up_limit,
    store_scale_event,
)
from kgpu.autoscaling.hpa_spec import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    Behavior,
    HPASpec,
    ScalingPolicy,
    ScalingRules,
    format_milli,
    label_selector_string,
    parse_hpa,
)
from kgpu.autoscaling.replicas import (
    CalculatorConfig,
    MetricError,
    PodMetric,
    PodState,
    Proposal,
    Tolerances,
    external_average_value,
    external_value,
    object_average_value,
    object_value,
    plain_metric,
    resource_utilization,
)
from kgpu.errors import FieldError
from kgpu.quantity import parse_quantity

DATA = Path(__file__).parent / "data"
NORMALIZATION = yaml.safe_load((DATA / "hpa_normalization.yaml").read_text())
CALCULATOR = yaml.safe_load((DATA / "hpa_replica_calculator.yaml").read_text())["cases"]
NOW = 100_000.0


def rules(raw: list[int] | None, default: ScalingRules) -> ScalingRules:
    """generateScalingRules(pods, podsPeriod, percent, percentPeriod, window) through
    GenerateHPAScale*Rules: policies left out stay the API default."""
    if raw is None:
        return default
    pods, pods_period, percent, percent_period, window = raw
    policies = []
    if pods:
        policies.append(ScalingPolicy("Pods", pods, pods_period))
    if percent:
        policies.append(ScalingPolicy("Percent", percent, percent_period))
    return ScalingRules(window, "Max", tuple(policies) or default.policies)


def events(raw: list[list[int]]) -> list[ScaleEvent]:
    return [ScaleEvent(change, NOW - age) for change, age in raw]


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["name"] for c in cases]


@pytest.mark.parametrize(
    "case", NORMALIZATION["scaling_with_rules"], ids=ids(NORMALIZATION["scaling_with_rules"])
)
def test_scaling_with_rules(case: dict[str, Any]) -> None:
    replicas, condition, _ = convert_with_behavior_rate(
        case["current"],
        case["desired"],
        case["min"],
        case["max"],
        rules(case.get("up"), DEFAULT_SCALE_UP),
        rules(case.get("down"), DEFAULT_SCALE_DOWN),
        events(case.get("up_events", [])),
        events(case.get("down_events", [])),
        NOW,
    )
    assert (replicas, condition) == (case["replicas"], case["condition"])


def _hpa(behavior: Behavior | None) -> HPASpec:
    return HPASpec("default", "h", "Deployment", "d", "apps/v1", 1, 10, (), behavior)


@pytest.mark.parametrize(
    "case",
    NORMALIZATION["stabilize_with_behavior"],
    ids=ids(NORMALIZATION["stabilize_with_behavior"]),
)
def test_stabilize_with_behavior(case: dict[str, Any]) -> None:
    behavior = Behavior(
        ScalingRules(case.get("up_window", 0), "Max", ()),
        ScalingRules(case.get("down_window", 0), "Max", ()),
    )
    state = HPAState(
        recommendations=tuple((NOW - age, rec) for rec, age in case["recommendations"])
    )
    sync = _Sync(_hpa(behavior), state, NOW, ControllerConfig())
    stabilized, _, _ = sync.stabilize_with_behavior(case["current"], case["desired"])
    assert stabilized == case["stabilized"]
    assert [rec for _, rec in sync.recommendations] == case["stored"]


@pytest.mark.parametrize(
    "case",
    NORMALIZATION["stabilize_without_behavior"],
    ids=ids(NORMALIZATION["stabilize_without_behavior"]),
)
def test_stabilize_without_behavior(case: dict[str, Any]) -> None:
    state = HPAState(
        recommendations=tuple((NOW - age, rec) for rec, age in case["recommendations"])
    )
    sync = _Sync(_hpa(None), state, NOW, ControllerConfig())
    assert sync.stabilize_without_behavior(case["desired"]) == case["stabilized"]
    assert len(sync.recommendations) == case["stored"]


@pytest.mark.parametrize(
    "case", NORMALIZATION["convert_with_rules"], ids=ids(NORMALIZATION["convert_with_rules"])
)
def test_convert_with_rules(case: dict[str, Any]) -> None:
    replicas, condition, _ = convert_with_rules(
        case["current"], case["desired"], case["min"], case["max"]
    )
    assert (replicas, condition) == (case["replicas"], case["condition"])


@pytest.mark.parametrize(
    "case", NORMALIZATION["store_scale_events"], ids=ids(NORMALIZATION["store_scale_events"])
)
def test_store_scale_events(case: dict[str, Any]) -> None:
    stored = events(case["previous"])
    assert replicas_changed_in(60, stored, NOW) == case["changed"]
    if case.get("rules") is not None:
        store_scale_event(stored, rules(case["rules"], DEFAULT_SCALE_UP), 5, NOW)
    assert [[e.change, e.outdated] for e in stored] == case["stored"]


def test_scale_limits_with_the_min_policy() -> None:
    """TestCalculateScaleUpLimitWithScalingRules and TestCalculateScaleDownLimitWithBehaviors."""
    min_policy = ScalingRules(
        300, "Min", (ScalingPolicy("Pods", 2, 60), ScalingPolicy("Percent", 50, 60))
    )
    assert scale_up_limit(1, [], [], min_policy, NOW) == 2
    assert scale_down_limit(5, [], [], min_policy, NOW) == 3
    disabled = ScalingRules(0, "Disabled", min_policy.policies)
    assert scale_up_limit(7, [], [], disabled, NOW) == 7
    assert scale_down_limit(7, [], [], disabled, NOW) == 7


# -- the replica calculator -------------------------------------------------------------------
def _pods(case: dict[str, Any]) -> list[PodState]:
    resource = case.get("resource") or {}
    count = max(case["current"], len(case.get("phases", [])))
    pods = []
    for i in range(count):
        start = {"hot": NOW, "cool": NOW - 180, None: 0.0}[
            case["start"][i] if "start" in case else None
        ]
        requests: dict[str, dict[str, int]] = {"container1": {}, "container2": {}}
        if i < len(resource.get("requests", [])):
            milli = int(parse_quantity(resource["requests"][i]) * 1000)
            requests = {"container1": {"cpu": milli}, "container2": {"cpu": milli}}
        pods.append(
            PodState(
                name=f"test-pod-{i}",
                phase=case.get("phases", ["Running"] * count)[i],
                ready=case.get("readiness", [True] * count)[i]
                if i < len(case.get("readiness", [True] * count))
                else True,
                start_time=start,
                deleting=case.get("deleting", [False] * count)[i],
                requests=requests,
            )
        )
    return pods


def _usage(resource: dict[str, Any]) -> dict[str, PodMetric]:
    out = {}
    for i, level in enumerate(resource["levels"]):
        name = (
            resource["pod_names"][i] if i < len(resource.get("pod_names", [])) else f"test-pod-{i}"
        )
        values = level if isinstance(level, list) else [level, level]
        containers = {f"container{j + 1}": v for j, v in enumerate(values)}
        out[name] = PodMetric(containers, timestamp=0.0, window=60.0)
    return out


TESTING = CalculatorConfig(cpu_initialization_period=120, initial_readiness_delay=10)


def _calculate(case: dict[str, Any]) -> Proposal:
    pods = _pods(case)
    current = case["current"]
    if "resource" in case:
        resource = case["resource"]
        return resource_utilization(
            current,
            resource["target"],
            "cpu",
            pods,
            _usage(resource),
            NOW,
            Tolerances(),
            TESTING,
            case.get("container", ""),
        )
    metric = case["metric"]
    levels, target = metric["levels"], metric["target"]
    kind = metric["type"]
    if kind == "pods":
        return plain_metric(
            current,
            target,
            pods,
            {f"test-pod-{i}": v for i, v in enumerate(levels)},
            NOW,
            Tolerances(),
            TESTING,
        )
    if kind == "object":
        return object_value(current, target, levels[0], pods)
    if kind == "object_per_pod":
        return object_average_value(current, target, levels[0])
    if kind == "external":
        return external_value(current, target, levels, pods)
    assert kind == "external_per_pod"
    return external_average_value(current, target, levels)


@pytest.mark.parametrize("case", CALCULATOR, ids=ids(CALCULATOR))
def test_replica_calculator(case: dict[str, Any]) -> None:
    if "error" in case:
        with pytest.raises(MetricError, match=case["error"]):
            _calculate(case)
        return
    proposal = _calculate(case)
    assert proposal.replicas == case["replicas"]
    if "resource" in case:
        assert (proposal.utilization, proposal.usage) == (
            case["resource"]["utilization"],
            case["resource"]["value"],
        )
    else:
        assert proposal.usage == case["metric"]["usage"]


# -- a whole controller ------------------------------------------------------------------------
KEDA_STYLE_HPA = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "keda-hpa-scaled-object", "namespace": "default"},
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "scaling-app"},
        "minReplicas": 1,
        "maxReplicas": 3,
        "metrics": [
            {
                "type": "External",
                "external": {
                    "metric": {
                        "name": "s0-prometheus",
                        "selector": {"matchLabels": {"scaledobject.keda.sh/name": "scaled-object"}},
                    },
                    "target": {"type": "AverageValue", "averageValue": "500m"},
                },
            }
        ],
    },
}
METRIC = (
    "external metric s0-prometheus(&LabelSelector{MatchLabels:map[string]string{"
    "scaledobject.keda.sh/name: scaled-object,},MatchExpressions:[]LabelSelectorRequirement{},})"
)


def running(n: int) -> tuple[PodState, ...]:
    return tuple(PodState(f"p{i}") for i in range(n))


def sync(state: HPAState, replicas: int, value_milli: int, now: float) -> Any:
    return reconcile(
        parse_hpa(KEDA_STYLE_HPA),
        state,
        Target(replicas, replicas, "app=scaling-app", running(replicas)),
        [Reading(values=(value_milli,))],
        now,
    )


def test_a_keda_hpa_scales_up_with_the_real_event_and_down_after_the_window() -> None:
    # the guide's query at 0.75 (all GPUs 75% busy), per-pod target 0.5: ceil(0.75 / 0.5) = 2
    d = sync(HPAState(), 1, 750, 0)
    assert d.replicas == 2
    assert [(e.reason, e.message) for e in d.events] == [
        ("SuccessfulRescale", f"New size: 2; reason: {METRIC} above target")
    ]
    assert d.events[0].object == "HorizontalPodAutoscaler/default/keda-hpa-scaled-object"
    conditions = {c["type"]: (c["status"], c["reason"]) for c in d.status["conditions"]}
    assert conditions == {
        "AbleToScale": ("True", "SucceededRescale"),
        "ScalingActive": ("True", "ValidMetricFound"),
        "ScalingLimited": ("False", "DesiredWithinRange"),
    }
    assert d.status["currentMetrics"] == [
        {
            "type": "External",
            "external": {
                "metric": {
                    "name": "s0-prometheus",
                    "selector": {"matchLabels": {"scaledobject.keda.sh/name": "scaled-object"}},
                },
                "current": {"averageValue": "750m"},
            },
        }
    ]
    # within 10% of the target per pod: 2 pods at 0.95 -> ratio 0.95, no change
    d = sync(d.state, 2, 950, 15)
    assert d.replicas is None and not d.events
    # load stops: the proposal is 0 -> min 1, but the 300 s window holds the highest (2)
    state = d.state
    for t in range(30, 330, 15):
        d = sync(state, 2, 0, t)
        assert d.replicas is None, t
        state = d.state
        reasons = {c.type: c.reason for c in state.conditions}
        assert reasons["AbleToScale"] == "ScaleDownStabilized"
    d = sync(state, 2, 0, 330)  # the 2 recommended at 15 s has left the window
    assert d.replicas == 1
    assert d.events[0].message == "New size: 1; reason: All metrics below target"


def test_without_behavior_a_scale_up_is_at_most_double_or_four() -> None:
    hpa = dict(KEDA_STYLE_HPA, spec=dict(KEDA_STYLE_HPA["spec"], maxReplicas=100))
    d = reconcile(
        parse_hpa(hpa), HPAState(), Target(1, 1, "a=b", running(1)), [Reading(values=(50_000,))], 0
    )
    assert d.replicas == 4  # wants 100; max(2 x 1, 4)
    reasons = {c.type: (c.status, c.reason) for c in d.state.conditions}
    assert reasons["ScalingLimited"] == ("True", "ScaleUpLimit")


def test_with_default_behavior_scale_up_is_four_pods_or_double_per_15s() -> None:
    spec = dict(
        KEDA_STYLE_HPA["spec"],
        maxReplicas=100,
        behavior={"scaleDown": {"stabilizationWindowSeconds": 0}},
    )
    hpa = parse_hpa(dict(KEDA_STYLE_HPA, spec=spec))
    assert hpa.behavior is not None and hpa.behavior.scale_up == DEFAULT_SCALE_UP
    state, replicas, path = HPAState(), 1, []
    for t in range(0, 60, 15):
        d = reconcile(
            hpa,
            state,
            Target(replicas, replicas, "a=b", running(replicas)),
            [Reading(values=(50_000,))],
            t,
        )
        state = d.state
        replicas = d.replicas or replicas
        path.append(replicas)
    assert path == [5, 10, 20, 40]  # max(+4 pods, +100%) each period


def test_a_failing_metric_blocks_scale_down_but_not_scale_up() -> None:
    spec = dict(KEDA_STYLE_HPA["spec"])
    spec["metrics"] = [KEDA_STYLE_HPA["spec"]["metrics"][0]] * 2
    hpa = parse_hpa(dict(KEDA_STYLE_HPA, spec=spec))
    failing = Reading(error="prometheus query returns NaN")
    d = reconcile(
        hpa, HPAState(), Target(2, 2, "a=b", running(2)), [Reading(values=(0,)), failing], 0
    )
    assert d.replicas is None
    reasons = [e.reason for e in d.events]
    assert reasons == ["FailedGetExternalMetric", "FailedComputeMetricsReplicas"]
    assert d.events[1].message.startswith(
        "invalid metrics (1 invalid out of 2), first error is: failed to get s0-prometheus "
        "external metric value: failed to get s0-prometheus external metric: unable to get "
        "external metric "
        "default/s0-prometheus/&LabelSelector{"
    )
    assert d.events[1].message.endswith(
        "unable to fetch metrics from external metrics API: prometheus query returns NaN"
    )
    d = reconcile(
        hpa, HPAState(), Target(1, 1, "a=b", running(1)), [Reading(values=(1500,)), failing], 0
    )
    assert d.replicas == 3  # the healthy metric still scales up


def test_a_target_at_zero_is_left_to_keda() -> None:
    d = sync(HPAState(), 0, 9000, 0)
    assert d.replicas is None and not d.events
    status = {c["type"]: c for c in d.status["conditions"]}
    assert status["ScalingActive"]["reason"] == "ScalingDisabled"
    assert (
        status["ScalingActive"]["message"]
        == "scaling is disabled since the replica count of the target is zero"
    )


def test_out_of_range_targets_are_brought_back() -> None:
    d = sync(HPAState(), 7, 0, 0)
    assert d.replicas == 3
    assert (
        d.events[0].message
        == "New size: 3; reason: Current number of replicas above Spec.MaxReplicas"
    )


def test_the_disabled_policy_never_scales_that_way() -> None:
    spec = dict(KEDA_STYLE_HPA["spec"], behavior={"scaleUp": {"selectPolicy": "Disabled"}})
    hpa = parse_hpa(dict(KEDA_STYLE_HPA, spec=spec))
    d = reconcile(hpa, HPAState(), Target(1, 1, "a=b", running(1)), [Reading(values=(9000,))], 0)
    assert d.replicas is None
    reasons = {c.type: (c.status, c.reason) for c in d.state.conditions}
    assert reasons["ScalingLimited"] == ("True", "ScaleUpLimit")


def test_resource_utilization_metric_names() -> None:
    hpa = parse_hpa(
        {
            "metadata": {"name": "cpu"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "maxReplicas": 10},
        }
    )
    assert hpa.metrics[0].target.average_utilization == 80  # the API default
    pods = tuple(PodState(f"p{i}", requests={"c": {"cpu": 1000}}) for i in range(2))
    usage = {p.name: PodMetric({"c": 1600}) for p in pods}
    d = reconcile(hpa, HPAState(), Target(2, 2, "a=b", pods), [Reading(usage=usage)], 1000)
    assert d.replicas == 4
    assert d.events[0].message == (
        "New size: 4; reason: cpu resource utilization (percentage of request) above target"
    )


@pytest.mark.parametrize(
    ("spec", "path", "message"),
    [
        ({"maxReplicas": 0}, "spec.maxReplicas", "must be greater than 0"),
        (
            {"minReplicas": 5, "maxReplicas": 2},
            "spec.maxReplicas",
            "must be greater than or equal to `minReplicas`",
        ),
        (
            {"minReplicas": 0, "maxReplicas": 2},
            "spec.minReplicas",
            "must be greater than or equal to 1",
        ),
        (
            {"maxReplicas": 2, "behavior": {"scaleUp": {"stabilizationWindowSeconds": 3601}}},
            "spec.behavior.scaleUp.stabilizationWindowSeconds",
            "must be less than or equal to 3600",
        ),
        (
            {"maxReplicas": 2, "behavior": {"scaleDown": {"selectPolicy": "Most"}}},
            "spec.behavior.scaleDown.selectPolicy",
            'supported values: "Disabled", "Max", "Min"',
        ),
        (
            {"maxReplicas": 2, "behavior": {"scaleDown": {"policies": []}}},
            "spec.behavior.scaleDown.policies",
            "must specify at least one Policy",
        ),
        (
            {
                "maxReplicas": 2,
                "behavior": {
                    "scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1801}]}
                },
            },
            "spec.behavior.scaleUp.policies[0].periodSeconds",
            "must be less than or equal to 1800",
        ),
        (
            {
                "maxReplicas": 2,
                "behavior": {
                    "scaleUp": {"policies": [{"type": "Nodes", "value": 0, "periodSeconds": 15}]}
                },
            },
            "spec.behavior.scaleUp.policies[0].type",
            'supported values: "Percent", "Pods"',
        ),
        (
            {
                "maxReplicas": 2,
                "metrics": [
                    {
                        "type": "External",
                        "external": {"metric": {"name": "m"}, "target": {"type": "AverageValue"}},
                    }
                ],
            },
            "spec.metrics[0].external.target.averageValue",
            "must set averageValue",
        ),
        (
            {
                "maxReplicas": 2,
                "metrics": [
                    {
                        "type": "External",
                        "external": {
                            "metric": {"name": "m"},
                            "target": {"type": "Value", "value": "x"},
                        },
                    }
                ],
            },
            "spec.metrics[0].external.target.value",
            "quantities must match",
        ),
        (
            {
                "maxReplicas": 2,
                "metrics": [
                    {
                        "type": "Pods",
                        "pods": {
                            "metric": {"name": "m"},
                            "target": {"type": "Utilization", "averageUtilization": 5},
                        },
                    }
                ],
            },
            "spec.metrics[0].pods.target.type",
            "Utilization is only valid for resource metrics",
        ),
        (
            {"maxReplicas": 2, "metrics": [{"type": "Resource"}]},
            "spec.metrics[0].resource",
            "must populate information for the given metric source",
        ),
    ],
)
def test_hpa_validation(spec: dict[str, Any], path: str, message: str) -> None:
    obj = {
        "metadata": {"name": "h"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, **spec},
    }
    with pytest.raises(FieldError) as caught:
        parse_hpa(obj)
    problems: dict[str, str] = {}
    for problem in caught.value.problems:
        problems[problem.path] = problems.get(problem.path, "") + problem.message + "; "
    assert path in problems, problems
    assert message in problems[path]


def test_quantities_and_selectors_print_as_kubernetes_does() -> None:
    assert [format_milli(v) for v in (500, 2000, 1500, 3_000_000, 0)] == [
        "500m",
        "2",
        "1500m",
        "3k",
        "0",
    ]
    assert label_selector_string(None) == "nil"
    assert label_selector_string(
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "y"]}]}
    ) == (
        "&LabelSelector{MatchLabels:map[string]string{},MatchExpressions:[]LabelSelectorRequirement"
        "{LabelSelectorRequirement{Key:a,Operator:In,Values:[x y],},},}"
    )
    assert math.isclose(float(parse_quantity("500m")), 0.5)
