"""Kubernetes objects as kgpu handles them: plain JSON-shaped dicts in their wire form.

``apiVersion``, ``kind``, ``metadata``, ``spec``, ``status`` exactly as the API server serves
them, so what kgpu writes validates against the official OpenAPI schemas and travels unchanged.
These helpers read identity and labels the way the API server does; they never do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]

#: Kinds that are cluster-scoped (no namespace). Everything else defaults to "default".
CLUSTER_SCOPED = frozenset(
    {
        "Node",
        "Namespace",
        "ResourceSlice",
        "DeviceClass",
        "DeviceTaintRule",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "PersistentVolume",
        "StorageClass",
        "PriorityClass",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
)


def group_of(api_version: str) -> str:
    """``resource.k8s.io/v1`` -> ``resource.k8s.io``; ``v1`` -> ``""`` (the core group)."""
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def namespace_of(obj: Mapping[str, Any]) -> str:
    if obj.get("kind") in CLUSTER_SCOPED:
        return ""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default")


def object_ref(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of a namespaced object (``default`` when unset), as events and
    ``kubectl`` name it."""
    meta = obj.get("metadata") or {}
    return f"{namespace_of(obj)}/{meta.get('name', '')}"


def key_of(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """Identity of an object: (group, kind, namespace, name). Versions of one group share it."""
    meta = obj.get("metadata") or {}
    return (
        group_of(str(obj.get("apiVersion", ""))),
        str(obj.get("kind", "")),
        namespace_of(obj),
        str(meta.get("name", "")),
    )


def matches_labels(obj: Mapping[str, Any], selector: Mapping[str, str] | None) -> bool:
    """Equality-based label selection (``a=b,c=d``): every pair must match."""
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """The value a field selector compares (``spec.nodeName``, ``metadata.name``); the API
    server compares strings and treats a missing field as the empty string."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def matches_fields(obj: Mapping[str, Any], selector: Mapping[str, str] | None) -> bool:
    """Equality-based field selection, e.g. ``{"metadata.name": "node-1"}``."""
    if not selector:
        return True
    return all(field_value(obj, path) == want for path, want in selector.items())


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as ``kubectl patch --type merge`` sends it: maps merge key by
    key, ``null`` deletes a key, anything else (lists included) replaces. Returns a new value;
    neither input is changed."""
    if not isinstance(patch, Mapping):
        return patch
    out: dict[str, Any] = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
