"""The replicaset controller: ``spec.replicas`` pods ``<replicaset>-<5 random chars>``;
surplus pods go unscheduled first, then not yet running, then the newest."""

from __future__ import annotations

from typing import Any

from kgpu.sim.controllers.base import WorkloadController, meta_of
from kgpu.sim.pod_lifecycle import delete_pod

Obj = dict[str, Any]


class ReplicaSetController(WorkloadController):
    kind = "ReplicaSet"

    def reconcile(self, rs: Obj) -> bool:
        meta, spec = meta_of(rs), rs["spec"]
        want = int(spec.get("replicas", 1))
        alive = self._alive(meta["uid"])
        changed = False
        root = self._root(rs)
        missing = 0 if self._backing_off(meta["uid"]) else want - len(alive)
        for _ in range(missing):
            self._new_pod(
                rs, spec["template"], f"{meta['name']}-{self.ctx.suffixes.next()}", root=root
            )
            changed = True
        if len(alive) > want:
            # unscheduled first, then not yet running, then the newest
            ranked = sorted(alive, key=lambda r: (bool(r.node), r.phase == "Running", -r.seq))
            for rec in ranked[: len(alive) - want]:
                delete_pod(self.ctx, rec.key)
            changed = True
        alive = self._alive(meta["uid"])
        running = sum(1 for p in alive if p.phase == "Running")
        self._write_status(
            rs,
            {
                "replicas": len(alive),
                "readyReplicas": running,
                "availableReplicas": running,
                "observedGeneration": meta.get("generation", 1),
            },
        )
        return changed
