"""kube-controller-manager's resourceclaim controller: a ResourceClaim for every
``spec.resourceClaims[]`` entry of a pod that names a ``resourceClaimTemplateName``.

The claim is made from the template the first time (``generateName: <pod>-<claim name>-``, so
its name is ``<pod>-<claim name>-<suffix>``; owned by the pod; annotated
``resource.kubernetes.io/pod-claim-name``) and recorded in the pod's
``status.resourceClaimStatuses``, where the scheduler and the kubelet find it (the claim the
scheduler makes for extended resources backed by DRA is deleted with its pod too). A template that
does not exist is a ``FailedResourceClaimCreation`` warning on the pod (the scheduler then says
``ResourceClaim not created yet``). When its pod is torn down (it finished, failed or was
deleted), a generated claim no other pod reserves is deleted, which frees its devices.

It runs after the other controllers of a round, so the claims of the pods they made exist when
the scheduler meets those pods.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Mapping
from typing import Any

from kgpu.dra.api import RESOURCE_API
from kgpu.sim.context import SimContext
from kgpu.sim.plugins import Event
from kgpu.store import NotFound, ObjectStore, namespace_of

Obj = dict[str, Any]
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
#: (namespace, pod, pod uid, pod-level claim name)
ClaimKey = tuple[str, str, str, str]


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def recorded_claim(pod: Mapping[str, Any], entry: Mapping[str, Any]) -> str | None:
    """The ResourceClaim behind one ``spec.resourceClaims`` entry as the pod says it: the
    named claim, or the one ``status.resourceClaimStatuses`` records for a template."""
    if entry.get("resourceClaimName"):
        return str(entry["resourceClaimName"])
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("name") == entry.get("name") and status.get("resourceClaimName"):
            return str(status["resourceClaimName"])
    return None


def pod_claim_name(
    pod: Mapping[str, Any], entry: Mapping[str, Any], store: ObjectStore
) -> str | None:
    """:func:`recorded_claim`, or, when the caller's copy of the pod predates its status, the
    claim generated for it: owned by the pod and annotated with the entry's name."""
    name = recorded_claim(pod, entry)
    if name is not None or not entry.get("resourceClaimTemplateName"):
        return name
    meta = pod.get("metadata") or {}
    for claim in store.list(RESOURCE_API, "ResourceClaim", namespace=namespace_of(pod)):
        cmeta = claim.get("metadata") or {}
        owned = any(
            o.get("kind") == "Pod"
            and (o.get("uid") == meta.get("uid") or o.get("name") == meta.get("name"))
            for o in cmeta.get("ownerReferences") or []
        )
        if owned and (cmeta.get("annotations") or {}).get(POD_CLAIM_ANNOTATION) == entry.get(
            "name"
        ):
            return str(cmeta.get("name"))
    return None


class ResourceClaimController:
    """:class:`kgpu.sim.plugins.Controller` making claims from templates (module docstring).
    With a :class:`SimContext` it looks at the pods waiting to be scheduled; tools and tests
    hand it pods with :meth:`sync_pod`."""

    name = "resourceclaim"

    def __init__(self, ctx: SimContext | None = None) -> None:
        self.ctx = ctx
        self._generated: dict[ClaimKey, str] = {}
        self._warned: dict[ClaimKey, str] = {}  # last creation failure told, per pod claim
        if ctx is not None:
            ctx.release_listeners.append(self)

    def pod_released(self, pod: Obj) -> None:
        """The pod's kubelet tore it down: its generated claims go unless another pod
        reserves them (as the controller does when it sees the pod finish or go)."""
        if self.ctx is not None:
            ns, name, uid = namespace_of(pod), _name(pod), _uid(pod)
            self.collect(self.ctx.store, only=(ns, name, uid))
            self._delete_extended(pod, self.ctx.store)

    @staticmethod
    def _delete_extended(pod: Obj, store: ObjectStore) -> None:
        """The claim the scheduler made for the pod's extended resources (DRAExtendedResource)
        goes with the pod, unless another pod reserves it."""
        status = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
        name = status.get("resourceClaimName")
        if not name:
            return
        try:
            claim = store.get(RESOURCE_API, "ResourceClaim", str(name), namespace_of(pod))
        except NotFound:
            return
        owners = (claim.get("metadata") or {}).get("ownerReferences") or []
        if not any(o.get("uid") == _uid(pod) for o in owners):
            return
        reserved = (claim.get("status") or {}).get("reservedFor") or []
        if any(r.get("uid") != _uid(pod) for r in reserved):
            return
        with contextlib.suppress(NotFound):
            store.delete(RESOURCE_API, "ResourceClaim", str(name), namespace_of(pod))

    def reconcile(self, store: ObjectStore, now: float) -> list[Event]:
        events: list[Event] = []
        if self.ctx is not None:
            for rec in list(self.ctx.pending.values()):
                if any(
                    e.get("resourceClaimTemplateName")
                    for e in rec.obj["spec"].get("resourceClaims") or ()
                ):
                    events += self.sync_pod(rec.obj, store)
        self.collect(store)
        return events

    def sync_pod(self, pod: Obj, store: ObjectStore) -> list[Event]:
        """Create the pod's missing template claims and record them in its status (in ``pod``
        and in the stored pod); a Warning event per claim that cannot be made."""
        status = pod.setdefault("status", {})
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in status.get("resourceClaimStatuses") or []
        }
        events: list[Event] = []
        changed = False
        for entry in pod["spec"].get("resourceClaims") or []:
            pod_claim = str(entry.get("name", ""))
            template_name = entry.get("resourceClaimTemplateName")
            if not template_name or statuses.get(pod_claim):
                continue
            key = (namespace_of(pod), _name(pod), _uid(pod), pod_claim)
            name = self._generated.get(key) or self._stored_status(pod, pod_claim, store)
            if name is None:
                try:
                    name = self._create(pod, pod_claim, str(template_name), store)
                except NotFound:
                    message = (
                        f"PodResourceClaim {pod_claim}: resourceclaimtemplate."
                        f'{RESOURCE_API.split("/")[0]} "{template_name}" not found'
                    )
                    if self._warned.get(key) != message:
                        self._warned[key] = message
                        events.append(
                            Event(
                                "Warning",
                                "FailedResourceClaimCreation",
                                f"Pod/{namespace_of(pod)}/{_name(pod)}",
                                message,
                            )
                        )
                    continue
            self._generated[key] = name
            statuses[pod_claim] = name
            changed = True
        if changed:
            status["resourceClaimStatuses"] = [
                {"name": k, "resourceClaimName": v} for k, v in statuses.items() if v
            ]
            with contextlib.suppress(NotFound):
                current = store.get("v1", "Pod", _name(pod), namespace_of(pod))
                current.setdefault("status", {})["resourceClaimStatuses"] = status[
                    "resourceClaimStatuses"
                ]
                current["metadata"].pop("resourceVersion", None)
                store.update(current)
        return events

    @staticmethod
    def _stored_status(pod: Obj, pod_claim: str, store: ObjectStore) -> str | None:
        """The claim the stored pod's status records (the caller's copy may predate it)."""
        try:
            stored = store.get("v1", "Pod", _name(pod), namespace_of(pod))
        except NotFound:
            return None
        if _uid(stored) != _uid(pod):
            return None
        return recorded_claim(stored, {"name": pod_claim, "resourceClaimTemplateName": "-"})

    @staticmethod
    def _create(pod: Obj, pod_claim: str, template_name: str, store: ObjectStore) -> str:
        template = store.get(
            RESOURCE_API, "ResourceClaimTemplate", template_name, namespace_of(pod)
        )
        tmeta = (template.get("spec") or {}).get("metadata") or {}
        claim: Obj = {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": f"{_name(pod)}-{pod_claim}-"[:58],
                "namespace": namespace_of(pod),
                "labels": dict(tmeta.get("labels") or {}),
                "annotations": {
                    **(tmeta.get("annotations") or {}),
                    POD_CLAIM_ANNOTATION: pod_claim,
                },
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": _name(pod),
                        "uid": _uid(pod),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {}),
        }
        if not claim["metadata"]["labels"]:
            del claim["metadata"]["labels"]
        return _name(store.create(claim))

    def collect(self, store: ObjectStore, only: tuple[str, str, str] | None = None) -> None:
        """Delete the generated claims of pods that are gone or finished (``only``: of that
        pod, which is being torn down), unless another pod reserves them."""
        for key, name in list(self._generated.items()):
            ns, pod_name, uid, _ = key
            if only is not None:
                if key[:3] != only:
                    continue
            elif self._pod_running(ns, pod_name, uid, store):
                continue
            try:
                claim = store.get(RESOURCE_API, "ResourceClaim", name, ns)
            except NotFound:
                del self._generated[key]
                continue
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if any(r.get("uid") != uid for r in reserved):
                continue
            with contextlib.suppress(NotFound):
                store.delete(RESOURCE_API, "ResourceClaim", name, ns)
            del self._generated[key]
            self._warned.pop(key, None)

    def _pod_running(self, ns: str, name: str, uid: str, store: ObjectStore) -> bool:
        """Whether the pod with this uid still exists and has not finished."""
        if self.ctx is not None:
            rec = self.ctx.pods.get(f"{ns}/{name}")
            return rec is not None and _uid(rec.obj) == uid and not rec.finished
        try:
            pod = store.get("v1", "Pod", name, ns)
        except NotFound:
            return False
        phase = (pod.get("status") or {}).get("phase")
        return _uid(pod) == uid and phase not in ("Succeeded", "Failed")


__all__ = [
    "POD_CLAIM_ANNOTATION",
    "ResourceClaimController",
    "pod_claim_name",
    "recorded_claim",
]
