"""kube-controller-manager's device taint eviction controller (``DRADeviceTaints``, KEP-5055) for
the simulated cluster.

A ``NoExecute`` taint on a device, from its ResourceSlice or from a DeviceTaintRule, evicts the
pods using a claim allocated that device unless the claim's request tolerates the taint (the
tolerations the allocator copied into the allocation result). An untolerated taint evicts at
once; a toleration with ``tolerationSeconds`` evicts that long after the controller first saw
the taint (upstream counts from the taint's ``timeAdded``). The pod gets upstream's
``DeviceTaintManagerEviction`` event (``Marking for deletion``) and is deleted; its controller
makes a replacement, which the scheduler keeps off the tainted device (``NoExecute`` blocks
allocation as ``NoSchedule`` does).

The controller does nothing until some device carries a ``NoExecute`` taint, so it costs
nothing in clusters without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kgpu.dra.api import RESOURCE_API
from kgpu.dra.taints import apply_taint_rules, tolerates
from kgpu.sim.context import SimContext
from kgpu.sim.plugins import Event
from kgpu.sim.pod_lifecycle import delete_pod
from kgpu.store import ObjectStore, list_read_only, namespace_of

Obj = dict[str, Any]
DeviceKey = tuple[str, str, str]  # driver, pool, device


def no_execute_taints(slices: list[Obj], rules: list[Obj]) -> dict[DeviceKey, list[Obj]]:
    """Every device with a ``NoExecute`` taint (slice taints and DeviceTaintRules merged)."""
    out: dict[DeviceKey, list[Obj]] = {}
    for s in apply_taint_rules(slices, rules) if rules else slices:
        spec = s.get("spec") or {}
        pool = str((spec.get("pool") or {}).get("name", ""))
        for dev in spec.get("devices") or []:
            taints = [t for t in dev.get("taints") or [] if t.get("effect") == "NoExecute"]
            if taints:
                out[(str(spec.get("driver", "")), pool, str(dev.get("name", "")))] = taints
    return out


def eviction_delay(result: Mapping[str, Any], taints: list[Obj]) -> float | None:
    """Seconds until a claim holding this device must go: 0 for a taint no toleration of the
    result tolerates, the smallest ``tolerationSeconds`` among tolerations that bound it, None
    when every taint is tolerated for good."""
    delay: float | None = None
    tolerations = list(result.get("tolerations") or [])
    for taint in taints:
        matching = [t for t in tolerations if tolerates(t, taint)]
        if not matching:
            return 0.0
        bounded = [float(t["tolerationSeconds"]) for t in matching if "tolerationSeconds" in t]
        if bounded and len(bounded) == len(matching):
            seconds = max(0.0, min(bounded))
            delay = seconds if delay is None else min(delay, seconds)
    return delay


class DeviceTaintEvictionController:
    """:class:`kgpu.sim.plugins.Controller` evicting pods from ``NoExecute``-tainted devices
    (module docstring)."""

    name = "device-taint-eviction"

    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        #: DeviceTaintRules count only where the release's (or scenario's) gate is on
        self._rules = ctx.scenario.features.device_taint_rules
        self._revs: tuple[int, int] = (-1, -1)
        self._tainted: dict[DeviceKey, list[Obj]] = {}
        self._first_seen: dict[tuple[str, DeviceKey], float] = {}  # (claim uid, device) -> t

    def _read(self, store: ObjectStore) -> None:
        rev = getattr(store, "kind_revision", None)
        revs = (
            (int(rev(RESOURCE_API, "ResourceSlice")), int(rev(RESOURCE_API, "DeviceTaintRule")))
            if rev is not None
            else (-2, -2)
        )
        if revs == self._revs and revs[0] != -2:
            return
        self._revs = revs
        self._tainted = no_execute_taints(
            list_read_only(store, RESOURCE_API, "ResourceSlice"),
            list(store.list(RESOURCE_API, "DeviceTaintRule")) if self._rules else [],
        )

    def reconcile(self, store: ObjectStore, now: float) -> list[Event]:
        self._read(store)
        if not self._tainted:
            return []
        events: list[Event] = []
        for claim in store.list(RESOURCE_API, "ResourceClaim"):
            due = self._due(claim, now)
            if due is None:
                continue
            if due > now:
                self.ctx.wake_at(due)
                continue
            ns = namespace_of(claim)
            for ref in (claim.get("status") or {}).get("reservedFor") or []:
                key = f"{ns}/{ref.get('name')}"
                rec = self.ctx.pods.get(key)
                if ref.get("resource") != "pods" or rec is None:
                    continue
                if str((rec.obj.get("metadata") or {}).get("uid", "")) != ref.get("uid"):
                    continue
                self.ctx.emit(
                    "Normal", "DeviceTaintManagerEviction", f"Pod/{key}", "Marking for deletion"
                )
                delete_pod(self.ctx, key)
        return events

    def _due(self, claim: Obj, now: float) -> float | None:
        """When the claim's pods must be evicted (None: never)."""
        uid = str((claim.get("metadata") or {}).get("uid", ""))
        allocation = (claim.get("status") or {}).get("allocation") or {}
        due: float | None = None
        for result in (allocation.get("devices") or {}).get("results") or []:
            key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            taints = self._tainted.get(key)
            if not taints:
                continue
            delay = eviction_delay(result, taints)
            if delay is None:
                continue
            seen = self._first_seen.setdefault((uid, key), now)
            when = seen + delay
            due = when if due is None else min(due, when)
        return due


__all__ = ["DeviceTaintEvictionController", "eviction_delay", "no_execute_taints"]
