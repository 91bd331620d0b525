"""How many replicas one HPA metric asks for: the HPA controller's replica calculator.

Reproduces ``pkg/controller/podautoscaler/replica_calculator.go`` (Kubernetes 1.33+), in the
controller's integer milli-units:

* ``Utilization`` of a resource: usage summed over the pods' metrics, divided by their summed
  requests, truncated to a whole percent, compared with the target. Pods being deleted or Failed
  are ignored; Pending pods count as unready; for CPU, a pod inside its initialization period
  (5 min) is unready unless Ready with a metric sampled after it became Ready, and a pod that
  never was Ready counts as unready. Pods without metrics are assumed to use 0% on a scale up and
  100% (or the target, if above 100%) on a scale down; unready pods 0% on a scale up; the result
  never reverses the direction the measured pods gave.
* ``AverageValue`` of a Pods metric or of a resource: the same, with the plain average.
* ``Value`` of an Object or External metric: ratio against the target, times the number of
  Running and Ready pods (just the ratio, rounded up, when the target has 0 replicas).
* ``AverageValue`` of an Object or External metric (KEDA's default): the metric's total divided
  by the per-pod target, rounded up — independent of how many pods run now.

A ratio within the tolerance (default 10% either way, inclusive) keeps the current count.
Errors carry the controller's wording. Not reproduced: pod-level resources (KEP-2837) and
restartable init containers' requests.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: The largest replica count the controller computes (int32).
MAX_INT32 = 2**31 - 1


class MetricError(Exception):
    """The metric could not give a replica count; the message is the controller's."""


@dataclass(frozen=True)
class Tolerances:
    """How far the usage ratio may stray from 1 before the count changes (both inclusive)."""

    scale_down: float = 0.1
    scale_up: float = 0.1

    def within(self, ratio: float) -> bool:
        return (1.0 - self.scale_down) <= ratio <= (1.0 + self.scale_up)


@dataclass(frozen=True)
class PodState:
    """One pod of the scale target, as the HPA's pod lister sees it. ``ready`` is the Ready
    condition's status (None: no such condition); times are seconds on the simulated clock;
    ``requests`` is container -> resource -> milli-units."""

    name: str
    phase: str = "Running"
    ready: bool | None = True
    ready_since: float = 0.0
    start_time: float | None = 0.0
    deleting: bool = False
    requests: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class PodMetric:
    """A resource usage sample of one pod: milli-units, per container."""

    containers: Mapping[str, int]
    timestamp: float = 0.0
    window: float = 60.0

    def value(self, container: str = "") -> int | None:
        if container:
            return self.containers.get(container)
        return sum(self.containers.values())


@dataclass(frozen=True)
class CalculatorConfig:
    """The kube-controller-manager flags the calculator reads."""

    cpu_initialization_period: float = (
        300.0  # --horizontal-pod-autoscaler-cpu-initialization-period
    )
    initial_readiness_delay: float = 30.0  # --horizontal-pod-autoscaler-initial-readiness-delay


@dataclass(frozen=True)
class Proposal:
    """What one metric proposes: ``usage`` is the current value the HPA's status shows
    (milli-units, per pod for averages); ``utilization`` the percentage for Utilization."""

    replicas: int
    usage: int
    utilization: int | None = None


def _ceil_replicas(value: float) -> int:
    return MAX_INT32 if value > MAX_INT32 else math.ceil(value)


def group_pods(
    pods: Sequence[PodState],
    metrics: Mapping[str, object],
    resource: str,
    now: float,
    config: CalculatorConfig,
    cpu_metrics: Mapping[str, PodMetric] | None = None,
) -> tuple[int, set[str], set[str], set[str]]:
    """(ready count, unready, missing, ignored) pod names, as the controller's groupPods."""
    ready = 0
    unready: set[str] = set()
    missing: set[str] = set()
    ignored: set[str] = set()
    for pod in pods:
        if pod.deleting or pod.phase == "Failed":
            ignored.add(pod.name)
            continue
        if pod.phase == "Pending":
            unready.add(pod.name)
            continue
        if pod.name not in metrics:
            missing.add(pod.name)
            continue
        if resource == "cpu":
            metric = (cpu_metrics or {}).get(pod.name)
            if pod.ready is None or pod.start_time is None:
                is_unready = True
            elif pod.start_time + config.cpu_initialization_period > now:
                stale = metric is not None and metric.timestamp < pod.ready_since + metric.window
                is_unready = pod.ready is False or stale
            else:
                never_ready = pod.start_time + config.initial_readiness_delay > pod.ready_since
                is_unready = pod.ready is False and never_ready
            if is_unready:
                unready.add(pod.name)
                continue
        ready += 1
    return ready, unready, missing, ignored


def _requests(pods: Sequence[PodState], container: str, resource: str) -> dict[str, int]:
    out = {}
    for pod in pods:
        total = 0
        found = False
        for name, requests in pod.requests.items():
            if container and name != container:
                continue
            found = True
            if resource not in requests:
                raise MetricError(
                    f"missing request for {resource} in container {name} of Pod {pod.name}"
                )
            total += requests[resource]
        if container and not found:
            raise MetricError(f"container {container} not found in Pod {pod.name}")
        if not pod.requests and not container:
            raise MetricError(f"missing request for {resource} in Pod {pod.name}")
        out[pod.name] = total
    return out


def _utilization_ratio(
    metrics: Mapping[str, int], requests: Mapping[str, int], target: int
) -> tuple[float, int, int]:
    used = requested = entries = 0
    for name, value in metrics.items():
        if name not in requests:
            continue  # metrics of pods the lister does not know: ignored
        used += value
        requested += requests[name]
        entries += 1
    if requested == 0:
        raise MetricError("no metrics returned matched known pods")
    utilization = used * 100 // requested
    return utilization / target, utilization, used // entries


def resource_utilization(
    current: int,
    target_utilization: int,
    resource: str,
    pods: Sequence[PodState],
    usage: Mapping[str, PodMetric],
    now: float,
    tolerances: Tolerances = Tolerances(),
    config: CalculatorConfig = CalculatorConfig(),
    container: str = "",
) -> Proposal:
    """``Resource``/``ContainerResource`` metrics with a ``Utilization`` target."""
    if not usage:
        raise MetricError(
            f"unable to get metrics for resource {resource}: no metrics returned from resource "
            "metrics API"
        )
    if not pods:
        raise MetricError("no pods returned by selector while calculating replica count")
    metrics: dict[str, int] = {}
    for name, metric in usage.items():
        value = metric.value(container)
        if value is not None:
            metrics[name] = value
    ready, unready, missing, ignored = group_pods(pods, metrics, resource, now, config, usage)
    for name in ignored | unready:
        metrics.pop(name, None)
    if not metrics:
        raise MetricError("did not receive metrics for targeted pods (pods might be unready)")
    requests = _requests(pods, container, resource)
    ratio, utilization, raw = _utilization_ratio(metrics, requests, target_utilization)
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        if tolerances.within(ratio):
            return Proposal(current, raw, utilization)
        return Proposal(_ceil_replicas(ratio * ready), raw, utilization)
    if missing:
        if ratio < 1.0:
            fallback = max(100, target_utilization)
            for name in missing:
                metrics[name] = requests[name] * fallback // 100
        elif ratio > 1.0:
            for name in missing:
                metrics[name] = 0
    if scale_up_with_unready:
        for name in unready:
            metrics[name] = 0
    new_ratio, _, _ = _utilization_ratio(metrics, requests, target_utilization)
    return Proposal(
        _rebalanced(current, ratio, new_ratio, len(metrics), tolerances), raw, utilization
    )


def _rebalanced(
    current: int, ratio: float, new_ratio: float, counted: int, tolerances: Tolerances
) -> int:
    if tolerances.within(new_ratio) or (ratio < 1.0 < new_ratio) or (new_ratio < 1.0 < ratio):
        return current  # too small a change, or the assumptions reversed the direction
    replicas = _ceil_replicas(new_ratio * counted)
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return current
    return replicas


def plain_metric(
    current: int,
    target: int,
    pods: Sequence[PodState],
    metrics_in: Mapping[str, int],
    now: float,
    tolerances: Tolerances = Tolerances(),
    config: CalculatorConfig = CalculatorConfig(),
    resource: str = "",
) -> Proposal:
    """``Pods`` metrics (and resources with an ``AverageValue`` target): per-pod average."""
    if not pods:
        raise MetricError("no pods returned by selector while calculating replica count")
    metrics = dict(metrics_in)
    ready, unready, missing, ignored = group_pods(pods, metrics, resource, now, config)
    for name in ignored | unready:
        metrics.pop(name, None)
    if not metrics:
        raise MetricError("did not receive metrics for targeted pods (pods might be unready)")
    usage = sum(metrics.values()) // len(metrics)
    ratio = usage / target
    scale_up_with_unready = bool(unready) and ratio > 1.0
    if not scale_up_with_unready and not missing:
        if tolerances.within(ratio):
            return Proposal(current, usage)
        return Proposal(_ceil_replicas(ratio * ready), usage)
    if missing:
        for name in missing:
            if ratio < 1.0:
                metrics[name] = target
            elif ratio > 1.0:
                metrics[name] = 0
    if scale_up_with_unready:
        for name in unready:
            metrics[name] = 0
    new_ratio = (sum(metrics.values()) // len(metrics)) / target
    return Proposal(_rebalanced(current, ratio, new_ratio, len(metrics), tolerances), usage)


def ready_pod_count(pods: Sequence[PodState]) -> int:
    if not pods:
        raise MetricError("no pods returned by selector while calculating replica count")
    return sum(1 for p in pods if p.phase == "Running" and p.ready is True)


def _usage_ratio_replicas(
    current: int, ratio: float, pods: Sequence[PodState], tolerances: Tolerances
) -> int:
    if current == 0:
        return math.ceil(ratio)  # scale from zero: no pods to count
    if tolerances.within(ratio):
        return current
    try:
        ready = ready_pod_count(pods)
    except MetricError as exc:
        raise MetricError(f"unable to calculate ready pods: {exc}") from None
    return _ceil_replicas(ratio * ready)


def object_value(
    current: int,
    target: int,
    value: int,
    pods: Sequence[PodState],
    tolerances: Tolerances = Tolerances(),
) -> Proposal:
    """An ``Object`` metric with a ``Value`` target."""
    return Proposal(_usage_ratio_replicas(current, value / target, pods, tolerances), value)


def object_average_value(
    status_replicas: int, target: int, value: int, tolerances: Tolerances = Tolerances()
) -> Proposal:
    """An ``Object`` metric with an ``AverageValue`` target."""
    replicas = status_replicas
    ratio = value / (target * replicas) if replicas else math.inf
    if not tolerances.within(ratio):
        replicas = _ceil_replicas(value / target)
    usage = math.ceil(value / status_replicas) if status_replicas else value
    return Proposal(replicas, usage)


def _total(values: Sequence[int]) -> int:
    return min(sum(values), 2**63 - 1)


def external_value(
    current: int,
    target: int,
    values: Sequence[int],
    pods: Sequence[PodState],
    tolerances: Tolerances = Tolerances(),
) -> Proposal:
    """An ``External`` metric with a ``Value`` target: the sum of the metric's values."""
    usage = _total(values)
    return Proposal(_usage_ratio_replicas(current, usage / target, pods, tolerances), usage)


def external_average_value(
    status_replicas: int, target: int, values: Sequence[int], tolerances: Tolerances = Tolerances()
) -> Proposal:
    """An ``External`` metric with an ``AverageValue`` target (KEDA's default): the total over
    the per-pod target, whatever the current count, unless within the tolerance."""
    usage = _total(values)
    replicas = status_replicas
    ratio = usage / (target * replicas) if replicas else math.inf
    if not tolerances.within(ratio):
        replicas = _ceil_replicas(usage / target)
    per_pod = math.ceil(usage / status_replicas) if status_replicas else usage
    return Proposal(replicas, per_pod)
