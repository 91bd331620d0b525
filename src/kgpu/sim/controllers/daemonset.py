"""The daemonset controller: one pod per node the pod template may run on (node selector,
affinity, taints with the daemon tolerations added), pinned to its node by a
``metadata.name`` node affinity, as the real controller does."""

from __future__ import annotations

import copy
from typing import Any

from kgpu.sim.controllers.base import WorkloadController, meta_of
from kgpu.sim.names import template_hash
from kgpu.sim.pod_lifecycle import delete_pod
from kgpu.sim.podspec import pod_requirements
from kgpu.sim.scheduler import static_reasons
from kgpu.sim.state import PodRecord

Obj = dict[str, Any]

#: Tolerations the DaemonSet controller adds to every daemon pod.
DAEMON_TOLERATIONS: list[Obj] = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


class DaemonSetController(WorkloadController):
    kind = "DaemonSet"

    def reconcile(self, ds: Obj) -> bool:
        meta, spec = meta_of(ds), ds["spec"]
        uid = meta["uid"]
        template = copy.deepcopy(spec["template"])
        pod_spec = template.setdefault("spec", {})
        tolerations = list(pod_spec.get("tolerations") or [])
        tolerations += [t for t in DAEMON_TOLERATIONS if t not in tolerations]
        pod_spec["tolerations"] = tolerations
        req = pod_requirements({"spec": pod_spec})
        existing: dict[str, PodRecord] = {}
        changed = False
        for rec in self._alive(uid):
            target = rec.obj["metadata"].get("annotations", {}).get("sim.kgpu.dev/daemon-node", "")
            if target in existing:
                delete_pod(self.ctx, rec.key)
                changed = True
            else:
                existing[target] = rec
        wanted = set()
        for node in self.ctx.nodes:
            if static_reasons(req, node.labels, node.taints, False, node.name):
                continue
            wanted.add(node.name)
            if node.name in existing:
                continue
            tpl = copy.deepcopy(template)
            tpl["spec"]["affinity"] = {
                **(tpl["spec"].get("affinity") or {}),
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [node.name],
                                    }
                                ]
                            }
                        ]
                    }
                },
            }
            self._new_pod(
                ds,
                tpl,
                f"{meta['name']}-{self.ctx.suffixes.next()}",
                {
                    "controller-revision-hash": template_hash(spec["template"]),
                    "pod-template-generation": str(meta.get("generation", 1)),
                },
                {"sim.kgpu.dev/daemon-node": node.name},
                root=self._root(ds),
            )
            changed = True
        for target, rec in existing.items():
            if target not in wanted:
                delete_pod(self.ctx, rec.key)
                changed = True
        pods = self._alive(uid)
        running = sum(1 for r in pods if r.phase == "Running")
        self._write_status(
            ds,
            {
                "desiredNumberScheduled": len(wanted),
                "currentNumberScheduled": sum(1 for r in pods if r.node),
                "numberReady": running,
                "numberAvailable": running,
                "numberMisscheduled": 0,
            },
        )
        return changed
