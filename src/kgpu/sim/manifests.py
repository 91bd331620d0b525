"""Kubernetes manifests as users have them, checked before anything runs.

Every document is validated up front with the check ``kgpu validate`` runs (the whole scenario
is rejected on the first bad one, with the file, the document's index in it and the field
path), so a simulation never stops half-way on a typo and never runs what ``validate`` refuses.
Kinds fall into three groups: workloads the simulator runs (Pods and the controllers that make
them), kinds other parts of kgpu act on or that change nothing here (stored as they are), and
everything else (stored, and reported as not simulated).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgpu.errors import FieldError, FieldProblem
from kgpu.manifests import validate_manifest
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
        "DeviceTaintRule",
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


def check(obj: object, file: str, index: int) -> Manifest:
    """A :class:`Manifest`, or FieldError locating every problem. Every object is checked as
    ``kgpu validate`` checks it (:func:`kgpu.manifests.validate_manifest`); a kind kgpu does not
    know is stored unchecked, as a cluster with its CRD would take it, unless it is one the
    simulator runs (then the apiVersion must be the one it runs)."""
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    # a kind that is not a string is no workload; validate_manifest names the problem
    problems = validate_manifest(
        obj, unknown_kind_ok=not (isinstance(kind, str) and kind in WORKLOADS)
    )
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
