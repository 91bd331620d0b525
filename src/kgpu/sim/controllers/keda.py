"""KEDA's operator and metrics adapter in the simulated cluster, driving
:mod:`kgpu.autoscaling.keda` on the clock.

* On a change (every settle round, as KEDA's informers would): each ScaledObject
  (``keda.sh/v1alpha1``) is parsed as KEDA's webhook checks it, and its HPA
  ``keda-hpa-<name>`` (:func:`~kgpu.autoscaling.keda.hpa_object`, owned by the ScaledObject) is
  created or brought up to date; a ScaledObject deleted takes its HPA with it. Its queries are
  handed to the cluster's Prometheus (:class:`~kgpu.sim.prometheus.SimPrometheus`) so their
  series are recorded.
* Every ``pollingInterval`` from its creation (KEDA's scale loop): each trigger's query is
  evaluated on the Prometheus history, and :func:`~kgpu.autoscaling.keda.poll` decides
  activation (0 -> ``minReplicaCount`` or 1) and deactivation after ``cooldownPeriod``; events
  ``KEDAScaleTargetActivated`` / ``KEDAScaleTargetDeactivated`` and the status' conditions.
* The metrics adapter: when the HPA controller asks for the External metric ``s<i>-prometheus``
  of a ScaledObject, the trigger's query is evaluated at that moment
  (:meth:`KedaController.external_metric`), as KEDA does without ``useCachedMetrics``.

Triggers other than ``prometheus``, ``fallback`` and ``scalingModifiers`` are not simulated: a
``Warning KEDAScalerNotSimulated`` event says so once per ScaledObject.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kgpu.autoscaling.hpa import Reading
from kgpu.autoscaling.keda import (
    API_VERSION,
    OWNER_LABEL,
    KedaState,
    PrometheusTrigger,
    ScaledObjectSpec,
    TriggerValue,
    hpa_object,
    parse_scaled_object,
    poll,
    trigger_value,
)
from kgpu.errors import FieldError
from kgpu.promql import PromQLError
from kgpu.sim.context import SimContext, time_string
from kgpu.sim.controllers.base import meta_of
from kgpu.sim.controllers.scale import ScaleError, get_scale, set_replicas
from kgpu.sim.controllers.specs import changed_specs, first_report, write_status
from kgpu.sim.loops import KEDA
from kgpu.sim.plugins import Event
from kgpu.sim.prometheus import SimPrometheus
from kgpu.store import NotFound

Obj = dict[str, Any]
HPA_API = "autoscaling/v2"


@dataclass
class _Scaled:
    uid: str
    spec: ScaledObjectSpec
    raw_spec: Obj
    created_at: float
    state: KedaState = field(default_factory=KedaState)


class KedaController:
    """The keda-operator (a :class:`~kgpu.sim.plugins.Controller`) and its metrics adapter."""

    name = "keda-operator"

    def __init__(self, ctx: SimContext, prometheus: SimPrometheus) -> None:
        self.ctx = ctx
        self.prometheus = prometheus
        self.objects: dict[str, _Scaled] = {}  # by uid
        self._invalid: dict[str, Obj] = {}  # uid -> the spec already reported as invalid

    def expect(self, manifests: Iterable[Mapping[str, Any]]) -> None:
        """Hand Prometheus the queries of the ScaledObjects a scenario will apply, so the
        series they read are recorded from the start (a real Prometheus scrapes before anyone
        asks)."""
        for obj in manifests:
            if obj.get("kind") != "ScaledObject" or obj.get("apiVersion") != API_VERSION:
                continue
            try:
                so = parse_scaled_object(obj)
            except FieldError:
                continue
            self.prometheus.watch(t.expr for t in so.triggers)

    # -- on a change -----------------------------------------------------------------------
    def reconcile(self, store: Any, now: float) -> list[Event]:
        if not self.objects and ("keda.sh", "ScaledObject") not in self.ctx.store.kinds:
            return []
        events: list[Event] = []
        live: set[str] = set()
        scaled_objects = self.ctx.store.list(API_VERSION, "ScaledObject")
        for uid, obj, spec in changed_specs(scaled_objects, self.objects, live):
            meta = meta_of(obj)
            entry = self.objects.get(uid)
            try:
                so = parse_scaled_object(obj)
            except FieldError as exc:  # written by something that skipped validation
                if first_report(self._invalid, uid, spec):
                    events.append(
                        Event(
                            "Warning",
                            "ScaledObjectCheckFailed",
                            f"ScaledObject/{meta.get('namespace', 'default')}/{meta['name']}",
                            "; ".join(str(p) for p in exc.problems),
                        )
                    )
                continue
            self._invalid.pop(uid, None)
            if entry is None:
                entry = self.objects[uid] = _Scaled(uid, so, copy.deepcopy(spec), now)
                self.ctx.loops.at(now, KEDA, partial(self._poll, uid))
                events.extend(
                    Event("Warning", "KEDAScalerNotSimulated", f"ScaledObject/{so.key}", note)
                    for note in so.not_simulated
                )
            else:
                entry.spec, entry.raw_spec = so, copy.deepcopy(spec)
            self.prometheus.watch(t.expr for t in so.triggers)
            self._ensure_hpa(entry)
        for uid in [u for u in self.objects if u not in live]:
            gone = self.objects.pop(uid)
            with self.ctx.store.muted():
                try:
                    hpa = self.ctx.store.get(
                        HPA_API, "HorizontalPodAutoscaler", gone.spec.hpa_name, gone.spec.namespace
                    )
                except NotFound:
                    continue
                if any(r.get("uid") == uid for r in meta_of(hpa).get("ownerReferences") or ()):
                    self.ctx.store.delete(
                        HPA_API, "HorizontalPodAutoscaler", gone.spec.hpa_name, gone.spec.namespace
                    )
        return events

    def _ensure_hpa(self, entry: _Scaled) -> None:
        want = hpa_object(entry.spec)
        want["metadata"]["ownerReferences"][0]["uid"] = entry.uid
        store = self.ctx.store
        with store.muted():
            try:
                have = store.get(
                    HPA_API, "HorizontalPodAutoscaler", entry.spec.hpa_name, entry.spec.namespace
                )
            except NotFound:
                store.create(want)
                return
            meta = meta_of(have)
            if have.get("spec") == want["spec"] and all(
                meta.get(k) == want["metadata"][k] for k in ("labels", "ownerReferences")
            ):
                return
            have["spec"] = want["spec"]
            meta.update({k: want["metadata"][k] for k in ("labels", "ownerReferences")})
            meta.pop("resourceVersion", None)
            store.update(have)

    # -- the scale loop --------------------------------------------------------------------
    def _value(self, trigger: PrometheusTrigger) -> TriggerValue:
        try:
            result = self.prometheus.query(trigger.expr, trigger.query)
        except PromQLError as exc:
            return trigger_value(trigger, None, f"prometheus query api returned error: {exc}")
        return trigger_value(trigger, result)

    def _poll(self, uid: str, now: float) -> bool:
        entry = self.objects.get(uid)
        if entry is None:
            return False  # deleted: its loop ends
        so = entry.spec
        self.ctx.loops.at(now + so.polling_interval, KEDA, partial(self._poll, uid))
        ref = f"ScaledObject/{so.key}"
        try:
            scale = get_scale(
                self.ctx, so.target_api_version, so.target_kind, so.target_name, so.namespace
            )
        except ScaleError as exc:
            self.ctx.emit(
                "Warning",
                "ScaledObjectCheckFailed",
                ref,
                f"ScaledObject doesn't have correct scaleTargetRef specification: {exc}",
            )
            return False
        values = [self._value(t) for t in so.triggers]
        for value in values:
            if value.error:
                self.ctx.emit("Warning", "KEDAScalerFailed", ref, value.error)
        decision = poll(so, entry.state, scale.spec_replicas, values, now, entry.created_at)
        entry.state = decision.state
        for event in decision.events:
            self.ctx.record(Event(event.type, event.reason, event.object, event.message))
        status = dict(decision.status)
        if "lastActiveTime" in status:
            status["lastActiveTime"] = time_string(float(status["lastActiveTime"]))
        self._write_status(so, status)
        if decision.replicas is None or decision.replicas == scale.spec_replicas:
            return False
        set_replicas(self.ctx, scale, decision.replicas)
        return True

    def _write_status(self, so: ScaledObjectSpec, status: Mapping[str, Any]) -> None:
        write_status(self.ctx, API_VERSION, "ScaledObject", so.name, so.namespace, status)

    # -- the metrics adapter ---------------------------------------------------------------
    def external_metric(
        self, namespace: str, metric: str, selector: Mapping[str, Any] | None
    ) -> Reading:
        """What KEDA's metrics server answers the HPA for an External metric."""
        owner = ((selector or {}).get("matchLabels") or {}).get(OWNER_LABEL)
        for entry in self.objects.values():
            so = entry.spec
            if so.namespace != namespace or so.name != owner:
                continue
            for trigger in so.triggers:
                if trigger.metric_name == metric:
                    value = self._value(trigger)
                    if value.error:
                        return Reading(error=value.error)
                    return Reading(values=(value.value_milli,))
        return Reading(error=f"no matching metrics found for {metric}")


__all__ = ["KedaController"]
