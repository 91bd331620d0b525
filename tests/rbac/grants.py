"""What a chart's rendered RBAC objects let one ServiceAccount do, evaluated as kube-apiserver's
RBAC authorizer does (k8s.io/kubernetes plugin/pkg/auth/authorizer/rbac: a ClusterRoleBinding
grants its role everywhere; a RoleBinding grants its Role, or a ClusterRole it names, only in
the binding's namespace; ``*`` matches any verb, group or resource, ``*/<sub>`` any resource's
subresource; ``resourceNames`` restrict a rule to those names, so a request naming nothing, a
create or an unselected list, is not covered by it), plus the nonResourceURLs every
authenticated client has from the default ``system:discovery`` ClusterRole.

A request shape is a :class:`~kgpu.testing.apiserver.ledger.Use` from the stand-in's ledger,
with the names it was seen with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.testing.apiserver.ledger import Use

Obj = Mapping[str, Any]

#: kube-apiserver's default ``system:discovery`` ClusterRole, bound to ``system:authenticated``
#: (plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go): ``get`` on these URLs only.
DISCOVERY_URLS = (
    "/livez",
    "/readyz",
    "/healthz",
    "/version",
    "/version/",
    "/openapi",
    "/openapi/*",
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
)


@dataclass(frozen=True, order=True)
class Atom:
    """One verb on one group's resource, or on one non-resource URL: the unit "unused"
    reports name."""

    verb: str
    group: str = ""
    resource: str = ""
    url: str = ""

    def __str__(self) -> str:
        if self.url:
            return f"{self.verb} {self.url}"
        return f"{self.verb} {self.resource} ({self.group or 'core'})"


@dataclass(frozen=True)
class Grant:
    """One PolicyRule as bound to the account: where it applies (``namespace`` None: every
    namespace and the cluster scope) and which objects granted it."""

    verbs: tuple[str, ...]
    groups: tuple[str, ...]
    resources: tuple[str, ...]
    names: tuple[str, ...]
    urls: tuple[str, ...]
    namespace: str | None
    source: str  # "ClusterRole/x via ClusterRoleBinding/y"

    def atoms(self) -> Iterable[Atom]:
        for verb in self.verbs:
            for group in self.groups:
                for resource in self.resources:
                    yield Atom(verb, group, resource)
            if self.namespace is None:  # a RoleBinding grants no non-resource URL
                for url in self.urls:
                    yield Atom(verb, url=url)

    def where(self) -> str:
        return "cluster-wide" if self.namespace is None else f"in namespace {self.namespace}"


def _resource(pattern: str, resource: str, subresource: str) -> bool:
    combined = f"{resource}/{subresource}" if subresource else resource
    return pattern in ("*", combined) or (bool(subresource) and pattern == f"*/{subresource}")


def _url(pattern: str, path: str) -> bool:
    if pattern.endswith("*"):
        return path.startswith(pattern[:-1])
    return pattern == path


def atom_covers(atom: Atom, grant: Grant, use: Use, names: frozenset[str] | None) -> bool:
    """Whether ``atom`` of ``grant`` allows every request of the shape ``use``, seen with
    ``names`` (None: more names than the ledger keeps)."""
    if atom.verb not in ("*", use.verb):
        return False
    if not use.resource:
        return bool(atom.url) and _url(atom.url, use.url)
    if not atom.resource or atom.group not in ("*", use.group):
        return False
    if not _resource(atom.resource, use.resource, use.subresource):
        return False
    if grant.namespace is not None and use.namespace != grant.namespace:
        return False
    if grant.names:
        return names is not None and "" not in names and names <= set(grant.names)
    return True


def covered(grant: Grant, use: Use, names: frozenset[str] | None) -> bool:
    """Whether ``grant`` allows every request of the shape ``use``."""
    return any(atom_covers(atom, grant, use, names) for atom in grant.atoms())


def discovery_allows(use: Use) -> bool:
    """Whether the default discovery role lets any authenticated client make ``use``."""
    return (
        not use.resource
        and use.verb == "get"
        and any(_url(pattern, use.url) for pattern in DISCOVERY_URLS)
    )


def _rules(role: Obj, namespace: str | None, source: str) -> list[Grant]:
    out = []
    for rule in role.get("rules") or []:
        out.append(
            Grant(
                verbs=tuple(rule.get("verbs") or ()),
                groups=tuple(rule.get("apiGroups") or ()),
                resources=tuple(rule.get("resources") or ()),
                names=tuple(rule.get("resourceNames") or ()),
                urls=tuple(rule.get("nonResourceURLs") or ()),
                namespace=namespace,
                source=source,
            )
        )
    return out


def _binds(binding: Obj, namespace: str, name: str) -> bool:
    for subject in binding.get("subjects") or []:
        if (
            subject.get("kind") == "ServiceAccount"
            and subject.get("name") == name
            and subject.get("namespace", binding["metadata"].get("namespace")) == namespace
        ):
            return True
    return False


def account_grants(objects: Iterable[Obj], namespace: str, name: str) -> list[Grant]:
    """Every rule the rendered ``objects`` bind to ServiceAccount ``namespace/name``."""
    objects = list(objects)
    cluster_roles = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterRole"}
    roles = {
        (o["metadata"].get("namespace", ""), o["metadata"]["name"]): o
        for o in objects
        if o["kind"] == "Role"
    }
    grants: list[Grant] = []
    for binding in objects:
        kind = binding["kind"]
        if kind not in ("ClusterRoleBinding", "RoleBinding") or not _binds(
            binding, namespace, name
        ):
            continue
        ref = binding["roleRef"]
        where = binding["metadata"].get("namespace", "") if kind == "RoleBinding" else None
        role: Obj | None
        if ref["kind"] == "ClusterRole":
            role = cluster_roles.get(ref["name"])
        elif kind == "RoleBinding":
            role = roles.get((where or "", ref["name"]))
        else:
            role = None
        if role is None:
            continue  # a binding to a role the chart does not render grants nothing it knows
        source = f"{ref['kind']}/{ref['name']} via {kind}/{binding['metadata']['name']}"
        grants.extend(_rules(role, where, source))
    return grants


def role_grants(objects: Iterable[Obj], component: str) -> list[Grant] | None:
    """The rules of the ClusterRole labelled ``component``, as granted cluster-wide to whoever
    it is bound to (people run ``kgpu sim --from-cluster``, not a workload); None when the chart
    renders no such role."""
    for o in objects:
        labels = o["metadata"].get("labels") or {}
        if o["kind"] == "ClusterRole" and labels.get("app.kubernetes.io/component") == component:
            return _rules(o, None, f"ClusterRole/{o['metadata']['name']}")
    return None


def workload_account(objects: Iterable[Obj], kind: str, component: str) -> tuple[str, str] | None:
    """The (namespace, name) of the ServiceAccount the ``kind`` labelled ``component`` runs
    as; None when the chart renders no such workload."""
    for o in objects:
        labels = o["metadata"].get("labels") or {}
        if o["kind"] == kind and labels.get("app.kubernetes.io/component") == component:
            spec = o["spec"]["template"]["spec"]
            return o["metadata"].get("namespace", ""), spec.get("serviceAccountName", "default")
    return None
