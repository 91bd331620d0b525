"""The statefulset controller: pods ``<name>-<ordinal>``, created one at a time and each
only once the one before runs (``OrderedReady``), or all at once (``Parallel``)."""

from __future__ import annotations

from typing import Any

from kgpu.sim.controllers.base import WorkloadController, meta_of
from kgpu.sim.names import template_hash
from kgpu.sim.pod_lifecycle import delete_pod

Obj = dict[str, Any]


class StatefulSetController(WorkloadController):
    kind = "StatefulSet"

    def reconcile(self, sts: Obj) -> bool:
        meta, spec = meta_of(sts), sts["spec"]
        name, uid = meta["name"], meta["uid"]
        want = int(spec.get("replicas", 1))
        parallel = spec.get("podManagementPolicy") == "Parallel"
        by_ordinal = {int(r.name.rsplit("-", 1)[1]): r for r in self._alive(uid)}
        changed = False
        revision = f"{name}-{template_hash(spec['template'])}"
        for i in range(want if not self._backing_off(uid) else 0):
            if i in by_ordinal:
                if not parallel and by_ordinal[i].phase != "Running":
                    break
                continue
            pod_name = f"{name}-{i}"
            by_ordinal[i] = self._new_pod(
                sts,
                spec["template"],
                pod_name,
                {
                    "statefulset.kubernetes.io/pod-name": pod_name,
                    "apps.kubernetes.io/pod-index": str(i),
                    "controller-revision-hash": revision,
                },
                root=self._root(sts),
            )
            changed = True
            if not parallel:
                break
        for i in sorted(by_ordinal, reverse=True):
            if i >= want:
                delete_pod(self.ctx, by_ordinal.pop(i).key)
                changed = True
        running = sum(1 for r in by_ordinal.values() if r.phase == "Running")
        self._write_status(
            sts,
            {
                "replicas": len(by_ordinal),
                "readyReplicas": running,
                "availableReplicas": running,
                "currentRevision": revision,
            },
        )
        return changed
