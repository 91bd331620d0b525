"""One Kubernetes object checked as the API server would check it at ``kubectl apply``.

:func:`validate_manifest` is the one check ``kgpu validate``, ``kgpu sim`` (every manifest a
scenario applies, every pod another component writes) and ``kgpu allocate`` run, so what one
accepts the others accept. In order:

1. the object's shape: ``apiVersion``, ``kind``, ``metadata.name`` (a DNS subdomain), labels;
2. the API server's rules for the kind (:mod:`~kgpu.manifests.podspec`,
   :mod:`~kgpu.manifests.workloads`, the DRA checks of :mod:`kgpu.dra.checks`), written for any
   input so they speak first, in the user's terms;
3. the official schema, strictly (:mod:`~kgpu.manifests.schema`: unknown fields and wrong types
   are errors, as with ``kubectl apply --validate=strict``), for what the rules did not already
   report at the same field;
4. kinds that are not Kubernetes' own (ComputeDomain, MPIJob, ScaledObject) by their own
   checker (:mod:`~kgpu.manifests.crds`).

With ``driver_webhooks`` the GPU driver's admission webhook speaks too: it refuses
``gpu.nvidia.com`` opaque parameters it cannot decode. The webhook is optional in the driver's
Helm chart, so ``kgpu validate`` runs it (a mistake found before apply) while the simulated
cluster has none: such a claim fails at NodePrepareResources there, as it does on a cluster
without the webhook.

A kind neither the schemas nor kgpu know is reported as unknown; the simulator, which stores such
objects as a cluster with their CRD installed would, asks not to be told
(``unknown_kind_ok``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kgpu.config.fields import dns_subdomain_problem, is_dns_subdomain
from kgpu.errors import FieldProblem
from kgpu.manifests import schema
from kgpu.manifests.crds import CUSTOM_KINDS, hpa
from kgpu.manifests.podspec import Problems, label_map_problems, string_map_problem
from kgpu.manifests.workloads import WORKLOAD_RULES, Checker

DRA_KINDS = ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate")


def _dra(obj: Mapping[str, Any]) -> Problems:
    """CEL selectors that do not compile (the API server compiles them; the schema accepts any
    string) and ``gpu.nvidia.com`` parameters the driver's webhook cannot decode (paths under
    ``opaque``: :func:`validate_manifest` keeps them only with ``driver_webhooks``)."""
    from kgpu.dra.checks import dra_object_problems  # loads the CEL library: only when needed

    return dra_object_problems(dict(obj))


def _from_webhook(problem: FieldProblem) -> bool:
    return ".opaque." in f".{problem.path}."


def _config_map(obj: Mapping[str, Any]) -> Problems:
    out: Problems = []
    for key in ("data", "binaryData"):
        string_map_problem(obj.get(key), key, out)
    return out


RULES: dict[tuple[str, str], Checker] = {
    **{k: v for k, v in WORKLOAD_RULES.items() if k not in CUSTOM_KINDS},
    **{(f"resource.k8s.io/{v}", k): _dra for v in ("v1", "v1beta1", "v1beta2") for k in DRA_KINDS},
    ("v1", "ConfigMap"): _config_map,
    ("autoscaling/v2", "HorizontalPodAutoscaler"): hpa,
}


def known_kind(api_version: str, kind: str) -> bool:
    """Whether kgpu can check this kind (Kubernetes' own, or one of :data:`CUSTOM_KINDS`)."""
    return (api_version, kind) in CUSTOM_KINDS or schema.has_kind(api_version, kind)


def unknown_kind(api_version: str, kind: str) -> str:
    known = ", ".join(f"{k} {a}" for a, k in CUSTOM_KINDS)
    # a kind or apiVersion from a file may be long or hold control characters: quoted and cut
    shown = kind if re.fullmatch(r"[A-Za-z0-9]{1,63}", kind) else repr(kind[:80])
    api = api_version if api_version.isprintable() else repr(api_version[:80])
    return f"unknown kind {shown} in {api[:120]}: kgpu checks Kubernetes' own kinds and {known}"


def _shape(obj: Mapping[str, Any]) -> Problems:
    out: Problems = []
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not api_version:
        out.append(FieldProblem("is required (a string such as v1 or apps/v1)", "apiVersion"))
    if not isinstance(kind, str) or not kind:
        out.append(FieldProblem("is required (a string such as Pod)", "kind"))
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        out.append(FieldProblem("is required (a map with a name)", "metadata"))
        return out
    name = meta.get("name")
    if not (isinstance(name, str) and name) and not meta.get("generateName"):
        out.append(FieldProblem("name or generateName is required", "metadata.name"))
    label_map_problems(meta.get("labels"), "metadata.labels", out)
    string_map_problem(meta.get("annotations"), "metadata.annotations", out)
    return out


def validate_manifest(
    obj: object, *, unknown_kind_ok: bool = False, driver_webhooks: bool = False
) -> list[FieldProblem]:
    """Every problem in one object, paths relative to it (``spec.replicas``); empty when the
    API server (and, with ``driver_webhooks``, the GPU driver's webhook) would accept it."""
    if not isinstance(obj, Mapping):
        return [FieldProblem(f"must be a Kubernetes object (a map), not {type(obj).__name__}")]
    out = _shape(obj)
    if out:
        return out
    api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
    custom = CUSTOM_KINDS.get((api_version, kind))
    if custom is not None:  # they check their own names
        return custom(obj)
    name = obj["metadata"].get("name")
    if isinstance(name, str) and not is_dns_subdomain(name):
        out.append(FieldProblem(dns_subdomain_problem(name), "metadata.name"))
    try:
        found = schema.schema_problems(dict(obj))
    except schema.NoSchema:
        found, known = [], False
    else:
        known = found is not None or (api_version, kind) in schema.FALLBACK_KINDS
    if not known:
        if not unknown_kind_ok:
            out.append(FieldProblem(unknown_kind(api_version, kind), "kind"))
        return out
    rules = RULES.get((api_version, kind))
    if rules is not None:
        out.extend(p for p in rules(obj) if driver_webhooks or not _from_webhook(p))
    spoken = {p.path for p in out}
    out.extend(FieldProblem(message, path) for path, message in found or () if path not in spoken)
    return out


__all__ = ["CUSTOM_KINDS", "RULES", "known_kind", "unknown_kind", "validate_manifest"]
