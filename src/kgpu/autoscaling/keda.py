"""KEDA's ScaledObject (``keda.sh/v1alpha1``) with ``prometheus`` triggers, as pure code.

What KEDA (v2.x, kedacore/keda) does and kgpu reproduces:

* **Validation** (CRD schema and admission webhook): ``scaleTargetRef.name`` required (kind
  defaults to Deployment, apiVersion to apps/v1); ``pollingInterval`` >= 1, ``cooldownPeriod``,
  ``initialCooldownPeriod``, ``minReplicaCount``, ``idleReplicaCount`` >= 0, ``maxReplicaCount``
  >= 1, min <= max, idle < min, at least one trigger, unique trigger names, metadata values are
  strings, a name of at most 63 characters. A ``prometheus`` trigger needs ``serverAddress``,
  ``query`` (parsed by kgpu's PromQL: errors point into the query) and a float ``threshold``;
  ``activationThreshold`` (default 0) and ``ignoreNullValues`` (default true) are optional;
  ``metricType`` defaults to ``AverageValue`` and may not be ``Utilization``. Other metadata
  keys (``metricName``, deprecated) are ignored, as KEDA does.
* **The HPA KEDA creates**: ``keda-hpa-<name>`` (or ``advanced.horizontalPodAutoscalerConfig.
  name``), ``minReplicas`` = max(minReplicaCount, 1), ``maxReplicas`` = maxReplicaCount (100),
  one External metric ``s<i>-prometheus`` per trigger selected by ``scaledobject.keda.sh/name``,
  the target ``threshold`` in milli-units, and ``advanced.horizontalPodAutoscalerConfig.behavior``
  passed through unchanged.
* **A query's value**: an empty result is 0 (an error with ``ignoreNullValues: false``); more than
  one series is an error; a scalar result is an error (KEDA decodes only vectors); NaN/Inf is 0
  (or an error); the value the HPA sees is rounded to milli-units, negatives as 0.
* **Activation** (every ``pollingInterval``, 30 s): a trigger is active when its value is above
  ``activationThreshold``. KEDA itself scales 0 -> max(minReplicaCount, 1) when any trigger is
  active (``KEDAScaleTargetActivated``), and back to ``minReplicaCount`` (or
  ``idleReplicaCount``) once no trigger has been active for ``cooldownPeriod`` (300 s;
  ``KEDAScaleTargetDeactivated``); between 1 and max the HPA decides.

Not reproduced: ``fallback``, pause annotations, ``scalingModifiers``, ``useCachedMetrics``,
authentication, and scalers other than ``prometheus`` (reported as not simulated);
``customHeaders``, ``queryParameters``, ``timeout`` and ``unsafeSsl`` are checked but have nothing
to act on in a simulated cluster.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kgpu.autoscaling.events import Event
from kgpu.autoscaling.hpa_spec import HPASpec, format_milli, parse_behavior, parse_hpa
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.promql import MAX_RANGE_MS, Expr, PromQLError, Scalar, Value, max_range_ms, parse

API_VERSION = "keda.sh/v1alpha1"
OWNER_LABEL = "scaledobject.keda.sh/name"
DEFAULT_POLLING_INTERVAL = 30
DEFAULT_COOLDOWN_PERIOD = 300
DEFAULT_INITIAL_COOLDOWN_PERIOD = 0
DEFAULT_MAX_REPLICA_COUNT = 100
MAX_NAME_LENGTH = 63
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


@dataclass(frozen=True)
class PrometheusTrigger:
    index: int
    name: str
    server_address: str
    query: str
    expr: Expr
    threshold: float
    activation_threshold: float = 0.0
    metric_type: str = "AverageValue"
    ignore_null_values: bool = True

    @property
    def metric_name(self) -> str:
        """The External metric name KEDA gives the HPA: ``s<index>-prometheus``."""
        return f"s{self.index}-prometheus"


@dataclass(frozen=True)
class ScaledObjectSpec:
    namespace: str
    name: str
    target_kind: str
    target_name: str
    target_api_version: str
    polling_interval: int = DEFAULT_POLLING_INTERVAL
    cooldown_period: int = DEFAULT_COOLDOWN_PERIOD
    initial_cooldown_period: int = DEFAULT_INITIAL_COOLDOWN_PERIOD
    min_replica_count: int = 0
    max_replica_count: int = DEFAULT_MAX_REPLICA_COUNT
    idle_replica_count: int | None = None
    triggers: tuple[PrometheusTrigger, ...] = ()
    behavior: Mapping[str, Any] | None = None
    hpa_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    not_simulated: tuple[str, ...] = ()  # what kgpu ignores, in the user's words

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def target_kind_string(self) -> str:
        """``apps/v1.Deployment``: how KEDA's events name the target's kind."""
        group, _, version = self.target_api_version.rpartition("/")
        return f"{group}/{version}.{self.target_kind}"

    @property
    def hpa_min_replicas(self) -> int:
        return self.min_replica_count if self.min_replica_count > 0 else 1


def _int_field(
    spec: Mapping[str, Any],
    key: str,
    minimum: int,
    problems: list[FieldProblem],
    default: int | None,
) -> int | None:
    raw = spec.get(key)
    if raw is None:
        return default
    path = join_path("spec", key)
    if isinstance(raw, bool) or not isinstance(raw, int):
        problems.append(
            FieldProblem(f'Invalid value: "{type(raw).__name__}": must be of type integer', path)
        )
        return default
    if raw < minimum:
        problems.append(
            FieldProblem(
                f"Invalid value: {raw}: should be greater than or equal to {minimum}", path
            )
        )
    return raw


#: The largest milli-value an int64 quantity holds (KEDA: ``int64(threshold * 1000)``).
_MAX_MILLI = 2**63 - 1


def _hours(ms: int) -> str:
    return f"{ms / 3_600_000:,.2f}".rstrip("0").rstrip(".") + " h"


def _float_param(
    meta: Mapping[str, Any], key: str, path: str, problems: list[FieldProblem]
) -> float | None:
    raw = meta.get(key)
    if raw is None:
        return None
    try:
        value = float(str(raw))
        if math.isinf(value) and "inf" not in str(raw).lower():  # Go: "1e400" out of range
            problems.append(
                FieldProblem(
                    f'unable to set param "{key}" value "{raw}": strconv.ParseFloat: parsing '
                    f'"{raw}": value out of range',
                    join_path(path, key),
                )
            )
            return None
    except ValueError:
        problems.append(
            FieldProblem(
                f'unable to set param "{key}" value "{raw}": strconv.ParseFloat: parsing "{raw}": '
                "invalid syntax",
                join_path(path, key),
            )
        )
        return None
    return value


def _valid_timeout(text: str) -> bool:
    """KEDA's timeout: milliseconds, or a Go duration such as ``30s``; never negative."""
    if text.lstrip("-").isdigit():
        return not text.startswith("-")
    return bool(re.fullmatch(r"(?:[0-9]+(?:\.[0-9]+)?(?:ns|us|µs|ms|s|m|h))+", text))


def _trigger(
    raw: object, index: int, problems: list[FieldProblem], not_simulated: list[str]
) -> PrometheusTrigger | None:
    path = join_path("spec.triggers", index)
    if not isinstance(raw, Mapping):
        problems.append(FieldProblem("must be a map with type and metadata", path))
        return None
    kind = raw.get("type")
    if not kind:
        problems.append(
            FieldProblem("Required value: a trigger needs a type", join_path(path, "type"))
        )
        return None
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        problems.append(
            FieldProblem("Required value: a trigger needs metadata", join_path(path, "metadata"))
        )
        return None
    for key, value in meta.items():
        if not isinstance(value, str):
            problems.append(
                FieldProblem(
                    f'Invalid value: "{type(value).__name__}": must be of type string (quote it: '
                    f"{key}: '{value}')",
                    join_path(path, "metadata", str(key)),
                )
            )
    metric_type = raw.get("metricType") or "AverageValue"
    if metric_type == "Utilization":
        problems.append(
            FieldProblem(
                "'Utilization' metric type is unsupported for external metrics, allowed values "
                "are 'Value' or 'AverageValue'",
                join_path(path, "metricType"),
            )
        )
    elif metric_type not in ("AverageValue", "Value"):
        problems.append(
            FieldProblem(
                "must be either Utilization, Value, or AverageValue", join_path(path, "metricType")
            )
        )
    if kind != "prometheus":
        not_simulated.append(
            f"{path}: trigger type {kind!r} is not simulated (kgpu evaluates prometheus)"
        )
        return None
    meta_path = join_path(path, "metadata")
    for required in ("serverAddress", "query", "threshold"):
        if not meta.get(required):
            problems.append(
                FieldProblem(
                    f'missing required parameter "{required}" in [triggerMetadata]',
                    join_path(meta_path, required),
                )
            )
    threshold = _float_param(meta, "threshold", meta_path, problems)
    if threshold is not None and not abs(threshold) * 1000 <= _MAX_MILLI:  # NaN too
        problems.append(
            FieldProblem(
                f"{meta['threshold']!r} is out of range: KEDA gives the HPA the threshold in "
                "milli-units as a 64-bit integer (|threshold| at most 9223372036854775.807)",
                join_path(meta_path, "threshold"),
            )
        )
        threshold = None
    activation = _float_param(meta, "activationThreshold", meta_path, problems)
    for flag in ("ignoreNullValues", "unsafeSsl"):
        text = str(meta.get(flag, "true"))
        if text not in _TRUE + _FALSE:
            problems.append(
                FieldProblem(
                    f'unable to parse boolean value "{text}": strconv.ParseBool: parsing '
                    f'"{text}": invalid syntax',
                    join_path(meta_path, flag),
                )
            )
    ignore = str(meta.get("ignoreNullValues", "true"))
    for pairs in ("customHeaders", "queryParameters"):
        for item in str(meta.get(pairs) or "").split(","):
            if item.strip() and "=" not in item:
                problems.append(
                    FieldProblem(
                        f'expected format key=value, got "{item.strip()}"',
                        join_path(meta_path, pairs),
                    )
                )
    timeout = meta.get("timeout")
    if timeout is not None and not _valid_timeout(str(timeout)):
        problems.append(
            FieldProblem(
                f'unable to parse duration value "{timeout}": must be either a duration string '
                "(e.g. '30s', '5m') or a non-negative number of milliseconds",
                join_path(meta_path, "timeout"),
            )
        )
    query = meta.get("query")
    expr = None
    if isinstance(query, str) and query:
        try:
            expr = parse(query)
        except PromQLError as exc:
            problems.append(FieldProblem(str(exc), join_path(meta_path, "query")))
        if expr is not None and max_range_ms(expr) > MAX_RANGE_MS:
            problems.append(
                FieldProblem(
                    f"the query reads {_hours(max_range_ms(expr))} back (its longest range plus "
                    f"offset); kgpu's simulated Prometheus keeps {_hours(MAX_RANGE_MS)} of "
                    "samples: use a shorter range",
                    join_path(meta_path, "query"),
                )
            )
            expr = None
    if expr is None or threshold is None or not isinstance(query, str):
        return None
    return PrometheusTrigger(
        index=index,
        name=str(raw.get("name") or ""),
        server_address=str(meta.get("serverAddress", "")),
        query=query,
        expr=expr,
        threshold=threshold,
        activation_threshold=activation or 0.0,
        metric_type=str(metric_type),
        ignore_null_values=ignore in _TRUE,
    )


def parse_scaled_object(obj: Mapping[str, Any]) -> ScaledObjectSpec:
    """A ScaledObject, defaulted and validated: raises :class:`FieldError` with every problem."""
    problems: list[FieldProblem] = []
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        problems.append(FieldProblem("Required value", "metadata.name"))
    elif len(name) > MAX_NAME_LENGTH:
        problems.append(
            FieldProblem(
                f"scaledobject name {name!r} is {len(name)} characters long; must be no more "
                f'than {MAX_NAME_LENGTH} characters because it is used as the "{OWNER_LABEL}" '
                "label value",
                "metadata.name",
            )
        )
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise FieldError(FieldProblem("Required value: a ScaledObject needs a spec", "spec"))
    ref = spec.get("scaleTargetRef")
    if not isinstance(ref, Mapping) or not ref.get("name"):
        problems.append(
            FieldProblem("Required value: the workload to scale", "spec.scaleTargetRef.name")
        )
        ref = ref if isinstance(ref, Mapping) else {}
    polling = _int_field(spec, "pollingInterval", 1, problems, DEFAULT_POLLING_INTERVAL)
    cooldown = _int_field(spec, "cooldownPeriod", 0, problems, DEFAULT_COOLDOWN_PERIOD)
    initial = _int_field(
        spec, "initialCooldownPeriod", 0, problems, DEFAULT_INITIAL_COOLDOWN_PERIOD
    )
    idle = _int_field(spec, "idleReplicaCount", 0, problems, None)
    minimum = _int_field(spec, "minReplicaCount", 0, problems, 0)
    maximum = _int_field(spec, "maxReplicaCount", 1, problems, DEFAULT_MAX_REPLICA_COUNT)
    assert minimum is not None and maximum is not None
    if minimum > maximum:
        problems.append(
            FieldProblem("minReplicaCount must be less than or equal to maxReplicaCount", "spec")
        )
    hpa_minimum = minimum if minimum > 0 else 1 if "minReplicaCount" in spec else 0
    if idle is not None and idle >= hpa_minimum:
        problems.append(
            FieldProblem(
                f"IdleReplicaCount={idle} must be less than MinReplicaCount={hpa_minimum}",
                "spec.idleReplicaCount",
            )
        )
    raw_triggers = spec.get("triggers")
    triggers: list[PrometheusTrigger] = []
    not_simulated: list[str] = []
    if not isinstance(raw_triggers, list) or not raw_triggers:
        problems.append(
            FieldProblem("no triggers defined in the ScaledObject/ScaledJob", "spec.triggers")
        )
        raw_triggers = []
    names: set[str] = set()
    for i, raw in enumerate(raw_triggers):
        trigger_name = raw.get("name") if isinstance(raw, Mapping) else None
        if trigger_name:
            if trigger_name in names:
                problems.append(
                    FieldProblem(
                        f"triggerName {trigger_name!r} is defined multiple times in the "
                        "ScaledObject/ScaledJob, but it must be unique",
                        join_path("spec.triggers", i, "name"),
                    )
                )
            names.add(trigger_name)
        trigger = _trigger(raw, i, problems, not_simulated)
        if trigger is not None:
            triggers.append(trigger)
    advanced = spec.get("advanced") or {}
    hpa_config = (
        advanced.get("horizontalPodAutoscalerConfig") or {} if isinstance(advanced, Mapping) else {}
    )
    behavior = hpa_config.get("behavior") if isinstance(hpa_config, Mapping) else None
    if behavior is not None:
        try:
            parse_behavior(behavior, "spec.advanced.horizontalPodAutoscalerConfig.behavior")
        except FieldError as exc:
            problems.extend(exc.problems)
    for key in ("fallback",):
        if spec.get(key) is not None:
            not_simulated.append(f"spec.{key}: not simulated (kgpu's triggers never fail over)")
    if isinstance(advanced, Mapping) and advanced.get("scalingModifiers"):
        not_simulated.append("spec.advanced.scalingModifiers: not simulated")
    hpa_name = (
        str(hpa_config.get("name") or f"keda-hpa-{name}")
        if isinstance(hpa_config, Mapping)
        else f"keda-hpa-{name}"
    )
    if len(hpa_name) > MAX_NAME_LENGTH:
        problems.append(
            FieldProblem(
                f"HPA name {hpa_name!r} derived from scaledobject is {len(hpa_name)} characters "
                f"long; must be no more than {MAX_NAME_LENGTH} characters; set spec.advanced."
                "horizontalPodAutoscalerConfig.name to a shorter name or shorten the "
                "scaledobject name",
                "metadata.name",
            )
        )
    if problems:
        raise FieldError(problems)
    return ScaledObjectSpec(
        namespace=str(meta.get("namespace") or "default"),
        name=name,
        target_kind=str(ref.get("kind") or "Deployment"),
        target_name=str(ref.get("name")),
        target_api_version=str(ref.get("apiVersion") or "apps/v1"),
        polling_interval=polling or DEFAULT_POLLING_INTERVAL,
        cooldown_period=cooldown if cooldown is not None else DEFAULT_COOLDOWN_PERIOD,
        initial_cooldown_period=initial or 0,
        min_replica_count=minimum,
        max_replica_count=maximum,
        idle_replica_count=idle,
        triggers=tuple(triggers),
        behavior=behavior if isinstance(behavior, Mapping) else None,
        hpa_name=hpa_name,
        labels=dict(meta.get("labels") or {}),
        not_simulated=tuple(not_simulated),
    )


def threshold_milli(value: float) -> int:
    """A float as KEDA turns it into a quantity (``%.3f``): milli-units; NaN/Inf/negative 0."""
    if math.isnan(value) or math.isinf(value) or value < 0:
        return 0
    return round(float(f"{value:.3f}") * 1000)


def hpa_object(so: ScaledObjectSpec) -> dict[str, Any]:
    """The ``autoscaling/v2`` HPA KEDA creates for ``so`` (validated by :func:`hpa_spec`)."""
    metrics = []
    for trigger in so.triggers:
        target: dict[str, Any] = {"type": trigger.metric_type}
        key = "averageValue" if trigger.metric_type == "AverageValue" else "value"
        target[key] = format_milli(threshold_milli(trigger.threshold))
        metrics.append(
            {
                "type": "External",
                "external": {
                    "metric": {
                        "name": trigger.metric_name,
                        "selector": {"matchLabels": {OWNER_LABEL: so.name}},
                    },
                    "target": target,
                },
            }
        )
    spec: dict[str, Any] = {
        "scaleTargetRef": {
            "apiVersion": so.target_api_version,
            "kind": so.target_kind,
            "name": so.target_name,
        },
        "minReplicas": so.hpa_min_replicas,
        "maxReplicas": so.max_replica_count,
        "metrics": metrics,
    }
    if so.behavior is not None:
        spec["behavior"] = dict(so.behavior)
    labels = {
        "app.kubernetes.io/name": so.hpa_name[:63],
        "app.kubernetes.io/part-of": so.name,
        "app.kubernetes.io/managed-by": "keda-operator",
        **so.labels,
    }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": so.hpa_name,
            "namespace": so.namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "ScaledObject",
                    "name": so.name,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


def hpa_spec(so: ScaledObjectSpec) -> HPASpec:
    return parse_hpa(hpa_object(so))


@dataclass(frozen=True)
class TriggerValue:
    """One trigger's answer: ``value`` as the HPA gets it (milli-units), ``active`` as KEDA's
    scale loop sees it, or ``error`` (KEDA's wording)."""

    metric_name: str
    value_milli: int = 0
    active: bool = False
    error: str = ""
    raw: float = 0.0


def trigger_value(
    trigger: PrometheusTrigger, result: Value | None, error: str = ""
) -> TriggerValue:
    """What KEDA's prometheus scaler makes of a query's result (or of an error querying)."""
    name = trigger.metric_name
    if error:
        return TriggerValue(name, error=error)
    if isinstance(result, Scalar) or result is None:
        return TriggerValue(
            name,
            error="json: cannot unmarshal number into Go struct field .data.result of type "
            "struct { Metric struct {}; Value []interface {} } (KEDA reads only instant vectors; "
            "wrap a scalar query in vector())",
        )
    if not result:
        if trigger.ignore_null_values:
            return TriggerValue(name, 0, trigger.activation_threshold < 0.0, raw=0.0)
        return TriggerValue(
            name, error="prometheus metrics 'prometheus' target may be lost, the result is empty"
        )
    if len(result) > 1:
        return TriggerValue(
            name, error=f"prometheus query {trigger.query} returned multiple elements"
        )
    value = result[0].value
    if math.isnan(value) or math.isinf(value):
        if trigger.ignore_null_values:
            return TriggerValue(name, 0, trigger.activation_threshold < 0.0, raw=0.0)
        return TriggerValue(name, error=f"prometheus query returns {_go_float(value)}")
    return TriggerValue(
        name, threshold_milli(value), value > trigger.activation_threshold, raw=value
    )


def _go_float(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


@dataclass(frozen=True)
class KedaState:
    """What KEDA keeps in the ScaledObject's status between polls."""

    last_active_time: float | None = None
    ready_reported: bool = False
    conditions: tuple[tuple[str, str, str, str], ...] = ()  # (type, status, reason, message)


@dataclass(frozen=True)
class KedaDecision:
    replicas: int | None  # what to write to the target's scale (None: leave it)
    events: tuple[Event, ...]
    state: KedaState
    status: Mapping[str, Any]


def poll(
    so: ScaledObjectSpec,
    state: KedaState,
    current_replicas: int,
    values: Sequence[TriggerValue],
    now: float,
    created_at: float = 0.0,
) -> KedaDecision:
    """One pass of KEDA's scale loop (every ``pollingInterval``): activation and deactivation."""
    ref = f"ScaledObject/{so.namespace}/{so.name}"
    events: list[Event] = []
    conditions = {c[0]: c for c in state.conditions}

    def condition(type_: str, status: str, reason: str, message: str) -> None:
        conditions[type_] = (type_, status, reason, message)

    if not state.ready_reported:
        events.append(
            Event("Normal", "ScaledObjectReady", ref, "ScaledObject is ready for scaling")
        )
    condition(
        "Ready",
        "True",
        "ScaledObjectReady",
        "ScaledObject is defined correctly and is ready for scaling",
    )
    condition(
        "Fallback", "False", "NoFallbackFound", "No fallbacks are active on this scaled object"
    )
    active = [v.metric_name for v in values if v.active]
    is_error = any(v.error for v in values)
    last_active = state.last_active_time
    replicas: int | None = None
    target = f"{so.target_kind_string} {so.namespace}/{so.target_name}"
    if active:
        condition(
            "Active", "True", "ScalerActive", "Scaling is performed because triggers are active"
        )
        below_idle = so.idle_replica_count is not None and current_replicas < so.min_replica_count
        if below_idle or current_replicas == 0:
            replicas = so.min_replica_count if so.min_replica_count > 0 else 1
            events.append(
                Event(
                    "Normal",
                    "KEDAScaleTargetActivated",
                    ref,
                    f"Scaled {target} from {current_replicas} to {replicas}, triggered by "
                    + ";".join(active),
                )
            )
            last_active = now
        elif is_error:
            condition(
                "Ready",
                "Unknown",
                "PartialTriggerError",
                "Some triggers defined in ScaledObject are not working correctly",
            )
        else:
            last_active = now
    else:
        condition(
            "Active",
            "False",
            "ScalerNotActive",
            "Scaling is not performed because triggers are not active",
        )
        above_idle = so.idle_replica_count is not None and current_replicas > so.idle_replica_count
        if is_error:
            condition(
                "Ready",
                "False",
                "TriggerError",
                "Triggers defined in ScaledObject are not working correctly",
            )
        elif above_idle or (current_replicas > 0 and so.min_replica_count == 0):
            cooled = (last_active is None and created_at + so.initial_cooldown_period < now) or (
                last_active is not None and last_active + so.cooldown_period < now
            )
            if cooled:
                replicas = (
                    so.idle_replica_count
                    if so.idle_replica_count is not None
                    else so.min_replica_count
                )
                events.append(
                    Event(
                        "Normal",
                        "KEDAScaleTargetDeactivated",
                        ref,
                        f"Deactivated {target} from {current_replicas} to {replicas}",
                    )
                )
            else:
                condition(
                    "Active",
                    "False",
                    "ScalerCooldown",
                    "Scaler cooling down because triggers are not active",
                )
        elif so.idle_replica_count is None and current_replicas < so.min_replica_count:
            replicas = so.min_replica_count
    new_state = replace(
        state,
        last_active_time=last_active,
        ready_reported=True,
        conditions=tuple(conditions.values()),
    )
    status: dict[str, Any] = {
        "scaleTargetKind": so.target_kind_string,
        "hpaName": so.hpa_name,
        "externalMetricNames": [t.metric_name for t in so.triggers],
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": m}
            for t, s, r, m in new_state.conditions
        ],
        "triggersActivity": {v.metric_name: {"isActive": v.active} for v in values},
    }
    if last_active is not None:
        status["lastActiveTime"] = last_active
    return KedaDecision(replicas, tuple(events), new_state, status)
