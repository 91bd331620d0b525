"""The MPI operator (Kubeflow ``mpi-operator``, v2beta1): an MPIJob's workers
``<job>-worker-<i>`` (a gang: placed all or none) and its launcher, a Job ``<job>-launcher``,
created at start or once every worker runs (``launcherCreationPolicy``)."""

from __future__ import annotations

import copy
from typing import Any

from kgpu.sim.context import SimContext
from kgpu.sim.controllers.base import (
    ROOT_ANNOTATION,
    StatusCache,
    WorkloadController,
    meta_of,
    owner_ref,
)
from kgpu.sim.pod_lifecycle import delete_pod
from kgpu.store import NotFound

Obj = dict[str, Any]


class MPIJobController(WorkloadController):
    kind = "MPIJob"

    def __init__(self, ctx: SimContext, status: StatusCache) -> None:
        super().__init__(ctx, status)
        self._warned: set[str] = set()  # MPIJobs told they have no launcher

    def reconcile(self, job: Obj) -> bool:
        meta, spec = meta_of(job), job["spec"]
        name, ns, uid = meta["name"], meta["namespace"], meta["uid"]
        specs = spec["mpiReplicaSpecs"]
        worker = specs["Worker"]
        replicas = int(worker.get("replicas", 1))
        gang = f"{ns}/{name}"
        by_index = {
            int(r.name.rsplit("-", 1)[1]): r
            for r in self._alive(uid)
            if r.obj["metadata"]["labels"].get("training.kubeflow.org/job-role") == "worker"
        }
        changed = False
        for i in range(replicas):
            if i in by_index:
                continue
            tpl = copy.deepcopy(worker["template"])
            tpl["spec"].setdefault("hostname", f"{name}-worker-{i}")
            tpl["spec"].setdefault("subdomain", name)
            by_index[i] = self._new_pod(
                job,
                tpl,
                f"{name}-worker-{i}",
                {
                    "training.kubeflow.org/job-name": name,
                    "training.kubeflow.org/job-role": "worker",
                    "training.kubeflow.org/operator-name": "mpi-operator",
                    "training.kubeflow.org/replica-index": str(i),
                    "training.kubeflow.org/replica-type": "worker",
                },
                gang=gang,
                gang_size=replicas,
                root=self._root(job),
            )
            changed = True
        for i in sorted(by_index, reverse=True):
            if i >= replicas:
                delete_pod(self.ctx, by_index.pop(i).key)
                changed = True
        workers_ready = bool(by_index) and all(r.phase == "Running" for r in by_index.values())
        launcher = specs.get("Launcher")
        if launcher is None:
            if uid not in self._warned:
                self._warned.add(uid)
                self.ctx.emit(
                    "Warning",
                    "NoLauncher",
                    f"MPIJob/{ns}/{name}",
                    "MPIJob has no Launcher replica spec; only its workers are simulated",
                )
        elif spec.get("launcherCreationPolicy", "AtStartup") == "AtStartup" or workers_ready:
            try:
                self.ctx.store.get("batch/v1", "Job", f"{name}-launcher", ns)
            except NotFound:
                tpl = copy.deepcopy(launcher["template"])
                tpl.setdefault("spec", {}).setdefault("restartPolicy", "OnFailure")
                tpl.setdefault("metadata", {}).setdefault("labels", {}).update(
                    {
                        "training.kubeflow.org/job-name": name,
                        "training.kubeflow.org/job-role": "launcher",
                        "training.kubeflow.org/operator-name": "mpi-operator",
                        "training.kubeflow.org/replica-type": "launcher",
                    }
                )
                launcher_job: Obj = {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": f"{name}-launcher",
                        "namespace": ns,
                        "labels": dict(tpl["metadata"]["labels"]),
                        "annotations": {ROOT_ANNOTATION: self._root(job)},
                        "ownerReferences": [owner_ref(job)],
                    },
                    "spec": {
                        "completions": 1,
                        "parallelism": 1,
                        "backoffLimit": 6,
                        "template": tpl,
                    },
                }
                with self.ctx.store.muted():
                    self.ctx.store.create(launcher_job)
                changed = True
        conditions = [{"type": "Created", "status": "True"}]
        if workers_ready:
            conditions.append({"type": "Running", "status": "True"})
        self._write_status(
            job,
            {
                "conditions": conditions,
                "replicaStatuses": {
                    "Worker": {"active": sum(1 for r in by_index.values() if r.phase == "Running")}
                },
            },
        )
        return changed
