"""The HorizontalPodAutoscaler controller's decision, one sync at a time, as pure code.

Reproduces ``pkg/controller/podautoscaler/horizontal.go`` (Kubernetes 1.33+):

* Each sync (``--horizontal-pod-autoscaler-sync-period``, 15 s) reads the target's scale; a
  target at 0 replicas with ``minReplicas`` > 0 is left alone ("scaling is disabled"), one
  outside ``[minReplicas, maxReplicas]`` is brought back inside, otherwise every metric proposes a
  count (:mod:`kgpu.autoscaling.replicas`) and the largest wins. If a metric fails, the others
  still scale up, but nothing scales down.
* Without ``behavior``: the highest recommendation of the last 300 s
  (``--horizontal-pod-autoscaler-downscale-stabilization``) limits scale-downs, and a scale up
  is at most ``max(2 x current, 4)``.
* With ``behavior``: recommendations are stabilized within each direction's window (scale up:
  the lowest of the window, scale down: the highest), then the policies limit the change from
  the count at the start of each policy's period (``Max`` picks the policy allowing the most
  change, ``Min`` the least, ``Disabled`` none), counting the scale events the controller
  remembers; a missing scale-down window is the controller's 300 s.
* The controller's conditions (``AbleToScale``, ``ScalingActive``, ``ScalingLimited``) and
  events (``SuccessfulRescale`` "New size: N; reason: ...", ``FailedGet*Metric``,
  ``FailedComputeMetricsReplicas``) with their reasons and messages; the status it writes.

The state the controller keeps in memory (recommendations, scale events) is
:class:`HPAState`: :func:`reconcile` takes it and returns the next one, so the decision is a pure
function of (spec, state, observations, clock). Not reproduced: the selector-overlap check
(``AmbiguousSelector``), API errors reading the scale, and the rate-limited work queue (the
caller runs a sync every period).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kgpu.autoscaling.events import Event
from kgpu.autoscaling.hpa_spec import (
    HPASpec,
    MetricSpec,
    ScalingRules,
    format_milli,
    label_selector_string,
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

SCALE_UP_LIMIT_FACTOR = 2.0
SCALE_UP_LIMIT_MINIMUM = 4.0


@dataclass(frozen=True)
class ControllerConfig:
    """kube-controller-manager's HPA flags."""

    sync_period: float = 15.0
    downscale_stabilization: float = 300.0
    tolerance: float = 0.1
    calculator: CalculatorConfig = field(default_factory=CalculatorConfig)


@dataclass(frozen=True)
class ScaleEvent:
    change: int  # replicas added (scale up) or removed (scale down), positive
    time: float
    outdated: bool = False


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str
    last_transition: float = 0.0


@dataclass(frozen=True)
class HPAState:
    """What the controller remembers about one HPA between syncs, and the status it wrote."""

    recommendations: tuple[tuple[float, int], ...] = ()  # (time, unstabilized recommendation)
    scale_up_events: tuple[ScaleEvent, ...] = ()
    scale_down_events: tuple[ScaleEvent, ...] = ()
    conditions: tuple[Condition, ...] = ()
    last_scale_time: float | None = None
    current_replicas: int = 0
    desired_replicas: int = 0
    current_metrics: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Reading:
    """What the metrics APIs returned for one ``spec.metrics[]`` entry.

    ``values``: an External metric's items (milli-units); ``value``: an Object metric;
    ``pod_values``: a Pods metric by pod name; ``usage``: resource usage by pod (metrics-server);
    ``error``: why the metrics API could not answer (the caller's words).
    """

    values: tuple[int, ...] = ()
    value: int | None = None
    pod_values: Mapping[str, int] = field(default_factory=dict)
    usage: Mapping[str, PodMetric] = field(default_factory=dict)
    error: str = ""


@dataclass(frozen=True)
class Target:
    """The scale subresource of the target and the pods its selector matches."""

    spec_replicas: int
    status_replicas: int
    selector: str = "app=x"
    pods: tuple[PodState, ...] = ()


@dataclass(frozen=True)
class Decision:
    """One sync's outcome: the replicas to write (None: leave the target alone), the events,
    the new controller state and the HPA status to write."""

    replicas: int | None
    events: tuple[Event, ...]
    state: HPAState
    status: Mapping[str, Any]


def metric_name(spec: MetricSpec) -> str:
    """How the controller names a metric in conditions and events."""
    selector = label_selector_string(spec.selector)
    if spec.type == "External":
        return f"external metric {spec.name}({selector})"
    if spec.type == "Pods":
        return f"pods metric {spec.name}"
    if spec.type == "Object":
        if spec.target.type == "Value":
            return f"{spec.object_kind} metric {spec.name}"
        return f"external metric {spec.name}({selector})"  # sic: upstream says "external"
    if spec.target.type == "AverageValue":
        return f"{spec.name} resource"
    if spec.type == "ContainerResource":
        return f"{spec.name} container resource utilization (percentage of request)"
    return f"{spec.name} resource utilization (percentage of request)"


_FAILED_REASON = {
    "External": "FailedGetExternalMetric",
    "Object": "FailedGetObjectMetric",
    "Pods": "FailedGetPodsMetric",
    "Resource": "FailedGetResourceMetric",
    "ContainerResource": "FailedGetContainerResourceMetric",
}


class _Sync:
    def __init__(self, hpa: HPASpec, state: HPAState, now: float, config: ControllerConfig) -> None:
        self.hpa = hpa
        self.state = state
        self.now = now
        self.config = config
        self.ref = f"HorizontalPodAutoscaler/{hpa.namespace}/{hpa.name}"
        self.events: list[Event] = []
        self.conditions = {c.type: c for c in state.conditions}
        self.recommendations = list(state.recommendations)
        self.up_events = list(state.scale_up_events)
        self.down_events = list(state.scale_down_events)

    def event(self, type_: str, reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, self.ref, message))

    def condition(self, type_: str, status: str, reason: str, message: str) -> None:
        old = self.conditions.get(type_)
        since = old.last_transition if old is not None and old.status == status else self.now
        self.conditions[type_] = Condition(type_, status, reason, message, since)

    # -- metrics ---------------------------------------------------------------------------
    def tolerances(self) -> Tolerances:
        behavior = self.hpa.behavior
        down = up = self.config.tolerance
        if behavior is not None:
            if behavior.scale_down.tolerance is not None:
                down = behavior.scale_down.tolerance
            if behavior.scale_up.tolerance is not None:
                up = behavior.scale_up.tolerance
        return Tolerances(down, up)

    def propose(self, spec: MetricSpec, reading: Reading, target: Target) -> Proposal:
        tol = self.tolerances()
        calc = self.config.calculator
        goal = spec.target
        if spec.type == "External":
            if reading.error:
                selector = label_selector_string(spec.selector)
                raise MetricError(
                    f"unable to get external metric {self.hpa.namespace}/{spec.name}/{selector}: "
                    f"unable to fetch metrics from external metrics API: {reading.error}"
                )
            if goal.type == "AverageValue":
                assert goal.average_value_milli is not None
                return external_average_value(
                    target.status_replicas, goal.average_value_milli, reading.values, tol
                )
            assert goal.value_milli is not None
            return external_value(
                target.spec_replicas, goal.value_milli, reading.values, target.pods, tol
            )
        if reading.error:
            raise MetricError(f"unable to get metric {spec.name}: {reading.error}")
        if spec.type == "Object":
            if reading.value is None:
                raise MetricError(f"unable to get metric {spec.name}: no value")
            if goal.type == "AverageValue":
                assert goal.average_value_milli is not None
                return object_average_value(
                    target.status_replicas, goal.average_value_milli, reading.value, tol
                )
            assert goal.value_milli is not None
            return object_value(
                target.spec_replicas, goal.value_milli, reading.value, target.pods, tol
            )
        if spec.type == "Pods":
            assert goal.average_value_milli is not None
            return plain_metric(
                target.spec_replicas,
                goal.average_value_milli,
                target.pods,
                reading.pod_values,
                self.now,
                tol,
                calc,
            )
        container = spec.container
        if goal.type == "AverageValue":
            assert goal.average_value_milli is not None
            values = {
                name: v
                for name, m in reading.usage.items()
                if (v := m.value(container)) is not None
            }
            if not reading.usage:
                raise MetricError(
                    f"unable to get metrics for resource {spec.name}: no metrics returned from "
                    "resource metrics API"
                )
            return plain_metric(
                target.spec_replicas,
                goal.average_value_milli,
                target.pods,
                values,
                self.now,
                tol,
                calc,
                spec.name,
            )
        assert goal.average_utilization is not None
        return resource_utilization(
            target.spec_replicas,
            goal.average_utilization,
            spec.name,
            target.pods,
            reading.usage,
            self.now,
            tol,
            calc,
            container,
        )

    def wrap_error(self, spec: MetricSpec, exc: MetricError) -> str:
        """The error as computeReplicasForMetric returns it (what FailedComputeMetricsReplicas
        shows); the FailedGet* event shows the inner message."""
        inner = str(exc)
        if spec.type == "External":
            middle = (
                f"failed to get {spec.name} external metric: {inner}"
                if spec.target.type == "AverageValue"
                else f"failed to get external metric {spec.name}: {inner}"
            )
            return f"failed to get {spec.name} external metric value: {middle}"
        if spec.type == "Object":
            return f"failed to get object metric value: {inner}"
        if spec.type == "Pods":
            return f"failed to get pods metric value: {inner}"
        if spec.type == "ContainerResource":
            return f"failed to get {spec.name} container metric value: {inner}"
        kind = "usage" if spec.target.type == "AverageValue" else "utilization"
        return (
            f"failed to get {spec.name} resource metric value: failed to get {spec.name} {kind}: "
            f"{inner}"
        )

    def metric_status(self, spec: MetricSpec, proposal: Proposal) -> dict[str, Any]:
        quantity = format_milli
        ident: dict[str, Any] = {"name": spec.name}
        if spec.selector is not None:
            ident["selector"] = dict(spec.selector)
        if spec.type == "External":
            key = "averageValue" if spec.target.type == "AverageValue" else "value"
            return {
                "type": "External",
                "external": {"metric": ident, "current": {key: quantity(proposal.usage)}},
            }
        if spec.type == "Object":
            key = "averageValue" if spec.target.type == "AverageValue" else "value"
            obj = {
                "kind": spec.object_kind,
                "name": spec.object_name,
                "apiVersion": spec.object_api_version,
            }
            return {
                "type": "Object",
                "object": {
                    "describedObject": obj,
                    "metric": ident,
                    "current": {key: quantity(proposal.usage)},
                },
            }
        if spec.type == "Pods":
            return {
                "type": "Pods",
                "pods": {"metric": ident, "current": {"averageValue": quantity(proposal.usage)}},
            }
        current: dict[str, Any] = {"averageValue": quantity(proposal.usage)}
        if proposal.utilization is not None:
            current["averageUtilization"] = proposal.utilization
        return {"type": spec.type, "resource": {"name": spec.name, "current": current}}

    def compute(
        self, target: Target, readings: Sequence[Reading]
    ) -> tuple[int, str, list[Mapping[str, Any]], str]:
        """(replicas, metric name, statuses, error): replicas -1 when nothing may be done."""
        replicas = 0
        name = ""
        statuses: list[Mapping[str, Any]] = []
        invalid = 0
        first_error = ""
        first_condition: tuple[str, str] | None = None
        for spec, reading in zip(self.hpa.metrics, readings, strict=True):
            try:
                proposal = self.propose(spec, reading, target)
            except MetricError as exc:
                reason = _FAILED_REASON[spec.type]
                self.event("Warning", reason, str(exc))
                if invalid == 0:
                    first_error = self.wrap_error(spec, exc)
                    first_condition = (
                        reason,
                        f"the HPA was unable to compute the replica count: {exc}",
                    )
                invalid += 1
                statuses.append({})
                continue
            statuses.append(self.metric_status(spec, proposal))
            if replicas == 0 or proposal.replicas > replicas:
                replicas = proposal.replicas
                name = metric_name(spec)
        error = ""
        if invalid:
            error = (
                f"invalid metrics ({invalid} invalid out of {len(self.hpa.metrics)}), first error "
                f"is: {first_error}"
            )
        if invalid >= len(self.hpa.metrics) or (invalid and replicas < target.spec_replicas):
            assert first_condition is not None
            self.condition("ScalingActive", "False", *first_condition)
            return -1, "", statuses, error
        self.condition(
            "ScalingActive",
            "True",
            "ValidMetricFound",
            f"the HPA was able to successfully calculate a replica count from {name}",
        )
        return replicas, name, statuses, error

    # -- normalization ---------------------------------------------------------------------
    def stabilize_without_behavior(self, desired: int) -> int:
        cutoff = self.now - self.config.downscale_stabilization
        best = desired
        old_index = None
        for i, (t, rec) in enumerate(self.recommendations):
            if t < cutoff:
                old_index = i
            elif rec > best:
                best = rec
        if old_index is not None:
            self.recommendations[old_index] = (self.now, desired)
        else:
            self.recommendations.append((self.now, desired))
        return best

    def normalize_without_behavior(self, current: int, desired: int, minimum: int) -> int:
        stabilized = self.stabilize_without_behavior(desired)
        if stabilized != desired:
            self.condition(
                "AbleToScale",
                "True",
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest "
                "recent recommendation",
            )
        else:
            self.condition(
                "AbleToScale", "True", "ReadyForNewScale", "recommended size matches current size"
            )
        limited, reason, message = convert_with_rules(
            current, stabilized, minimum, self.hpa.max_replicas
        )
        self.condition(
            "ScalingLimited", "False" if limited == stabilized else "True", reason, message
        )
        return limited

    def down_rules(self) -> ScalingRules:
        assert self.hpa.behavior is not None
        rules = self.hpa.behavior.scale_down
        if rules.stabilization_window_seconds is None:
            return replace(
                rules, stabilization_window_seconds=int(self.config.downscale_stabilization)
            )
        return rules

    def stabilize_with_behavior(self, current: int, desired: int) -> tuple[int, str, str]:
        assert self.hpa.behavior is not None
        up_window = self.hpa.behavior.scale_up.stabilization_window_seconds or 0
        down_window = self.down_rules().stabilization_window_seconds or 0
        up_cutoff = self.now - up_window
        down_cutoff = self.now - down_window
        up_rec = down_rec = desired
        old_index = None
        for i, (t, rec) in enumerate(self.recommendations):
            if t > up_cutoff:
                up_rec = min(rec, up_rec)
            if t > down_cutoff:
                down_rec = max(rec, down_rec)
            if t < up_cutoff and t < down_cutoff:
                old_index = i
        recommendation = max(current, up_rec)
        recommendation = min(recommendation, down_rec)
        if old_index is not None:
            self.recommendations[old_index] = (self.now, desired)
        else:
            self.recommendations.append((self.now, desired))
        if desired >= current:
            return (
                recommendation,
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent "
                "recommendation",
            )
        return (
            recommendation,
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent "
            "recommendation",
        )

    def normalize_with_behavior(self, current: int, desired: int, minimum: int) -> int:
        assert self.hpa.behavior is not None
        stabilized, reason, message = self.stabilize_with_behavior(current, desired)
        if stabilized != desired:
            self.condition("AbleToScale", "True", reason, message)
        else:
            self.condition(
                "AbleToScale", "True", "ReadyForNewScale", "recommended size matches current size"
            )
        limited, reason, message = convert_with_behavior_rate(
            current,
            stabilized,
            minimum,
            self.hpa.max_replicas,
            self.hpa.behavior.scale_up,
            self.down_rules(),
            self.up_events,
            self.down_events,
            self.now,
        )
        self.condition(
            "ScalingLimited", "False" if limited == stabilized else "True", reason, message
        )
        return limited

    def store_scale_event(self, previous: int, new: int) -> None:
        if self.hpa.behavior is None:
            return
        if new > previous:
            rules, events, change = self.hpa.behavior.scale_up, self.up_events, new - previous
        else:
            rules, events, change = self.down_rules(), self.down_events, previous - new
        store_scale_event(events, rules, change, self.now)

    # -- the sync --------------------------------------------------------------------------
    def run(self, target: Target, readings: Sequence[Reading]) -> Decision:
        self.condition(
            "AbleToScale",
            "True",
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale",
        )
        current = target.spec_replicas
        if not self.recommendations:
            self.recommendations.append((self.now, current))
        minimum = self.hpa.min_replicas
        statuses: list[Mapping[str, Any]] = list(self.state.current_metrics)
        desired = 0
        reason = ""
        rescale = True
        if current == 0 and minimum != 0:
            rescale = False
            self.condition(
                "ScalingActive",
                "False",
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero",
            )
        elif current > self.hpa.max_replicas:
            reason = "Current number of replicas above Spec.MaxReplicas"
            desired = self.hpa.max_replicas
        elif current < minimum:
            reason = "Current number of replicas below Spec.MinReplicas"
            desired = minimum
        else:
            proposed, name, statuses, error = self.compute(target, readings)
            if error and proposed == -1:
                self.event("Warning", "FailedComputeMetricsReplicas", error)
                return self.finish(target, current, self.state.desired_replicas, statuses, False)
            rescale_metric = ""
            if proposed > desired:
                desired = proposed
                rescale_metric = name
            if desired > current:
                reason = f"{rescale_metric} above target"
            if desired < current:
                reason = "All metrics below target"
            if self.hpa.behavior is None:
                desired = self.normalize_without_behavior(current, desired, minimum)
            else:
                desired = self.normalize_with_behavior(current, desired, minimum)
            rescale = desired != current
        if rescale:
            self.condition(
                "AbleToScale",
                "True",
                "SucceededRescale",
                f"the HPA controller was able to update the target scale to {desired}",
            )
            self.event("Normal", "SuccessfulRescale", f"New size: {desired}; reason: {reason}")
            self.store_scale_event(current, desired)
            return self.finish(target, current, desired, statuses, True)
        return self.finish(target, current, current, statuses, False)

    def finish(
        self,
        target: Target,
        current: int,
        desired: int,
        statuses: Sequence[Mapping[str, Any]],
        rescaled: bool,
    ) -> Decision:
        last_scale = self.now if rescaled else self.state.last_scale_time
        state = HPAState(
            recommendations=tuple(self.recommendations),
            scale_up_events=tuple(self.up_events),
            scale_down_events=tuple(self.down_events),
            conditions=tuple(self.conditions.values()),
            last_scale_time=last_scale,
            current_replicas=current,
            desired_replicas=desired,
            current_metrics=tuple(statuses),
        )
        status: dict[str, Any] = {
            "currentReplicas": current,
            "desiredReplicas": desired,
            "currentMetrics": [dict(s) for s in statuses],
            "conditions": [
                {
                    "type": c.type,
                    "status": c.status,
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": c.last_transition,
                }
                for c in state.conditions
            ],
        }
        if last_scale is not None:
            status["lastScaleTime"] = last_scale
        return Decision(desired if rescaled else None, tuple(self.events), state, status)


def convert_with_rules(
    current: int, desired: int, minimum: int, maximum: int
) -> tuple[int, str, str]:
    """Limits without ``behavior``: at least ``minimum``, at most ``maximum`` and at most
    ``max(2 x current, 4)``; with the ScalingLimited reason and message."""
    scale_up_limit = int(max(SCALE_UP_LIMIT_FACTOR * current, SCALE_UP_LIMIT_MINIMUM))
    ceiling, reason, message = _ceiling(scale_up_limit, maximum)
    if desired < minimum:
        return (
            minimum,
            "TooFewReplicas",
            "the desired replica count is less than the minimum replica count",
        )
    if desired > ceiling:
        return ceiling, reason, message
    return desired, "DesiredWithinRange", "the desired count is within the acceptable range"


def _ceiling(rate_limit: int, maximum: int) -> tuple[int, str, str]:
    """The most replicas allowed, the scale-up rate's ``rate_limit`` or ``maximum`` (the lower),
    with the ScalingLimited reason and message should the desired count exceed it."""
    if maximum > rate_limit:
        return (
            rate_limit,
            "ScaleUpLimit",
            "the desired replica count is increasing faster than the maximum scale rate",
        )
    return (
        maximum,
        "TooManyReplicas",
        "the desired replica count is more than the maximum replica count",
    )


def replicas_changed_in(period: float, events: Sequence[ScaleEvent], now: float) -> int:
    """Replicas added (or removed) by the events strictly inside the last ``period`` seconds."""
    cutoff = now - period
    return sum(e.change for e in events if e.time > cutoff)


def scale_up_limit(
    current: int,
    up: Sequence[ScaleEvent],
    down: Sequence[ScaleEvent],
    rules: ScalingRules,
    now: float,
) -> int:
    """The most replicas the scale-up policies allow now."""
    return _policy_limit(current, up, down, rules, now, scale_up=True)


def scale_down_limit(
    current: int,
    up: Sequence[ScaleEvent],
    down: Sequence[ScaleEvent],
    rules: ScalingRules,
    now: float,
) -> int:
    """The fewest replicas the scale-down policies allow now."""
    return _policy_limit(current, up, down, rules, now, scale_up=False)


def _policy_limit(
    current: int,
    up: Sequence[ScaleEvent],
    down: Sequence[ScaleEvent],
    rules: ScalingRules,
    now: float,
    *,
    scale_up: bool,
) -> int:
    """What the policies of one direction allow: each policy proposes a count from the
    replicas at the start of its period; ``selectPolicy`` Max takes the proposal that moves
    furthest (the most replicas up, the fewest down), Min the one that moves least."""
    if rules.select_policy == "Disabled":
        return current
    furthest = max if scale_up else min
    nearest = min if scale_up else max
    pick = nearest if rules.select_policy == "Min" else furthest
    result: int | None = None
    for policy in rules.policies:
        start = (
            current
            - replicas_changed_in(policy.period_seconds, up, now)
            + replicas_changed_in(policy.period_seconds, down, now)
        )
        if policy.type == "Pods":
            proposed = start + policy.value if scale_up else start - policy.value
        elif scale_up:
            proposed = math.ceil(start * (1 + policy.value / 100))
        else:
            proposed = int(start * (1 - policy.value / 100))
        result = proposed if result is None else pick(result, proposed)
    return current if result is None else result


def convert_with_behavior_rate(
    current: int,
    desired: int,
    minimum: int,
    maximum: int,
    up_rules: ScalingRules,
    down_rules: ScalingRules,
    up_events: Sequence[ScaleEvent],
    down_events: Sequence[ScaleEvent],
    now: float,
) -> tuple[int, str, str]:
    """The behavior's rate limits and min/max; with the ScalingLimited reason and message."""
    if desired > current:
        limit = max(scale_up_limit(current, up_events, down_events, up_rules, now), current)
        ceiling, reason, message = _ceiling(limit, maximum)
        if desired > ceiling:
            return ceiling, reason, message
    elif desired < current:
        limit = min(scale_down_limit(current, up_events, down_events, down_rules, now), current)
        if minimum < limit:
            floor = limit
            reason, message = (
                "ScaleDownLimit",
                "the desired replica count is decreasing faster than the maximum scale rate",
            )
        else:
            floor = minimum
            reason, message = (
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            )
        if desired < floor:
            return floor, reason, message
    return desired, "DesiredWithinRange", "the desired count is within the acceptable range"


def store_scale_event(
    events: list[ScaleEvent], rules: ScalingRules, change: int, now: float
) -> None:
    """Remember a scale event, reusing the slot of one older than the longest policy period."""
    longest = max((p.period_seconds for p in rules.policies), default=0)
    cutoff = now - longest
    slot = None
    for i, event in enumerate(events):
        if event.time < cutoff:
            events[i] = replace(event, outdated=True)
        if events[i].outdated:
            slot = i
    new = ScaleEvent(change, now)
    if slot is not None:
        events[slot] = new
    else:
        events.append(new)


def reconcile(
    hpa: HPASpec,
    state: HPAState,
    target: Target,
    readings: Sequence[Reading],
    now: float,
    config: ControllerConfig = ControllerConfig(),
) -> Decision:
    """One sync of one HPA: ``readings`` line up with ``hpa.metrics``."""
    if len(readings) != len(hpa.metrics):
        raise ValueError(f"{len(readings)} readings for {len(hpa.metrics)} metrics")
    return _Sync(hpa, state, now, config).run(target, readings)
