"""What the simulator's workload controllers share: owner references, the pods an owner has,
making a pod from a template, writing status, and backing off after a kubelet rejection.

Each controller (one module per kind, as kube-controller-manager has one per kind) reconciles
one object at a time through :meth:`WorkloadController.reconcile`; the
:class:`~kgpu.sim.controllers.manager.ControllerManager` lists the objects, runs the
controllers in a fixed order and collects garbage. Controllers read the store and the
simulator's pod index (:class:`~kgpu.sim.context.SimContext`) and create and delete pods
through :mod:`kgpu.sim.pod_lifecycle`, so a pod they make is scheduled like any other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from kgpu.dra.api import RESOURCE_API
from kgpu.sim.context import SimContext
from kgpu.sim.pod_lifecycle import create_pod
from kgpu.sim.state import PodRecord
from kgpu.store import clone

Obj = dict[str, Any]

#: kind -> the apiVersion the simulator reads and writes it in.
API_VERSIONS: dict[str, str] = {
    "Pod": "v1",
    "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "MPIJob": "kubeflow.org/v2beta1",
    "ConfigMap": "v1",
    "Service": "v1",
    "ComputeDomain": "resource.nvidia.com/v1beta1",
    "ResourceClaim": RESOURCE_API,
    "ResourceClaimTemplate": RESOURCE_API,
    "DeviceClass": RESOURCE_API,
}
#: Kinds whose controllers own pods (and, for Deployments and MPIJobs, ReplicaSets and Jobs).
OWNED_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "MPIJob")
#: Annotation naming the workload the user applied (a Deployment's name on its ReplicaSet):
#: the key of a scenario's ``runtimes``.
ROOT_ANNOTATION = "sim.kgpu.dev/root"


def meta_of(obj: Mapping[str, Any]) -> Obj:
    return obj.get("metadata") or {}


def owner_ref(obj: Mapping[str, Any], block: bool = True) -> Obj:
    meta = meta_of(obj)
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": block,
    }


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The owner reference with ``controller: true`` ({} when none)."""
    for ref in meta_of(obj).get("ownerReferences") or ():
        if ref.get("controller"):
            return dict(ref)
    return {}


def controller_uid(obj: Mapping[str, Any]) -> str:
    return str(controller_ref(obj).get("uid", ""))


class StatusCache:
    """The status each controller last wrote, per object: a status equal to it is not written
    again (a write would wake every watcher for nothing)."""

    def __init__(self) -> None:
        self.written: dict[tuple[str, str, str], Any] = {}


class WorkloadController:
    """One controller of kube-controller-manager (or an operator) for one ``kind``."""

    kind: ClassVar[str]

    def __init__(self, ctx: SimContext, status: StatusCache) -> None:
        self.ctx = ctx
        self._status = status.written

    def reconcile(self, obj: Obj) -> bool:
        """Bring one object's pods (or children) to what it asks; True when anything changed
        that needs another round."""
        raise NotImplementedError

    # -- helpers ------------------------------------------------------------------------------
    def _alive(self, uid: str) -> list[PodRecord]:
        return [r for r in self.ctx.pods_by_owner.get(uid, {}).values() if not r.finished]

    def _pods(self, uid: str) -> list[PodRecord]:
        return list(self.ctx.pods_by_owner.get(uid, {}).values())

    def _new_pod(
        self,
        owner: Obj,
        template: Mapping[str, Any],
        name: str,
        extra_labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        gang: str = "",
        gang_size: int = 0,
        root: str = "",
    ) -> PodRecord:
        tmeta = template.get("metadata") or {}
        labels = {**(tmeta.get("labels") or {}), **(extra_labels or {})}
        pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta_of(owner).get("namespace", "default"),
                "labels": labels,
                "ownerReferences": [owner_ref(owner)],
            },
            "spec": clone(template.get("spec") or {}),
            "status": {"phase": "Pending"},
        }
        notes = {**(tmeta.get("annotations") or {}), **(annotations or {})}
        if notes:
            pod["metadata"]["annotations"] = notes
        return create_pod(
            self.ctx,
            pod,
            owner_kind=owner["kind"],
            owner_uid=meta_of(owner)["uid"],
            gang=gang,
            gang_size=gang_size,
            root=root or meta_of(owner)["name"],
            owned=True,  # built here: the record needs no copy of the stored pod
        )

    def _backing_off(self, uid: str) -> bool:
        """A pod of this owner was rejected by a kubelet at the current time: like the
        controllers' rate-limited queues, replace it only once the clock moves on."""
        now = self.ctx.now
        return any(
            r.failed_at is not None and r.failed_at >= now
            for r in self.ctx.pods_by_owner.get(uid, {}).values()
        )

    def _write_status(self, obj: Obj, status: Obj) -> bool:
        meta = meta_of(obj)
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        if self._status.get(key) == status and obj.get("status") == status:
            return False
        self._status[key] = status
        if obj.get("status") == status:
            return False
        obj["status"] = status
        obj["metadata"].pop("resourceVersion", None)
        with self.ctx.store.muted():
            self.ctx.store.update(obj)
        return False  # status alone never needs another round

    def _root(self, obj: Mapping[str, Any]) -> str:
        """The name the user applied (a Deployment's, not its ReplicaSet's): ``runtimes`` key."""
        ann = meta_of(obj).get("annotations") or {}
        return str(ann.get(ROOT_ANNOTATION) or meta_of(obj)["name"])


__all__ = [
    "API_VERSIONS",
    "OWNED_KINDS",
    "ROOT_ANNOTATION",
    "StatusCache",
    "WorkloadController",
    "controller_ref",
    "controller_uid",
    "meta_of",
    "owner_ref",
]
