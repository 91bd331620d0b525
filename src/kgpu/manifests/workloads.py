"""The kinds that make pods, as the API server (and the MPI operator, for MPIJobs) validate
them beyond the schema: counts that are non-negative integers, a selector that selects the
template's labels, enums (``podManagementPolicy``, ``completionMode``, update strategies), the
restart policy a controller allows its pods, and every pod template checked as a pod.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kgpu.errors import FieldProblem, join_path
from kgpu.manifests import schema
from kgpu.manifests.podspec import (
    Problems,
    enum_problem,
    label_map_problems,
    validate_pod_spec,
    validate_pod_template,
)

Checker = Callable[[Mapping[str, Any]], Problems]


def _count(spec: Mapping[str, Any], key: str, path: str, out: Problems) -> None:
    value = spec.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        out.append(FieldProblem(f"{value!r}: must be a non-negative integer", join_path(path, key)))


def _selector(spec: Mapping[str, Any], kind: str, out: Problems) -> None:
    """apps/v1 requires a selector, and it must select the template's labels."""
    selector = spec.get("selector")
    if not isinstance(selector, Mapping):
        out.append(FieldProblem("is required (matchLabels of the pod template)", "spec.selector"))
        return
    match = selector.get("matchLabels") or {}
    label_map_problems(match, "spec.selector.matchLabels", out)
    template = spec.get("template")
    meta = template.get("metadata") if isinstance(template, Mapping) else None
    labels = (meta.get("labels") if isinstance(meta, Mapping) else None) or {}
    if not isinstance(match, Mapping) or not isinstance(labels, Mapping):
        return
    if any(labels.get(k) != v for k, v in match.items()):
        out.append(
            FieldProblem(
                "`selector` does not match template `labels`", "spec.template.metadata.labels"
            )
        )
    if not match and not selector.get("matchExpressions"):
        out.append(FieldProblem(f"empty selector is invalid for {kind.lower()}", "spec.selector"))


def _spec(obj: Mapping[str, Any], out: Problems) -> Mapping[str, Any] | None:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        out.append(FieldProblem("is required (a map)", "spec"))
        return None
    return spec


def pod(obj: Mapping[str, Any]) -> Problems:
    return validate_pod_spec(obj.get("spec"), "spec")


def pod_template(obj: Mapping[str, Any]) -> Problems:
    out: Problems = []
    validate_pod_template(obj.get("template"), "template", out)
    return out


def _replicated(
    obj: Mapping[str, Any], strategies: tuple[str, str, tuple[str, ...]] | None
) -> Problems:
    """Deployment, ReplicaSet, StatefulSet, DaemonSet: pods that restart Always."""
    out: Problems = []
    spec = _spec(obj, out)
    if spec is None:
        return out
    kind = str(obj.get("kind"))
    if kind != "DaemonSet":
        _count(spec, "replicas", "spec", out)
    validate_pod_template(
        spec.get("template"), "spec.template", out, f"a {kind}'s", restart_policies=("Always",)
    )
    _selector(spec, kind, out)
    if strategies is not None:
        field, key, allowed = strategies
        strategy = spec.get(field)
        if isinstance(strategy, Mapping):
            enum_problem(strategy.get(key), allowed, f"spec.{field}.{key}", out)
    return out


def deployment(obj: Mapping[str, Any]) -> Problems:
    return _replicated(obj, ("strategy", "type", ("Recreate", "RollingUpdate")))


def replica_set(obj: Mapping[str, Any]) -> Problems:
    return _replicated(obj, None)


def daemon_set(obj: Mapping[str, Any]) -> Problems:
    return _replicated(obj, ("updateStrategy", "type", ("RollingUpdate", "OnDelete")))


def stateful_set(obj: Mapping[str, Any]) -> Problems:
    out = _replicated(obj, ("updateStrategy", "type", ("RollingUpdate", "OnDelete")))
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        enum_problem(
            spec.get("podManagementPolicy"),
            ("OrderedReady", "Parallel"),
            "spec.podManagementPolicy",
            out,
        )
    return out


def replication_controller(obj: Mapping[str, Any]) -> Problems:
    out: Problems = []
    spec = _spec(obj, out)
    if spec is not None:
        _count(spec, "replicas", "spec", out)
        validate_pod_template(
            spec.get("template"), "spec.template", out, "a ReplicationController's", ("Always",)
        )
    return out


def _job_spec(spec: Mapping[str, Any], path: str, out: Problems) -> None:
    for key in ("completions", "parallelism", "backoffLimit"):
        _count(spec, key, path, out)
    mode = spec.get("completionMode")
    enum_problem(mode, ("NonIndexed", "Indexed"), join_path(path, "completionMode"), out)
    if mode == "Indexed" and spec.get("completions") is None:
        out.append(
            FieldProblem(
                "must be specified when completionMode is Indexed", join_path(path, "completions")
            )
        )
    validate_pod_template(
        spec.get("template"), join_path(path, "template"), out, "a Job's", ("Never", "OnFailure")
    )


def job(obj: Mapping[str, Any]) -> Problems:
    out: Problems = []
    spec = _spec(obj, out)
    if spec is not None:
        _job_spec(spec, "spec", out)
    return out


def cron_job(obj: Mapping[str, Any]) -> Problems:
    out: Problems = []
    spec = _spec(obj, out)
    if spec is None:
        return out
    enum_problem(
        spec.get("concurrencyPolicy"),
        ("Allow", "Forbid", "Replace"),
        "spec.concurrencyPolicy",
        out,
    )
    template = spec.get("jobTemplate")
    inner = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(inner, Mapping):
        out.append(FieldProblem("is required (a Job spec)", "spec.jobTemplate.spec"))
    else:
        _job_spec(inner, "spec.jobTemplate.spec", out)
    return out


MPI_SPEC_KEYS = (
    "slotsPerWorker",
    "runLauncherAsWorker",
    "runPolicy",
    "mpiReplicaSpecs",
    "sshAuthMountPath",
    "launcherCreationPolicy",
    "mpiImplementation",
)


def mpi_job(obj: Mapping[str, Any]) -> Problems:
    """Kubeflow's MPIJob (``kubeflow.org/v2beta1``): the CRD's fields and enums, a Worker
    replica spec (the gang the scheduler places), at most one launcher."""
    out: Problems = []
    spec = _spec(obj, out)
    if spec is None:
        return out
    for key in spec:
        if key not in MPI_SPEC_KEYS:
            out.append(
                FieldProblem(
                    f"unknown field (allowed: {', '.join(sorted(MPI_SPEC_KEYS))})",
                    join_path("spec", str(key)),
                )
            )
    _count(spec, "slotsPerWorker", "spec", out)
    enum_problem(
        spec.get("launcherCreationPolicy"),
        ("AtStartup", "WaitForWorkersReady"),
        "spec.launcherCreationPolicy",
        out,
    )
    enum_problem(
        spec.get("mpiImplementation"), ("OpenMPI", "Intel", "MPICH"), "spec.mpiImplementation", out
    )
    specs = spec.get("mpiReplicaSpecs")
    if not isinstance(specs, Mapping) or "Worker" not in specs:
        out.append(FieldProblem("must have a Worker replica spec", "spec.mpiReplicaSpecs"))
        return out
    for role, rs in specs.items():
        path = join_path("spec", "mpiReplicaSpecs", str(role))
        if role not in ("Launcher", "Worker"):
            out.append(FieldProblem(f"{role!r}: allowed: Launcher, Worker", path))
            continue
        if not isinstance(rs, Mapping):
            out.append(FieldProblem("must be a map", path))
            continue
        for key in rs:
            if key not in ("replicas", "template", "restartPolicy"):
                out.append(
                    FieldProblem(
                        "unknown field (allowed: replicas, restartPolicy, template)",
                        join_path(path, str(key)),
                    )
                )
        _count(rs, "replicas", path, out)
        enum_problem(
            rs.get("restartPolicy"),
            ("Always", "OnFailure", "Never", "ExitCode"),
            join_path(path, "restartPolicy"),
            out,
        )
        if role == "Launcher" and rs.get("replicas") not in (None, 1):
            out.append(FieldProblem("must be 1", join_path(path, "replicas")))
        template = validate_pod_template(rs.get("template"), join_path(path, "template"), out)
        _pod_schema(template.get("spec"), join_path(path, "template", "spec"), out)
    return out


def _pod_schema(spec: object, path: str, out: Problems) -> None:
    """A custom kind's pod template spec against the official Pod schema (the MPIJob CRD embeds
    PodTemplateSpec, so the API server checks it as Kubernetes' own kinds' templates are),
    at the fields the rules did not already report."""
    if not isinstance(spec, Mapping):
        return  # the rules said so
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "template"}, "spec": spec}
    try:
        found = schema.schema_problems(pod)
    except schema.NoSchema:  # pragma: no cover - the Pod schema ships with the package
        return
    spoken = {p.path for p in out}
    for at, message in found or ():
        rel = at.removeprefix("spec").lstrip(".") if at.startswith("spec") else at
        where = join_path(path, rel) if rel else path
        if where not in spoken and at != "metadata":
            out.append(FieldProblem(message, where))


#: (apiVersion, kind) -> its rules.
WORKLOAD_RULES: dict[tuple[str, str], Checker] = {
    ("v1", "Pod"): pod,
    ("v1", "PodTemplate"): pod_template,
    ("v1", "ReplicationController"): replication_controller,
    ("apps/v1", "Deployment"): deployment,
    ("apps/v1", "ReplicaSet"): replica_set,
    ("apps/v1", "StatefulSet"): stateful_set,
    ("apps/v1", "DaemonSet"): daemon_set,
    ("batch/v1", "Job"): job,
    ("batch/v1", "CronJob"): cron_job,
    ("kubeflow.org/v2beta1", "MPIJob"): mpi_job,
}

__all__ = ["MPI_SPEC_KEYS", "WORKLOAD_RULES", "Checker"]
