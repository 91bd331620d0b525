"""Binding conditions (KEP-5007, ``DRADeviceBindingConditions`` + ``DRAResourceClaimDeviceStatus``,
beta in 1.34+) in the simulated cluster: the scheduler's side, and a stand-in for the driver
that attaches devices.

A device may carry ``bindingConditions`` (and ``bindingFailureConditions``, ``bindsToNode``) in
its ResourceSlice: it is usable only once something outside the scheduler got it ready, e.g. a
fabric-attached GPU a composable-infrastructure controller must first connect to the chosen
node over a PCIe/CXL switch. The allocator copies the conditions into the allocation result;
kube-scheduler's PreBind then waits, polling the claim's ``status.devices[].conditions``:

* every binding condition ``True`` -> the pod is bound;
* any failure condition ``True`` -> ``claim <name> binding failed: reason=<r>, message="<m>"``;
* not ready ``BindingTimeout`` (600 s, :data:`BINDING_TIMEOUT_S`) after the allocation's
  ``allocationTimestamp`` -> ``claim <name> binding timeout``.

A failure is a ``FailedScheduling`` event (``running PreBind plugin "DynamicResources": ...``),
the pod leaves the claim's ``reservedFor`` and goes back to the queue; its next attempt finds
the failed claim unusable on every node (``resourceclaim not available on the node``) and
PostFilter deallocates it (``deallocation of ResourceClaim completed``), so the attempt after
that allocates afresh. (:func:`claim_binding` holds the decision; the wait itself lives in
:mod:`kgpu.sim.binding`.)

:class:`FakeAttachController` plays the attaching driver, which kgpu does not have (NVIDIA's
GPUs are node-local): for the devices of a ResourceSlice annotated
``sim.kgpu.io/attach-seconds: "<s>"`` it sets each binding condition ``True`` that many simulated
seconds after the device was allocated; devices named in ``sim.kgpu.io/attach-fails`` instead get
their first failure condition ``True`` and a ``NoSchedule`` DeviceTaintRule
(``sim.kgpu.io/attach-failed``), as KEP-5007 asks of a driver so that the device is not picked
again. Slices without the annotation are attached by nobody: their pods time out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from kgpu.dra.api import RESOURCE_API
from kgpu.sim.context import SimContext
from kgpu.sim.plugins import Event
from kgpu.store import AlreadyExists, NotFound, ObjectStore, list_read_only, namespace_of

Obj = dict[str, Any]

#: kube-scheduler's ``BindingTimeoutDefaultSeconds`` (DynamicResourcesArgs.bindingTimeout)
BINDING_TIMEOUT_S = 600.0
ATTACH_SECONDS = "sim.kgpu.io/attach-seconds"
ATTACH_FAILS = "sim.kgpu.io/attach-fails"
ATTACH_FAILED_TAINT = "sim.kgpu.io/attach-failed"


def _results(claim: Mapping[str, Any]) -> list[Obj]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def has_binding_conditions(claim: Mapping[str, Any]) -> bool:
    return any(r.get("bindingConditions") for r in _results(claim))


def _device_status(claim: Mapping[str, Any], result: Mapping[str, Any]) -> Obj | None:
    for status in (claim.get("status") or {}).get("devices") or []:
        if all(status.get(k) == result.get(k) for k in ("driver", "pool", "device")):
            return dict(status)
    return None


def _condition(status: Mapping[str, Any], kind: str) -> Obj | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def claim_ready(claim: Mapping[str, Any]) -> tuple[bool, str]:
    """(ready, failure): upstream's ``isClaimReadyForBinding``. Ready when every device with
    binding conditions has them all ``True``; a failure condition ``True`` is the error."""
    if not (claim.get("status") or {}).get("allocation"):
        return False, ""
    name = str((claim.get("metadata") or {}).get("name", ""))
    for result in _results(claim):
        if not result.get("bindingConditions"):
            continue
        status = _device_status(claim, result)
        if status is None:
            return False, ""
        for kind in result.get("bindingFailureConditions") or []:
            cond = _condition(status, kind)
            if cond is not None and cond.get("status") == "True":
                message = str(cond.get("message", "")).replace("\\", "\\\\").replace('"', '\\"')
                return False, (
                    f"claim {name} binding failed: reason={cond.get('reason', '')}, "
                    f'message="{message}"'
                )
        for kind in result.get("bindingConditions") or []:
            cond = _condition(status, kind)
            if cond is None or cond.get("status") != "True":
                return False, ""
    return True, ""


def claim_binding(claim: Mapping[str, Any], allocated_at: float | None, now: float) -> str | None:
    """What PreBind makes of one claim: None when it may bind, ``""`` to keep waiting, or the
    error (failure condition, or the binding timeout passed)."""
    ready, failure = claim_ready(claim)
    if failure:
        return failure
    if ready:
        return None
    if allocated_at is not None and now >= allocated_at + BINDING_TIMEOUT_S:
        name = (claim.get("metadata") or {}).get("name", "")
        return f"claim {name} binding timeout"
    return ""


def _node_of(claim: Mapping[str, Any]) -> str:
    """The node a bindsToNode/node-local allocation is pinned to (``metadata.name In [n]``)."""
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return ""


class FakeAttachController:
    """:class:`kgpu.sim.plugins.Controller` standing in for a driver that attaches devices
    (module docstring). It does nothing unless some ResourceSlice carries
    ``sim.kgpu.io/attach-seconds``."""

    name = "fake-attach"

    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        self._slices_rev = -1
        self._plans: dict[tuple[str, str, str], tuple[float, bool]] = {}  # device -> (s, fails)
        self._seen: dict[tuple[str, str, str, str], float] = {}  # (claim uid, device) -> t

    def _read_plans(self, store: ObjectStore) -> None:
        rev = int(getattr(store, "kind_revision", lambda *_: -2)(RESOURCE_API, "ResourceSlice"))
        if rev == self._slices_rev and rev != -2:
            return
        self._slices_rev = rev
        self._plans = {}
        for s in list_read_only(store, RESOURCE_API, "ResourceSlice"):
            notes = (s.get("metadata") or {}).get("annotations") or {}
            if ATTACH_SECONDS not in notes:
                continue
            try:
                seconds = max(0.0, float(str(notes[ATTACH_SECONDS]).rstrip("s")))
            except ValueError:
                continue
            fails = {d.strip() for d in str(notes.get(ATTACH_FAILS, "")).split(",") if d.strip()}
            spec = s.get("spec") or {}
            pool = str((spec.get("pool") or {}).get("name", ""))
            for dev in spec.get("devices") or []:
                key = (str(spec.get("driver", "")), pool, str(dev.get("name", "")))
                self._plans[key] = (seconds, key[2] in fails)

    def reconcile(self, store: ObjectStore, now: float) -> list[Event]:
        self._read_plans(store)
        if not self._plans:
            return []
        events: list[Event] = []
        for claim in store.list(RESOURCE_API, "ResourceClaim"):
            if not has_binding_conditions(claim):
                continue
            events += self._attach(store, claim, now)
        return events

    def _attach(self, store: ObjectStore, claim: Obj, now: float) -> list[Event]:
        uid = str((claim.get("metadata") or {}).get("uid", ""))
        statuses = list((claim.get("status") or {}).get("devices") or [])
        events: list[Event] = []
        changed = False
        node = _node_of(claim)
        for result in _results(claim):
            key = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            plan = self._plans.get(key)
            if plan is None or not result.get("bindingConditions"):
                continue
            if _device_status(claim, result) is not None:
                continue  # this driver already answered for the device
            seen = self._seen.setdefault((uid, *key), now)
            seconds, fails = plan
            if now < seen + seconds:
                self.ctx.wake_at(seen + seconds)
                continue
            when = self.ctx.timestamp()
            if fails and result.get("bindingFailureConditions"):
                kinds = [result["bindingFailureConditions"][0]]
                reason, message = "AttachFailed", f"attaching {key[2]} to node {node} failed"
            else:
                kinds = list(result["bindingConditions"])
                reason, message = "Attached", f"{key[2]} attached to node {node}"
            statuses.append(
                {
                    "driver": key[0],
                    "pool": key[1],
                    "device": key[2],
                    "conditions": [
                        {
                            "type": kind,
                            "status": "True",
                            "reason": reason,
                            "message": message,
                            "lastTransitionTime": when,
                        }
                        for kind in kinds
                    ],
                }
            )
            changed = True
            ref = f"ResourceClaim/{namespace_of(claim)}/{claim['metadata']['name']}"
            if reason == "Attached":
                events.append(Event("Normal", "DeviceAttached", ref, message))
            else:
                events.append(Event("Warning", "DeviceAttachFailed", ref, message))
                self._taint(store, key)
        if changed:
            claim["status"]["devices"] = statuses
            claim["metadata"].pop("resourceVersion", None)
            store.update(claim)
        return events

    @staticmethod
    def _taint(store: ObjectStore, device: tuple[str, str, str]) -> None:
        """Keep a device that failed to attach from being picked again (KEP-5007's advice)."""
        name = f"attach-failed-{device[1]}-{device[2]}".lower().replace("_", "-")[:253]
        rule = {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": name},
            "spec": {
                "deviceSelector": {"driver": device[0], "pool": device[1], "device": device[2]},
                "taint": {"key": ATTACH_FAILED_TAINT, "effect": "NoSchedule"},
            },
        }
        with contextlib.suppress(AlreadyExists):
            store.create(rule)


def deallocate(claim: Obj) -> None:
    """PostFilter's reset of a claim whose binding failed or timed out."""
    status = claim.get("status") or {}
    for key in ("allocation", "reservedFor", "devices"):
        status.pop(key, None)
    if not status:
        claim.pop("status", None)


def current(store: ObjectStore, claim: Mapping[str, Any]) -> Obj | None:
    meta = claim.get("metadata") or {}
    try:
        return store.get(RESOURCE_API, "ResourceClaim", str(meta.get("name")), namespace_of(claim))
    except NotFound:
        return None


__all__ = [
    "ATTACH_FAILED_TAINT",
    "ATTACH_FAILS",
    "ATTACH_SECONDS",
    "BINDING_TIMEOUT_S",
    "FakeAttachController",
    "claim_binding",
    "claim_ready",
    "current",
    "deallocate",
    "has_binding_conditions",
]
