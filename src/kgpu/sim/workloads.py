"""The controllers that turn workloads into pods, as kube-controller-manager and the MPI
operator do, reading the simulator's store and its pod index.

Names follow the real controllers: a Deployment's ReplicaSet is ``<deployment>-<template
hash>``; ReplicaSet, Job and DaemonSet pods are ``<owner>-<5 random chars>`` (Indexed Jobs
``<job>-<index>-<5 chars>``); StatefulSet pods ``<name>-<ordinal>``, created one at a time
under ``OrderedReady``; an MPIJob's workers ``<job>-worker-<i>`` (a gang: placed all or none)
and its launcher a Job ``<job>-launcher``. Simplifications, stated: a template change replaces
the old ReplicaSet at once (no rolling surge), and pods only end when a scenario's ``runtimes``
say so or they are evicted.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kgpu.dra.api import RESOURCE_API
from kgpu.sim.names import template_hash
from kgpu.sim.podspec import pod_requirements
from kgpu.sim.scheduler import static_reasons
from kgpu.sim.state import PodRecord
from kgpu.store import NotFound

if TYPE_CHECKING:
    from kgpu.sim.simulation import Simulation

Obj = dict[str, Any]

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
OWNED_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "MPIJob")

#: Tolerations the DaemonSet controller adds to every daemon pod.
DAEMON_TOLERATIONS: list[Obj] = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def _meta(obj: Mapping[str, Any]) -> Obj:
    return obj.get("metadata") or {}


def owner_ref(obj: Mapping[str, Any], block: bool = True) -> Obj:
    meta = _meta(obj)
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": block,
    }


def controller_uid(obj: Mapping[str, Any]) -> str:
    for ref in _meta(obj).get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("uid", ""))
    return ""


class Workloads:
    """Reconciles every workload kind once per call; True when anything changed."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self._status: dict[tuple[str, str, str], Any] = {}
        self._warned: set[str] = set()

    # -- helpers -----------------------------------------------------------------------------
    def _alive(self, uid: str) -> list[PodRecord]:
        return [r for r in self.sim.pods_by_owner.get(uid, {}).values() if not r.finished]

    def _pods(self, uid: str) -> list[PodRecord]:
        return list(self.sim.pods_by_owner.get(uid, {}).values())

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
                "namespace": _meta(owner).get("namespace", "default"),
                "labels": labels,
                "ownerReferences": [owner_ref(owner)],
            },
            "spec": copy.deepcopy(template.get("spec") or {}),
            "status": {"phase": "Pending"},
        }
        notes = {**(tmeta.get("annotations") or {}), **(annotations or {})}
        if notes:
            pod["metadata"]["annotations"] = notes
        return self.sim.create_pod(
            pod,
            owner_kind=owner["kind"],
            owner_uid=_meta(owner)["uid"],
            gang=gang,
            gang_size=gang_size,
            root=root or _meta(owner)["name"],
        )

    def _backing_off(self, uid: str) -> bool:
        """A pod of this owner was rejected by a kubelet at the current time: like the
        controllers' rate-limited queues, replace it only once the clock moves on."""
        now = self.sim.now
        return any(
            r.failed_at is not None and r.failed_at >= now
            for r in self.sim.pods_by_owner.get(uid, {}).values()
        )

    def _write_status(self, obj: Obj, status: Obj) -> bool:
        meta = _meta(obj)
        key = (obj["kind"], meta.get("namespace", ""), meta["name"])
        if self._status.get(key) == status and obj.get("status") == status:
            return False
        self._status[key] = status
        if obj.get("status") == status:
            return False
        obj["status"] = status
        obj["metadata"].pop("resourceVersion", None)
        with self.sim.store.muted():
            self.sim.store.update(obj)
        return False  # status alone never needs another round

    def _list(self, kind: str) -> list[Obj]:
        return [
            o
            for o in self.sim.store.list(API_VERSIONS[kind], kind)
            if not _meta(o).get("deletionTimestamp")
        ]

    def _root(self, obj: Mapping[str, Any]) -> str:
        """The name the user applied (a Deployment's, not its ReplicaSet's): ``runtimes`` key."""
        ann = _meta(obj).get("annotations") or {}
        return str(ann.get("sim.kgpu.dev/root") or _meta(obj)["name"])

    # -- reconcile ---------------------------------------------------------------------------
    def reconcile(self) -> bool:
        changed = False
        live: set[str] = set()
        kinds: dict[str, list[Obj]] = {}
        for kind in ("MPIJob", "Deployment"):
            kinds[kind] = self._list(kind)
        for obj in kinds["MPIJob"]:
            live.add(_meta(obj)["uid"])
            changed |= self._mpijob(obj)
        for obj in kinds["Deployment"]:
            live.add(_meta(obj)["uid"])
            changed |= self._deployment(obj)
        for kind, fn in (
            ("ReplicaSet", self._replicaset),
            ("Job", self._job),
            ("StatefulSet", self._statefulset),
            ("DaemonSet", self._daemonset),
        ):
            for obj in self._list(kind):
                owner = controller_uid(obj)
                if owner and owner not in live and self._owner_kind(obj) in OWNED_KINDS:
                    with self.sim.store.muted():
                        self.sim.store.delete(
                            obj["apiVersion"], kind, _meta(obj)["name"], _meta(obj)["namespace"]
                        )
                    changed = True
                    continue
                live.add(_meta(obj)["uid"])
                changed |= fn(obj)
        for rec in list(self.sim.pods.values()):
            if rec.owner_kind in OWNED_KINDS and rec.owner_uid not in live:
                self.sim.delete_pod(rec.key)
                changed = True
        return changed

    def _owner_kind(self, obj: Mapping[str, Any]) -> str:
        for ref in _meta(obj).get("ownerReferences") or ():
            if ref.get("controller"):
                return str(ref.get("kind", ""))
        return ""

    def _scale_replica_set(self, d: Obj, rs: Obj, replicas: int) -> None:
        """The deployment controller resizes one of its ReplicaSets."""
        old = rs["spec"].get("replicas")
        rs["spec"]["replicas"] = replicas
        with self.sim.store.muted():
            self.sim.store.update(rs)
        verb = "up" if replicas > (old or 0) else "down"
        self._scaled(d, f"Scaled {verb} replica set {_meta(rs)['name']} from {old} to {replicas}")

    def _scaled(self, d: Obj, message: str) -> None:
        meta = _meta(d)
        self.sim.emit(
            "Normal", "ScalingReplicaSet", f"Deployment/{meta['namespace']}/{meta['name']}", message
        )

    def _deployment(self, d: Obj) -> bool:
        meta, spec = _meta(d), d["spec"]
        replicas = int(spec.get("replicas", 1))
        template = spec["template"]
        h = template_hash(template)
        rs_name = f"{meta['name']}-{h}"
        ns = meta["namespace"]
        owned = [
            rs
            for rs in self.sim.store.list("apps/v1", "ReplicaSet", ns)
            if controller_uid(rs) == meta["uid"]
        ]
        changed = False
        current = next((rs for rs in owned if _meta(rs)["name"] == rs_name), None)
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
                        "sim.kgpu.dev/root": self._root(d),
                    },
                    "ownerReferences": [owner_ref(d)],
                },
                "spec": {"replicas": replicas, "selector": selector, "template": tpl},
            }
            with self.sim.store.muted():
                self.sim.store.create(rs)
            self._scaled(d, f"Scaled up replica set {rs_name} from 0 to {replicas}")
            changed = True
        elif current["spec"].get("replicas") != replicas:
            self._scale_replica_set(d, current, replicas)
            changed = True
        for rs in owned:
            if _meta(rs)["name"] != rs_name and rs["spec"].get("replicas"):
                self._scale_replica_set(d, rs, 0)
                changed = True
        pods = [p for rs in owned for p in self._alive(_meta(rs)["uid"])]
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

    def _replicaset(self, rs: Obj) -> bool:
        meta, spec = _meta(rs), rs["spec"]
        want = int(spec.get("replicas", 1))
        alive = self._alive(meta["uid"])
        changed = False
        root = self._root(rs)
        missing = 0 if self._backing_off(meta["uid"]) else want - len(alive)
        for _ in range(missing):
            self._new_pod(
                rs, spec["template"], f"{meta['name']}-{self.sim.suffixes.next()}", root=root
            )
            changed = True
        if len(alive) > want:
            # unscheduled first, then not yet running, then the newest
            ranked = sorted(alive, key=lambda r: (bool(r.node), r.phase == "Running", -r.seq))
            for rec in ranked[: len(alive) - want]:
                self.sim.delete_pod(rec.key)
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

    def _job(self, job: Obj) -> bool:
        meta, spec = _meta(job), job["spec"]
        uid, name = meta["uid"], meta["name"]
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        pods = self._pods(uid)
        succeeded = [p for p in pods if p.phase == "Succeeded"]
        failed = [p for p in pods if p.phase == "Failed"]
        active = [p for p in pods if not p.finished]
        status: Obj = {"active": len(active), "succeeded": len(succeeded)}
        if failed:
            status["failed"] = len(failed)
        if len(failed) > int(spec.get("backoffLimit", 6)):
            for rec in active:
                self.sim.delete_pod(rec.key)
            status["active"] = 0
            status["conditions"] = [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                }
            ]
            if not any(
                c.get("type") == "Failed" for c in (job.get("status") or {}).get("conditions") or ()
            ):
                self.sim.emit(
                    "Warning",
                    "BackoffLimitExceeded",
                    f"Job/{meta['namespace']}/{name}",
                    "Job has reached the specified backoff limit",
                )
            self._write_status(job, status)
            return bool(active)
        done = (
            len(succeeded) >= int(completions)
            if completions is not None
            else bool(succeeded) and not active
        )
        changed = False
        if spec.get("suspend"):
            for rec in active:
                self.sim.delete_pod(rec.key)
                changed = True
            status["active"] = 0
        elif not done:
            if completions is None:
                want = parallelism if not succeeded else 0
            else:
                want = min(parallelism, int(completions) - len(succeeded))
            labels = {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
            indexed = spec.get("completionMode") == "Indexed"
            taken = {
                int(
                    (p.obj["metadata"].get("annotations") or {}).get(
                        "batch.kubernetes.io/job-completion-index", -1
                    )
                )
                for p in pods
                if p.phase != "Failed"
            }
            free_indexes = [i for i in range(int(completions or 0)) if i not in taken]
            root = self._root(job)
            missing = 0 if self._backing_off(uid) else want - len(active)
            for _ in range(missing):
                if indexed:
                    if not free_indexes:
                        break
                    index = free_indexes.pop(0)
                    self._new_pod(
                        job,
                        spec["template"],
                        f"{name}-{index}-{self.sim.suffixes.next()}",
                        {**labels, "batch.kubernetes.io/job-completion-index": str(index)},
                        {"batch.kubernetes.io/job-completion-index": str(index)},
                        root=root,
                    )
                else:
                    self._new_pod(
                        job,
                        spec["template"],
                        f"{name}-{self.sim.suffixes.next()}",
                        labels,
                        root=root,
                    )
                changed = True
            status["active"] = len(self._alive(uid))
        if done:
            status["conditions"] = [{"type": "Complete", "status": "True"}]
            status["completionTime"] = self.sim.timestamp()
            prev = job.get("status") or {}
            if prev.get("conditions"):
                status["completionTime"] = prev.get("completionTime", status["completionTime"])
            elif not self._status.get(("Job", meta["namespace"], name), {}).get("conditions"):
                self.sim.emit(
                    "Normal", "Completed", f"Job/{meta['namespace']}/{name}", "Job completed"
                )
        self._write_status(job, status)
        return changed

    def _statefulset(self, sts: Obj) -> bool:
        meta, spec = _meta(sts), sts["spec"]
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
                self.sim.delete_pod(by_ordinal.pop(i).key)
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

    def _daemonset(self, ds: Obj) -> bool:
        meta, spec = _meta(ds), ds["spec"]
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
                self.sim.delete_pod(rec.key)
                changed = True
            else:
                existing[target] = rec
        wanted = set()
        for node in self.sim.nodes:
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
                f"{meta['name']}-{self.sim.suffixes.next()}",
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
                self.sim.delete_pod(rec.key)
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

    def _mpijob(self, job: Obj) -> bool:
        meta, spec = _meta(job), job["spec"]
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
                self.sim.delete_pod(by_index.pop(i).key)
                changed = True
        workers_ready = bool(by_index) and all(r.phase == "Running" for r in by_index.values())
        launcher = specs.get("Launcher")
        if launcher is None:
            if uid not in self._warned:
                self._warned.add(uid)
                self.sim.emit(
                    "Warning",
                    "NoLauncher",
                    f"MPIJob/{ns}/{name}",
                    "MPIJob has no Launcher replica spec; only its workers are simulated",
                )
        elif spec.get("launcherCreationPolicy", "AtStartup") == "AtStartup" or workers_ready:
            try:
                self.sim.store.get("batch/v1", "Job", f"{name}-launcher", ns)
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
                        "annotations": {"sim.kgpu.dev/root": self._root(job)},
                        "ownerReferences": [owner_ref(job)],
                    },
                    "spec": {
                        "completions": 1,
                        "parallelism": 1,
                        "backoffLimit": 6,
                        "template": tpl,
                    },
                }
                with self.sim.store.muted():
                    self.sim.store.create(launcher_job)
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
