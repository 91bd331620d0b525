"""The simulator's kube-controller-manager: the workload controllers run in a fixed order each
round, and the garbage collector removes what lost its owner.

Owners before what they own (MPIJobs and Deployments, then ReplicaSets, Jobs, StatefulSets and
DaemonSets): a ReplicaSet whose Deployment is gone, or a pod whose ReplicaSet is gone, is
deleted in the same pass (upstream's garbage collector, with ``blockOwnerDeletion``'s
foreground cascading). The order makes a run deterministic: pod name suffixes are drawn in it.
"""

from __future__ import annotations

from typing import Any

from kgpu.sim.admission import AdmissionDenied
from kgpu.sim.context import SimContext
from kgpu.sim.controllers.base import (
    API_VERSIONS,
    OWNED_KINDS,
    StatusCache,
    WorkloadController,
    controller_ref,
    meta_of,
)
from kgpu.sim.controllers.daemonset import DaemonSetController
from kgpu.sim.controllers.deployment import DeploymentController
from kgpu.sim.controllers.job import JobController
from kgpu.sim.controllers.mpijob import MPIJobController
from kgpu.sim.controllers.replicaset import ReplicaSetController
from kgpu.sim.controllers.statefulset import StatefulSetController
from kgpu.sim.pod_lifecycle import delete_pod

Obj = dict[str, Any]


class ControllerManager:
    """Reconciles every workload kind once per call; True when anything changed."""

    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        status = StatusCache()
        #: kinds nothing owns in the simulator, listed together before any is reconciled
        self.roots: list[WorkloadController] = [
            MPIJobController(ctx, status),
            DeploymentController(ctx, status),
        ]
        #: kinds that may have an owner among the kinds before them
        self.owned: list[WorkloadController] = [
            ReplicaSetController(ctx, status),
            JobController(ctx, status),
            StatefulSetController(ctx, status),
            DaemonSetController(ctx, status),
        ]
        self._refused: set[tuple[str, str]] = set()  # (owner, why) already reported

    def _reconcile(self, ctrl: WorkloadController, obj: Obj) -> bool:
        """One object; a pod the API server refuses is the controller's ``FailedCreate``
        event (once per owner and reason), and the controller tries again next round."""
        try:
            return ctrl.reconcile(obj)
        except AdmissionDenied as exc:
            meta = meta_of(obj)
            owner = f"{ctrl.kind}/{meta.get('namespace', 'default')}/{meta['name']}"
            why = str(exc).split(" is forbidden: ", 1)[-1]
            if (owner, why) not in self._refused:
                self._refused.add((owner, why))
                self.ctx.emit("Warning", "FailedCreate", owner, f"Error creating: {exc}")
            return False

    def _list(self, kind: str) -> list[Obj]:
        return [
            o
            for o in self.ctx.store.list(API_VERSIONS[kind], kind)
            if not meta_of(o).get("deletionTimestamp")
        ]

    def reconcile(self) -> bool:
        changed = False
        live: set[str] = set()
        listed = [(ctrl, self._list(ctrl.kind)) for ctrl in self.roots]
        for ctrl, objs in listed:
            for obj in objs:
                live.add(meta_of(obj)["uid"])
                changed |= self._reconcile(ctrl, obj)
        for ctrl in self.owned:
            for obj in self._list(ctrl.kind):
                owner = controller_ref(obj)
                uid = str(owner.get("uid", ""))
                if uid and uid not in live and owner.get("kind") in OWNED_KINDS:
                    meta = meta_of(obj)
                    with self.ctx.store.muted():
                        self.ctx.store.delete(
                            obj["apiVersion"], ctrl.kind, meta["name"], meta["namespace"]
                        )
                    changed = True
                    continue
                live.add(meta_of(obj)["uid"])
                changed |= self._reconcile(ctrl, obj)
        for rec in list(self.ctx.pods.values()):
            if rec.owner_kind in OWNED_KINDS and rec.owner_uid not in live:
                delete_pod(self.ctx, rec.key)
                changed = True
        return changed


__all__ = ["ControllerManager"]
