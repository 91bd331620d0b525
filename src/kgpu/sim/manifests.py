"""Kubernetes manifests as users have them, checked before anything runs.

Every document is validated up front (the whole scenario is rejected on the first bad one, with
the file, the document's index in it and the field path), so a simulation never stops half-way
on a typo. Kinds fall into three groups: workloads the simulator runs (Pods and the controllers
that make them), kinds other parts of kgpu act on or that change nothing here (stored as they
are), and everything else (stored, and reported as not simulated).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgpu.computedomain.api import GROUP as CD_GROUP
from kgpu.computedomain.api import KIND as CD_KIND
from kgpu.computedomain.api import parse_compute_domain
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.sim.podspec import validate_pod_spec
from kgpu.store import group_of
from kgpu.userfiles import read_yaml

Obj = dict[str, Any]

#: kind -> the apiVersions the simulator runs it for.
WORKLOADS: dict[str, tuple[str, ...]] = {
    "Pod": ("v1",),
    "Deployment": ("apps/v1",),
    "ReplicaSet": ("apps/v1",),
    "StatefulSet": ("apps/v1",),
    "DaemonSet": ("apps/v1",),
    "Job": ("batch/v1",),
    "MPIJob": ("kubeflow.org/v2beta1",),
}

#: Kinds stored unchanged: read by plugins (DRA, ComputeDomains) or irrelevant to placement.
PASS_THROUGH = frozenset(
    {
        "ConfigMap",
        "Secret",
        "Namespace",
        "Service",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "PersistentVolumeClaim",
        "PriorityClass",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
        "Ingress",
        "CustomResourceDefinition",
        "ComputeDomain",
        "DeviceClass",
        "ResourceClaim",
        "ResourceClaimTemplate",
        "ResourceSlice",
        "ScaledObject",
        "ServiceMonitor",
        "PodMonitor",
    }
)


@dataclass(frozen=True)
class Manifest:
    """One validated document and where it came from."""

    obj: Obj
    file: str
    index: int

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name", ""))

    @property
    def where(self) -> str:
        return f"{self.file}: document {self.index}" if self.file else f"document {self.index}"


def _problem(message: str, path: str, file: str, index: int) -> FieldProblem:
    return FieldProblem(message, path, file, f"document {index}")


def _int_field(spec: Mapping[str, Any], key: str, path: str, out: list[FieldProblem]) -> None:
    value = spec.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        out.append(FieldProblem(f"{value!r}: must be a non-negative integer", join_path(path, key)))


def _template(obj: Mapping[str, Any], path: str, out: list[FieldProblem]) -> Mapping[str, Any]:
    tpl = obj
    for part in path.split("."):
        tpl = tpl.get(part) if isinstance(tpl, Mapping) else None  # type: ignore[assignment]
    if not isinstance(tpl, Mapping):
        out.append(FieldProblem("is required (a pod template)", path))
        return {}
    meta = tpl.get("metadata") or {}
    if not isinstance(meta, Mapping):
        out.append(FieldProblem("must be a map", join_path(path, "metadata")))
        meta = {}
    labels = meta.get("labels")
    if labels is not None and (
        not isinstance(labels, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
    ):
        out.append(FieldProblem("must be a map of strings", join_path(path, "metadata", "labels")))
    out.extend(validate_pod_spec(tpl.get("spec"), join_path(path, "spec")))
    return tpl


def _selector_matches(obj: Mapping[str, Any], out: list[FieldProblem]) -> None:
    """apps/v1 requires a selector, and it must select the template's labels."""
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    if not isinstance(selector, Mapping):
        out.append(FieldProblem("Required value", "spec.selector"))
        return
    match = selector.get("matchLabels") or {}
    tpl_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not isinstance(match, Mapping) or not isinstance(tpl_labels, Mapping):
        return
    if any(tpl_labels.get(k) != v for k, v in match.items()):
        out.append(
            FieldProblem(
                "`selector` does not match template `labels`", "spec.template.metadata.labels"
            )
        )
    if not match and not selector.get("matchExpressions"):
        out.append(FieldProblem("empty selector is invalid for deployment", "spec.selector"))


def validate_manifest(obj: object) -> list[FieldProblem]:
    """Problems with one document (paths relative to it); empty when it can be applied."""
    if not isinstance(obj, Mapping):
        return [FieldProblem(f"must be a Kubernetes object (a map), not {type(obj).__name__}")]
    out: list[FieldProblem] = []
    kind, api = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not kind:
        out.append(FieldProblem("Required value", "kind"))
    if not isinstance(api, str) or not api:
        out.append(FieldProblem("Required value", "apiVersion"))
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        out.append(FieldProblem("Required value", "metadata"))
        return out
    name = meta.get("name")
    if not (isinstance(name, str) and name) and not meta.get("generateName"):
        out.append(FieldProblem("name or generateName is required", "metadata.name"))
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and (
            not isinstance(value, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        ):
            out.append(FieldProblem("must be a map of strings", join_path("metadata", key)))
    if out or not isinstance(kind, str):
        return out
    if kind in WORKLOADS and api not in WORKLOADS[kind]:
        out.append(
            FieldProblem(
                f"{api!r}: {kind} is simulated for apiVersion {', '.join(WORKLOADS[kind])}",
                "apiVersion",
            )
        )
        return out
    spec = obj.get("spec")
    if kind in WORKLOADS and not isinstance(spec, Mapping):
        out.append(FieldProblem("Required value", "spec"))
        return out
    if kind == "Pod":
        out.extend(validate_pod_spec(spec, "spec"))
    elif kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        assert isinstance(spec, Mapping)
        _int_field(spec, "replicas", "spec", out)
        _template(obj, "spec.template", out)
        _selector_matches(obj, out)
        if kind == "StatefulSet":
            policy = spec.get("podManagementPolicy")
            if policy not in (None, "OrderedReady", "Parallel"):
                out.append(
                    FieldProblem(
                        f"{policy!r}: allowed: OrderedReady, Parallel", "spec.podManagementPolicy"
                    )
                )
    elif kind == "DaemonSet":
        _template(obj, "spec.template", out)
        _selector_matches(obj, out)
    elif kind == "Job":
        assert isinstance(spec, Mapping)
        for key in ("completions", "parallelism", "backoffLimit"):
            _int_field(spec, key, "spec", out)
        mode = spec.get("completionMode")
        if mode not in (None, "NonIndexed", "Indexed"):
            out.append(
                FieldProblem(f"{mode!r}: allowed: NonIndexed, Indexed", "spec.completionMode")
            )
        if mode == "Indexed" and spec.get("completions") is None:
            out.append(
                FieldProblem("must be specified when completionMode is Indexed", "spec.completions")
            )
        tpl = _template(obj, "spec.template", out)
        pod_spec = tpl.get("spec") if tpl else None
        policy = pod_spec.get("restartPolicy") if isinstance(pod_spec, Mapping) else None
        if isinstance(pod_spec, Mapping) and policy not in ("Never", "OnFailure"):
            out.append(
                FieldProblem(
                    f"{policy!r}: a Job's pods need restartPolicy Never or OnFailure",
                    "spec.template.spec.restartPolicy",
                )
            )
    elif kind == "MPIJob":
        assert isinstance(spec, Mapping)
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
            _int_field(rs, "replicas", path, out)
            if role == "Launcher" and rs.get("replicas") not in (None, 1):
                out.append(FieldProblem("must be 1", join_path(path, "replicas")))
            inner: list[FieldProblem] = []
            _template(rs, "template", inner)
            out.extend(FieldProblem(p.message, join_path(path, p.path)) for p in inner)
        _int_field(spec, "slotsPerWorker", "spec", out)
        policy = spec.get("launcherCreationPolicy")
        if policy not in (None, "AtStartup", "WaitForWorkersReady"):
            out.append(
                FieldProblem(
                    f"{policy!r}: allowed: AtStartup, WaitForWorkersReady",
                    "spec.launcherCreationPolicy",
                )
            )
    elif kind == CD_KIND and isinstance(api, str) and group_of(api) == CD_GROUP:
        try:  # the parser the controller uses: a domain that loads here also reconciles
            parse_compute_domain(obj)
        except FieldError as exc:
            out.extend(FieldProblem(p.message, p.path) for p in exc.problems)
    elif kind == "ConfigMap":
        data = obj.get("data")
        if data is not None and (
            not isinstance(data, Mapping) or not all(isinstance(v, str) for v in data.values())
        ):
            out.append(FieldProblem("must be a map of strings", "data"))
    if not out and (kind in WORKLOADS or group_of(str(api)) == "resource.k8s.io"):
        # what kgpu validate checks too (the official schema; an MPIJob's templates as Pods):
        # the simulator's plugins and controllers read these objects as the API server stores
        # them
        from kgpu.config.manifests import validate_manifest as api_checks

        out.extend(
            FieldProblem(p.message, p.path) for p in api_checks(dict(obj), file="", entry="")
        )
    return out


def check(obj: object, file: str, index: int) -> Manifest:
    """A :class:`Manifest`, or FieldError locating every problem."""
    problems = validate_manifest(obj)
    if problems:
        raise FieldError(
            [FieldProblem(p.message, p.path, file, f"document {index}") for p in problems]
        )
    assert isinstance(obj, dict)
    return Manifest(obj, file, index)


def load_manifest_file(path: Path, shown: str | None = None) -> list[Manifest]:
    """Every document of a YAML file, validated. Empty documents are dropped before counting,
    as ``kgpu validate`` counts them, so both name the same document."""
    name = shown or str(path)
    return check_documents(read_yaml(path, shown=name), name)


def check_documents(docs: list[Any], name: str) -> list[Manifest]:
    """:func:`load_manifest_file` on documents already read (``name``: the file they are from)."""
    out: list[Manifest] = []
    for index, doc in enumerate(docs):
        if (
            isinstance(doc, Mapping)
            and doc.get("kind") == "List"
            and isinstance(doc.get("items"), list)
        ):
            out.extend(check(item, name, index) for item in doc["items"])
            continue
        out.append(check(doc, name, index))
    return out


def simulated(kind: str) -> bool:
    return kind in WORKLOADS


def passes_through(kind: str) -> bool:
    return kind in PASS_THROUGH
