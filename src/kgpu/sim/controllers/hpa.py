"""kube-controller-manager's horizontal-pod-autoscaler controller in the simulated cluster,
driving :func:`kgpu.autoscaling.hpa.reconcile` on the clock.

Every ``autoscaling/v2`` HorizontalPodAutoscaler (the ones KEDA creates and the user's own) is
synced when it appears and then every 15 s (``--horizontal-pod-autoscaler-sync-period``): its
target's scale subresource is read (:mod:`kgpu.sim.controllers.scale`), each metric is asked
of the API that serves it, the controller's decision is taken with the state it remembers
(recommendations for the stabilization window, scale events for the policies), the new
replica count written to the target, events recorded (``SuccessfulRescale`` "New size: 2;
reason: ...", ``FailedGetScale``, ``FailedGetExternalMetric``...) and the status written.

Which metrics API answers: External metrics of a ScaledObject's HPA come from KEDA's metrics
adapter (:meth:`kgpu.sim.controllers.keda.KedaController.external_metric`). The simulated
cluster runs no metrics-server and no custom-metrics adapter, so ``Resource`` and
``ContainerResource`` metrics (CPU, memory), ``Pods``, ``Object`` and other ``External`` metrics
fail as they do on such a cluster (``FailedGetResourceMetric`` ...), and the HPA keeps the
replicas it has. ``autoscaling/v1`` HPAs are stored but not synced (a warning says so).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kgpu.autoscaling.hpa import HPAState, Reading, Target, reconcile
from kgpu.autoscaling.hpa_spec import HPASpec, MetricSpec, parse_hpa
from kgpu.autoscaling.replicas import PodState
from kgpu.errors import FieldError
from kgpu.sim.context import SimContext, time_string
from kgpu.sim.controllers.base import meta_of
from kgpu.sim.controllers.scale import ScaleError, get_scale, selected_pods, set_replicas
from kgpu.sim.controllers.specs import changed_specs, first_report, write_status
from kgpu.sim.loops import HPA
from kgpu.sim.plugins import Event

Obj = dict[str, Any]
API = "autoscaling/v2"
SYNC_PERIOD = 15.0

#: ``(namespace, metric name, selector) -> Reading``: an External metrics API.
ExternalMetrics = Callable[[str, str, Mapping[str, Any] | None], Reading]

_NO_API = {
    "Resource": "no metrics returned from resource metrics API (the simulated cluster runs no "
    "metrics-server)",
    "ContainerResource": "no metrics returned from resource metrics API (the simulated cluster "
    "runs no metrics-server)",
    "Pods": "the server could not find the requested resource (the simulated cluster serves "
    "no custom metrics)",
    "Object": "the server could not find the requested resource (the simulated cluster serves "
    "no custom metrics)",
}


@dataclass
class _Synced:
    uid: str
    spec: HPASpec
    raw_spec: Obj
    state: HPAState = field(default_factory=HPAState)


class HPAController:
    """The horizontal-pod-autoscaler controller (a :class:`~kgpu.sim.plugins.Controller`)."""

    name = "horizontal-pod-autoscaler"

    def __init__(self, ctx: SimContext, external: ExternalMetrics) -> None:
        self.ctx = ctx
        self.external = external
        self.objects: dict[str, _Synced] = {}  # by uid
        self._reported: dict[str, Obj] = {}  # uid -> spec already reported as not synced

    # -- on a change -----------------------------------------------------------------------
    def reconcile(self, store: Any, now: float) -> list[Event]:
        if not self.objects and ("autoscaling", "HorizontalPodAutoscaler") not in (
            self.ctx.store.kinds
        ):
            return []
        events: list[Event] = []
        live: set[str] = set()
        hpas = self.ctx.store.list(API, "HorizontalPodAutoscaler")
        for uid, obj, spec in changed_specs(hpas, self.objects, live):
            meta = meta_of(obj)
            entry = self.objects.get(uid)
            ref = f"HorizontalPodAutoscaler/{meta.get('namespace', 'default')}/{meta['name']}"
            problem = ""
            if obj.get("apiVersion") != API:
                problem = (
                    f"{obj.get('apiVersion')} HorizontalPodAutoscalers are not simulated; write "
                    f"it as {API}"
                )
            else:
                try:
                    parsed = parse_hpa(obj)
                except FieldError as exc:
                    problem = "; ".join(str(p) for p in exc.problems)
            if problem:
                if first_report(self._reported, uid, spec):
                    events.append(Event("Warning", "FailedSync", ref, problem))
                continue
            self._reported.pop(uid, None)
            if entry is None:
                self.objects[uid] = _Synced(uid, parsed, copy.deepcopy(spec))
                self.ctx.loops.at(now, HPA, partial(self._sync, uid))
            else:
                entry.spec, entry.raw_spec = parsed, copy.deepcopy(spec)
        for uid in [u for u in self.objects if u not in live]:
            del self.objects[uid]  # its loop ends at its next sync
        return events

    # -- a sync ----------------------------------------------------------------------------
    def _reading(self, metric: MetricSpec, namespace: str) -> Reading:
        if metric.type == "External":
            return self.external(namespace, metric.name, metric.selector)
        return Reading(error=_NO_API[metric.type])

    def _sync(self, uid: str, now: float) -> bool:
        entry = self.objects.get(uid)
        if entry is None:
            return False
        self.ctx.loops.at(now + SYNC_PERIOD, HPA, partial(self._sync, uid))
        hpa = entry.spec
        ref = f"HorizontalPodAutoscaler/{hpa.key}"
        try:
            scale = get_scale(
                self.ctx, hpa.target_api_version, hpa.target_kind, hpa.target_name, hpa.namespace
            )
        except ScaleError as exc:
            self.ctx.emit("Warning", "FailedGetScale", ref, str(exc))
            return False
        pods = tuple(
            PodState(
                name=rec.name,
                phase=rec.phase,
                ready=rec.phase == "Running",
                ready_since=rec.created_at,
                start_time=rec.created_at if rec.phase != "Pending" else None,
            )
            for rec in selected_pods(self.ctx, scale)
        )
        target = Target(scale.spec_replicas, scale.status_replicas, scale.selector_string, pods)
        readings = [self._reading(m, hpa.namespace) for m in hpa.metrics]
        decision = reconcile(hpa, entry.state, target, readings, now)
        entry.state = decision.state
        for event in decision.events:
            self.ctx.record(Event(event.type, event.reason, event.object, event.message))
        self._write_status(hpa, decision.status)
        if decision.replicas is None or decision.replicas == scale.spec_replicas:
            return False
        set_replicas(self.ctx, scale, decision.replicas)
        return True

    def _write_status(self, hpa: HPASpec, raw: Mapping[str, Any]) -> None:
        status = dict(raw)
        if "lastScaleTime" in status:
            status["lastScaleTime"] = time_string(float(status["lastScaleTime"]))
        status["conditions"] = [
            {**c, "lastTransitionTime": time_string(float(c["lastTransitionTime"]))}
            for c in status.get("conditions") or ()
        ]
        write_status(self.ctx, API, "HorizontalPodAutoscaler", hpa.name, hpa.namespace, status)


__all__ = ["SYNC_PERIOD", "HPAController"]
