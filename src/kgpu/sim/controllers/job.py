"""The job controller: pods until ``completions`` succeed (``parallelism`` at a time), named
``<job>-<5 chars>`` (Indexed Jobs ``<job>-<index>-<5 chars>``); ``backoffLimit`` failures fail
the Job; a suspended Job has no pods."""

from __future__ import annotations

from typing import Any

from kgpu.sim.controllers.base import WorkloadController, meta_of
from kgpu.sim.pod_lifecycle import delete_pod

Obj = dict[str, Any]


class JobController(WorkloadController):
    kind = "Job"

    def reconcile(self, job: Obj) -> bool:
        meta, spec = meta_of(job), job["spec"]
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
                delete_pod(self.ctx, rec.key)
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
                self.ctx.emit(
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
                delete_pod(self.ctx, rec.key)
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
                        f"{name}-{index}-{self.ctx.suffixes.next()}",
                        {**labels, "batch.kubernetes.io/job-completion-index": str(index)},
                        {"batch.kubernetes.io/job-completion-index": str(index)},
                        root=root,
                    )
                else:
                    self._new_pod(
                        job,
                        spec["template"],
                        f"{name}-{self.ctx.suffixes.next()}",
                        labels,
                        root=root,
                    )
                changed = True
            status["active"] = len(self._alive(uid))
        if done:
            status["conditions"] = [{"type": "Complete", "status": "True"}]
            status["completionTime"] = self.ctx.timestamp()
            prev = job.get("status") or {}
            if prev.get("conditions"):
                status["completionTime"] = prev.get("completionTime", status["completionTime"])
            elif not self._status.get(("Job", meta["namespace"], name), {}).get("conditions"):
                self.ctx.emit(
                    "Normal", "Completed", f"Job/{meta['namespace']}/{name}", "Job completed"
                )
        self._write_status(job, status)
        return changed
