"""What the stand-in API server serves, per Kubernetes release: kinds, versions, field selectors
and the discovery documents that announce them.

Facts from kube-apiserver, read from the one release table (:mod:`kgpu.releases`, 1.32-1.37):
``resource.k8s.io`` is served as ``v1beta1`` by 1.32, ``v1beta1`` + ``v1beta2`` by 1.33 and
``v1`` + ``v1beta2`` + ``v1beta1`` from 1.34 (with DRA enabled and the beta versions switched
on; before 1.34 DRA is off by default, from 1.34 only ``v1`` is on by default). Field selectors
beyond ``metadata.name`` and ``metadata.namespace`` are the registry's selectable fields (Pods:
``spec.nodeName`` ..., Nodes: ``spec.unschedulable``, ResourceSlices: ``spec.nodeName`` and
``spec.driver``); custom resources have only the two metadata fields.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kgpu import releases

Obj = dict[str, Any]

#: resource.k8s.io versions served by each release, preferred (newest) first.
RELEASES: dict[str, tuple[str, ...]] = {
    rel.name: rel.resource_versions for rel in releases.RELEASES.values()
}
DEFAULT_RELEASE = f"1.{releases.NEWEST}"
DRA_GROUP = "resource.k8s.io"

METADATA_FIELDS = ("metadata.name", "metadata.namespace")
#: Selectable fields whose Go type is bool: a missing one compares as "false".
BOOL_FIELDS = frozenset({"spec.unschedulable", "spec.hostNetwork"})


@dataclass(frozen=True)
class Kind:
    group: str
    versions: tuple[str, ...]  # preferred first
    kind: str
    plural: str
    namespaced: bool
    status: bool
    custom: bool = False
    fields: tuple[str, ...] = ()  # selectable fields besides metadata.name/namespace

    @property
    def selectable(self) -> tuple[str, ...]:
        return METADATA_FIELDS + self.fields

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version


_DRA = ("v1", "v1beta2", "v1beta1")

KINDS: tuple[Kind, ...] = (
    Kind("", ("v1",), "Node", "nodes", False, True, fields=("spec.unschedulable",)),
    Kind(
        "",
        ("v1",),
        "Pod",
        "pods",
        True,
        True,
        fields=(
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
    ),
    Kind("", ("v1",), "ConfigMap", "configmaps", True, False),
    Kind("", ("v1",), "Namespace", "namespaces", False, True, fields=("status.phase",)),
    Kind(
        "",
        ("v1",),
        "Event",
        "events",
        True,
        False,
        fields=(
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ),
    ),
    Kind("apps", ("v1",), "DaemonSet", "daemonsets", True, True),
    Kind("coordination.k8s.io", ("v1",), "Lease", "leases", True, False),
    Kind(
        DRA_GROUP,
        _DRA,
        "ResourceSlice",
        "resourceslices",
        False,
        False,
        fields=("spec.nodeName", "spec.driver"),
    ),
    Kind(DRA_GROUP, _DRA, "ResourceClaim", "resourceclaims", True, True),
    Kind(DRA_GROUP, _DRA, "ResourceClaimTemplate", "resourceclaimtemplates", True, False),
    Kind(DRA_GROUP, _DRA, "DeviceClass", "deviceclasses", False, False),
    Kind("resource.nvidia.com", ("v1beta1",), "ComputeDomain", "computedomains", True, True, True),
    Kind(
        "resource.nvidia.com",
        ("v1beta1",),
        "ComputeDomainClique",
        "computedomaincliques",
        True,
        False,
        True,
    ),
    Kind("nfd.k8s-sigs.io", ("v1alpha1",), "NodeFeature", "nodefeatures", True, False, True),
    Kind("example.com", ("v1",), "Widget", "widgets", True, False, True),
)


def kinds_for(release: str, kinds: tuple[Kind, ...] = KINDS) -> tuple[Kind, ...]:
    """``kinds`` as ``release`` serves them (the DRA group's versions depend on it)."""
    if release not in RELEASES:
        raise ValueError(f"release {release!r}: the stand-in knows {', '.join(RELEASES)}")
    return tuple(
        replace(k, versions=RELEASES[release]) if k.group == DRA_GROUP else k for k in kinds
    )


def _group_version(group: str, version: str) -> Obj:
    return {"groupVersion": f"{group}/{version}", "version": version}


def _groups(kinds: tuple[Kind, ...]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for k in kinds:
        if k.group:
            out.setdefault(k.group, k.versions)
    return out


def api_group(kinds: tuple[Kind, ...], group: str) -> Obj | None:
    """``GET /apis/<group>``: an APIGroup, or None when the group is not served."""
    versions = _groups(kinds).get(group)
    if versions is None:
        return None
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": [_group_version(group, v) for v in versions],
        "preferredVersion": _group_version(group, versions[0]),
    }


def api_group_list(kinds: tuple[Kind, ...]) -> Obj:
    """``GET /apis``."""
    groups = [api_group(kinds, g) for g in _groups(kinds)]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [g for g in groups if g]}


def api_resource_list(kinds: tuple[Kind, ...], group: str, version: str) -> Obj | None:
    """``GET /api/v1`` or ``GET /apis/<group>/<version>``, or None when not served."""
    served = [k for k in kinds if k.group == group and version in k.versions]
    if not served:
        return None
    resources: list[Obj] = []
    verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    for k in served:
        resources.append(
            {
                "name": k.plural,
                "singularName": k.kind.lower(),
                "kind": k.kind,
                "namespaced": k.namespaced,
                "verbs": verbs,
            }
        )
        if k.status:
            resources.append(
                {
                    "name": f"{k.plural}/status",
                    "singularName": "",
                    "kind": k.kind,
                    "namespaced": k.namespaced,
                    "verbs": ["get", "patch", "update"],
                }
            )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def version_info(release: str) -> Obj:
    """``GET /version``."""
    major, minor = release.split(".")
    return {"major": major, "minor": minor, "gitVersion": f"v{release}.0"}
