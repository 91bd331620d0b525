"""The deployment controller: a Deployment owns one ReplicaSet per pod template
(``<deployment>-<pod-template-hash>``), scaled to ``spec.replicas``; older ones are scaled to 0.
Simplification, stated: a template change replaces the old ReplicaSet at once (no rolling
surge).
"""

from __future__ import annotations

import copy
from typing import Any

from kgpu.sim.controllers.base import (
    ROOT_ANNOTATION,
    WorkloadController,
    controller_uid,
    meta_of,
    owner_ref,
)
from kgpu.sim.names import template_hash

Obj = dict[str, Any]


class DeploymentController(WorkloadController):
    kind = "Deployment"

    def reconcile(self, d: Obj) -> bool:
        meta, spec = meta_of(d), d["spec"]
        replicas = int(spec.get("replicas", 1))
        template = spec["template"]
        h = template_hash(template)
        rs_name = f"{meta['name']}-{h}"
        ns = meta["namespace"]
        owned = [
            rs
            for rs in self.ctx.store.list("apps/v1", "ReplicaSet", ns)
            if controller_uid(rs) == meta["uid"]
        ]
        changed = False
        current = next((rs for rs in owned if meta_of(rs)["name"] == rs_name), None)
        if current is None:
            tpl = copy.deepcopy(template)
            tpl.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
            selector = copy.deepcopy(spec.get("selector") or {})
            selector.setdefault("matchLabels", {})["pod-template-hash"] = h
            rs: Obj = {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": rs_name,
                    "namespace": ns,
                    "labels": dict(tpl["metadata"]["labels"]),
                    "annotations": {
                        "deployment.kubernetes.io/revision": str(len(owned) + 1),
                        ROOT_ANNOTATION: self._root(d),
                    },
                    "ownerReferences": [owner_ref(d)],
                },
                "spec": {"replicas": replicas, "selector": selector, "template": tpl},
            }
            with self.ctx.store.muted():
                self.ctx.store.create(rs)
            self._scaled(d, f"Scaled up replica set {rs_name} from 0 to {replicas}")
            changed = True
        elif current["spec"].get("replicas") != replicas:
            self._scale_replica_set(d, current, replicas)
            changed = True
        for rs in owned:
            if meta_of(rs)["name"] != rs_name and rs["spec"].get("replicas"):
                self._scale_replica_set(d, rs, 0)
                changed = True
        pods = [p for rs in owned for p in self._alive(meta_of(rs)["uid"])]
        running = sum(1 for p in pods if p.phase == "Running")
        self._write_status(
            d,
            {
                "observedGeneration": meta.get("generation", 1),
                "replicas": len(pods),
                "updatedReplicas": len(
                    [p for p in pods if p.obj["metadata"]["labels"].get("pod-template-hash") == h]
                ),
                "readyReplicas": running,
                "availableReplicas": running,
                **({"unavailableReplicas": len(pods) - running} if len(pods) > running else {}),
            },
        )
        return changed

    def _scale_replica_set(self, d: Obj, rs: Obj, replicas: int) -> None:
        """The deployment controller resizes one of its ReplicaSets."""
        old = rs["spec"].get("replicas")
        rs["spec"]["replicas"] = replicas
        with self.ctx.store.muted():
            self.ctx.store.update(rs)
        verb = "up" if replicas > (old or 0) else "down"
        self._scaled(d, f"Scaled {verb} replica set {meta_of(rs)['name']} from {old} to {replicas}")

    def _scaled(self, d: Obj, message: str) -> None:
        meta = meta_of(d)
        self.ctx.emit(
            "Normal", "ScalingReplicaSet", f"Deployment/{meta['namespace']}/{meta['name']}", message
        )
