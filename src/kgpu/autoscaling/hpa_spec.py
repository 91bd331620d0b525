"""``autoscaling/v2`` HorizontalPodAutoscaler objects: parsed, defaulted and validated.

Defaults are the API server's (``pkg/apis/autoscaling/v2/defaults.go``): ``minReplicas`` 1; no
``metrics`` means CPU at 80% utilization; a ``behavior`` that is present gets every missing field
from the defaults (scale up: no stabilization, ``Max`` of 4 pods or 100% per 15 s; scale down:
``Max`` of 100% per 15 s and a stabilization window left empty, which the controller fills with
its ``--horizontal-pod-autoscaler-downscale-stabilization``, 300 s). An absent ``behavior`` stays
absent: the controller then uses its older rules (see :mod:`kgpu.autoscaling.hpa`).

Validation follows ``pkg/apis/autoscaling/validation`` (limits: stabilization window 0..3600 s,
policy period 1..1800 s, values > 0, select policy ``Max|Min|Disabled``, ``maxReplicas >=
minReplicas >= 1``), reported as kgpu field problems. Not modelled: the HPAScaleToZero feature
gate (``minReplicas: 0``), which is off by default.

Quantities keep the controller's precision: every target is a milli-value rounded up, as
``resource.Quantity.MilliValue()`` does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.quantity import QuantityError, parse_quantity

METRIC_TYPES = ("Resource", "ContainerResource", "Pods", "Object", "External")
TARGET_TYPES = ("Utilization", "Value", "AverageValue")
SELECT_POLICIES = ("Disabled", "Max", "Min")
POLICY_TYPES = ("Percent", "Pods")
MAX_STABILIZATION_WINDOW_SECONDS = 3600
MAX_PERIOD_SECONDS = 1800
DEFAULT_CPU_UTILIZATION = 80
_SOURCE_FIELD = {
    "Resource": "resource",
    "ContainerResource": "containerResource",
    "Pods": "pods",
    "Object": "object",
    "External": "external",
}


@dataclass(frozen=True)
class ScalingPolicy:
    type: str  # Pods | Percent
    value: int
    period_seconds: int


@dataclass(frozen=True)
class ScalingRules:
    """One direction of ``behavior``; ``stabilization_window_seconds`` None means "the
    controller's default" (only scale down is left empty by the API defaults)."""

    stabilization_window_seconds: int | None
    select_policy: str
    policies: tuple[ScalingPolicy, ...]
    tolerance: float | None = None  # autoscaling/v2 alpha field (HPAConfigurableTolerance)


@dataclass(frozen=True)
class Behavior:
    scale_up: ScalingRules
    scale_down: ScalingRules


DEFAULT_SCALE_UP = ScalingRules(
    0, "Max", (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15))
)
DEFAULT_SCALE_DOWN = ScalingRules(None, "Max", (ScalingPolicy("Percent", 100, 15),))


@dataclass(frozen=True)
class MetricTarget:
    type: str
    value_milli: int | None = None
    average_value_milli: int | None = None
    average_utilization: int | None = None


@dataclass(frozen=True)
class MetricSpec:
    """One ``spec.metrics[]`` entry. ``name`` is the metric's name (the resource's for
    Resource/ContainerResource); ``selector`` the metric's label selector as written."""

    type: str
    name: str
    target: MetricTarget
    selector: Mapping[str, Any] | None = None
    container: str = ""
    object_kind: str = ""
    object_name: str = ""
    object_api_version: str = ""


@dataclass(frozen=True)
class HPASpec:
    namespace: str
    name: str
    target_kind: str
    target_name: str
    target_api_version: str
    min_replicas: int
    max_replicas: int
    metrics: tuple[MetricSpec, ...]
    behavior: Behavior | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def milli(value: object) -> int:
    """A quantity's milli-value, rounded up as ``Quantity.MilliValue()`` does."""
    return math.ceil(parse_quantity(value) * 1000)


def format_milli(value: int) -> str:
    """A milli-value as Kubernetes prints a DecimalSI quantity: ``500m``, ``2``, ``1500m``,
    ``3k``."""
    if value % 1000:
        return f"{value}m"
    units = value // 1000
    suffixes = ("", "k", "M", "G", "T", "P", "E")
    i = 0
    while units and units % 1000 == 0 and i < len(suffixes) - 1:
        units //= 1000
        i += 1
    return f"{units}{suffixes[i]}"


def label_selector_string(selector: Mapping[str, Any] | None) -> str:
    """A LabelSelector as Go's ``%+v`` prints it (gogo-protobuf's String()): the text that
    ends up in the HPA's metric names and so in ``SuccessfulRescale`` events."""
    if selector is None:
        return "nil"
    labels = selector.get("matchLabels") or {}
    pairs = "".join(f"{k}: {labels[k]}," for k in sorted(labels))
    expressions = "".join(
        "LabelSelectorRequirement{"
        f"Key:{e.get('key', '')},Operator:{e.get('operator', '')},"
        f"Values:[{' '.join(str(v) for v in e.get('values') or [])}],}},"
        for e in selector.get("matchExpressions") or []
    )
    return (
        f"&LabelSelector{{MatchLabels:map[string]string{{{pairs}}},"
        f"MatchExpressions:[]LabelSelectorRequirement{{{expressions}}},}}"
    )


class _Problems:
    def __init__(self) -> None:
        self.items: list[FieldProblem] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(FieldProblem(message, path))


def _int(raw: object, path: str, problems: _Problems) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        problems.add(path, f"must be an integer, got {raw!r}")
        return None
    return raw


def _rules(raw: object, default: ScalingRules, path: str, problems: _Problems) -> ScalingRules:
    if raw is None:
        return default
    if not isinstance(raw, Mapping):
        problems.add(path, "must be a map with selectPolicy, stabilizationWindowSeconds, policies")
        return default
    window = _int(
        raw.get("stabilizationWindowSeconds"),
        join_path(path, "stabilizationWindowSeconds"),
        problems,
    )
    if window is not None and window < 0:
        problems.add(
            join_path(path, "stabilizationWindowSeconds"), "must be greater than or equal to zero"
        )
    elif window is not None and window > MAX_STABILIZATION_WINDOW_SECONDS:
        problems.add(
            join_path(path, "stabilizationWindowSeconds"),
            f"must be less than or equal to {MAX_STABILIZATION_WINDOW_SECONDS}",
        )
    select = raw.get("selectPolicy", default.select_policy)
    if select not in SELECT_POLICIES:
        problems.add(
            join_path(path, "selectPolicy"),
            f'Unsupported value: {select!r}: supported values: "Disabled", "Max", "Min"',
        )
        select = default.select_policy
    policies = default.policies
    if "policies" in raw and raw["policies"] is not None:
        policies = _policies(raw["policies"], join_path(path, "policies"), problems)
    tolerance = raw.get("tolerance", default.tolerance)
    if tolerance is not None:
        try:
            tolerance = float(parse_quantity(tolerance))
        except QuantityError as exc:
            problems.add(join_path(path, "tolerance"), str(exc))
            tolerance = None
        else:
            if tolerance < 0:
                problems.add(join_path(path, "tolerance"), "must be greater than or equal to zero")
    return ScalingRules(
        window if window is not None else default.stabilization_window_seconds,
        str(select),
        policies,
        tolerance,
    )


def _policies(raw: object, path: str, problems: _Problems) -> tuple[ScalingPolicy, ...]:
    if not isinstance(raw, list):
        problems.add(path, "must be a list of {type, value, periodSeconds}")
        return ()
    if not raw:
        problems.add(path, "Required value: must specify at least one Policy")
    out = []
    for i, item in enumerate(raw):
        at = join_path(path, i)
        if not isinstance(item, Mapping):
            problems.add(at, "must be a map with type, value and periodSeconds")
            continue
        kind = item.get("type")
        if kind not in POLICY_TYPES:
            problems.add(
                join_path(at, "type"),
                f'Unsupported value: {kind!r}: supported values: "Percent", "Pods"',
            )
        value = _int(item.get("value"), join_path(at, "value"), problems)
        if value is None or value <= 0:
            problems.add(join_path(at, "value"), "must be greater than zero")
        period = _int(item.get("periodSeconds"), join_path(at, "periodSeconds"), problems)
        if period is None or period <= 0:
            problems.add(join_path(at, "periodSeconds"), "must be greater than zero")
        elif period > MAX_PERIOD_SECONDS:
            problems.add(
                join_path(at, "periodSeconds"),
                f"must be less than or equal to {MAX_PERIOD_SECONDS}",
            )
        out.append(ScalingPolicy(str(kind), value or 0, period or 0))
    return tuple(out)


def parse_behavior(raw: object, path: str = "spec.behavior") -> Behavior | None:
    """``behavior`` with the API server's defaults filled in (None when absent)."""
    problems = _Problems()
    behavior = _behavior(raw, path, problems)
    if problems.items:
        raise FieldError(problems.items)
    return behavior


def _behavior(raw: object, path: str, problems: _Problems) -> Behavior | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.add(path, "must be a map with scaleUp and scaleDown")
        return None
    return Behavior(
        _rules(raw.get("scaleUp"), DEFAULT_SCALE_UP, join_path(path, "scaleUp"), problems),
        _rules(raw.get("scaleDown"), DEFAULT_SCALE_DOWN, join_path(path, "scaleDown"), problems),
    )


def _target(raw: object, path: str, problems: _Problems, allow_utilization: bool) -> MetricTarget:
    if not isinstance(raw, Mapping):
        problems.add(path, "Required value: must specify a target")
        return MetricTarget("Value")
    kind = raw.get("type")
    if kind not in TARGET_TYPES:
        problems.add(join_path(path, "type"), "must be either Utilization, Value, or AverageValue")
        return MetricTarget(str(kind))
    if kind == "Utilization" and not allow_utilization:
        problems.add(join_path(path, "type"), "Utilization is only valid for resource metrics")
    fields = {"Value": "value", "AverageValue": "averageValue", "Utilization": "averageUtilization"}
    field = fields[str(kind)]
    value = raw.get(field)
    at = join_path(path, field)
    if value is None:
        problems.add(at, f"Required value: must set {field} for a target of type {kind}")
        return MetricTarget(str(kind))
    if kind == "Utilization":
        number = _int(value, at, problems)
        if number is not None and number <= 0:
            problems.add(at, "must be greater than 0")
        return MetricTarget(str(kind), average_utilization=number)
    try:
        amount = milli(value)
    except QuantityError as exc:
        problems.add(at, str(exc))
        return MetricTarget(str(kind))
    if amount <= 0:
        problems.add(at, "must be positive")
    if kind == "Value":
        return MetricTarget("Value", value_milli=amount)
    return MetricTarget("AverageValue", average_value_milli=amount)


def _metric(raw: object, path: str, problems: _Problems) -> MetricSpec | None:
    if not isinstance(raw, Mapping):
        problems.add(path, "must be a map with type and its source")
        return None
    kind = raw.get("type")
    if not kind:
        problems.add(join_path(path, "type"), "Required value: must specify a metric source type")
        return None
    if kind not in METRIC_TYPES:
        problems.add(
            join_path(path, "type"),
            f"Unsupported value: {kind!r}: supported values: "
            + ", ".join(f'"{t}"' for t in METRIC_TYPES),
        )
        return None
    field = _SOURCE_FIELD[str(kind)]
    source = raw.get(field)
    at = join_path(path, field)
    if not isinstance(source, Mapping):
        problems.add(at, "Required value: must populate information for the given metric source")
        return None
    for other in _SOURCE_FIELD.values():
        if other != field and raw.get(other) is not None:
            problems.add(join_path(path, other), "must populate the given metric source only")
    if kind in ("Resource", "ContainerResource"):
        name = source.get("name")
        if not name:
            problems.add(join_path(at, "name"), "Required value: must specify a resource name")
        container = str(source.get("container") or "")
        if kind == "ContainerResource" and not container:
            problems.add(join_path(at, "container"), "Required value: must specify a container")
        target = _target(source.get("target"), join_path(at, "target"), problems, True)
        if target.type == "Value":
            problems.add(
                join_path(at, "target", "type"), "must be either Utilization or AverageValue"
            )
        return MetricSpec(str(kind), str(name or ""), target, container=container)
    metric = source.get("metric")
    if not isinstance(metric, Mapping) or not metric.get("name"):
        problems.add(join_path(at, "metric", "name"), "Required value: must specify a metric name")
        metric = {}
    selector = metric.get("selector")
    if selector is not None and not isinstance(selector, Mapping):
        problems.add(join_path(at, "metric", "selector"), "must be a label selector")
        selector = None
    target = _target(source.get("target"), join_path(at, "target"), problems, False)
    if kind == "Pods" and target.type != "AverageValue":
        problems.add(join_path(at, "target", "type"), "must be AverageValue")
    spec = MetricSpec(str(kind), str(metric.get("name", "")), target, selector)
    if kind == "Object":
        described = source.get("describedObject")
        if (
            not isinstance(described, Mapping)
            or not described.get("kind")
            or not described.get("name")
        ):
            problems.add(join_path(at, "describedObject"), "Required value: must set kind and name")
            described = {}
        spec = MetricSpec(
            "Object",
            spec.name,
            target,
            selector,
            object_kind=str(described.get("kind", "")),
            object_name=str(described.get("name", "")),
            object_api_version=str(described.get("apiVersion", "")),
        )
    return spec


def parse_hpa(obj: Mapping[str, Any]) -> HPASpec:
    """An ``autoscaling/v2`` HorizontalPodAutoscaler, defaulted and validated; raises
    :class:`FieldError` with every problem, each at its field path."""
    problems = _Problems()
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise FieldError(
            FieldProblem("Required value: a HorizontalPodAutoscaler needs a spec", "spec")
        )
    ref = spec.get("scaleTargetRef")
    if not isinstance(ref, Mapping):
        problems.add("spec.scaleTargetRef", "Required value")
        ref = {}
    for key in ("kind", "name"):
        if not ref.get(key):
            problems.add(join_path("spec.scaleTargetRef", key), "Required value")
    min_replicas = _int(spec.get("minReplicas", 1), "spec.minReplicas", problems)
    if min_replicas is not None and min_replicas < 1:
        problems.add("spec.minReplicas", "must be greater than or equal to 1")
    max_replicas = _int(spec.get("maxReplicas"), "spec.maxReplicas", problems)
    if max_replicas is None:
        problems.add("spec.maxReplicas", "Required value")
    elif max_replicas < 1:
        problems.add("spec.maxReplicas", "must be greater than 0")
    elif min_replicas is not None and max_replicas < min_replicas:
        problems.add("spec.maxReplicas", "must be greater than or equal to `minReplicas`")
    raw_metrics = spec.get("metrics")
    metrics: list[MetricSpec] = []
    if raw_metrics is None or raw_metrics == []:
        metrics.append(
            MetricSpec(
                "Resource",
                "cpu",
                MetricTarget("Utilization", average_utilization=DEFAULT_CPU_UTILIZATION),
            )
        )
    elif not isinstance(raw_metrics, list):
        problems.add("spec.metrics", "must be a list")
    else:
        for i, raw in enumerate(raw_metrics):
            metric = _metric(raw, join_path("spec.metrics", i), problems)
            if metric is not None:
                metrics.append(metric)
    behavior = _behavior(spec.get("behavior"), "spec.behavior", problems)
    if problems.items:
        raise FieldError(problems.items)
    return HPASpec(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name", "")),
        target_kind=str(ref["kind"]),
        target_name=str(ref["name"]),
        target_api_version=str(ref.get("apiVersion", "")),
        min_replicas=min_replicas or 1,
        max_replicas=max_replicas or 1,
        metrics=tuple(metrics),
        behavior=behavior,
    )
