"""``--save FILE --anonymize``: an imported scenario with the cluster's names taken out, for a bug
report.

Replaced consistently (the same name becomes the same stand-in everywhere, so a pod still names
its node, claim and template, and a nodeSelector on a hostname still matches): node names
(``node-<n>``), namespaces other than Kubernetes' own (``ns-<n>``), the names of pods, claims,
templates, ConfigMaps and ComputeDomains (``<kind>-<n>``), container images (``image-<n>``),
and every UUID anywhere (``00000000-0000-4000-8000-<n>``). Annotations and environment values
are dropped (they hold anything). Kept: labels other than those values, device-plugin and
mig-parted configs, DeviceClasses and PriorityClasses (no names of the user's), resources.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]

UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
KEPT_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
_PREFIX = {
    "Pod": "pod",
    "ResourceClaim": "claim",
    "ResourceClaimTemplate": "template",
    "ConfigMap": "configmap",
    "ComputeDomain": "domain",
}


class _Names:
    def __init__(self) -> None:
        self.table: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self.uuids: dict[str, str] = {}

    def add(self, name: object, prefix: str) -> None:
        if isinstance(name, str) and name and name not in self.table:
            n = self.counts.get(prefix, 0)
            self.counts[prefix] = n + 1
            self.table[name] = f"{prefix}-{n}"

    def uuid(self, match: re.Match[str]) -> str:
        found = match.group(0).lower()
        if found not in self.uuids:
            self.uuids[found] = f"00000000-0000-4000-8000-{len(self.uuids):012d}"
        return self.uuids[found]

    def value(self, text: str) -> str:
        if text in self.table:
            return self.table[text]
        return UUID.sub(self.uuid, text)


def _collect(data: Mapping[str, Any], names: _Names) -> None:
    for group in data.get("nodes") or []:
        if isinstance(group, Mapping):
            names.add(group.get("name"), "node")
    for obj in data.get("apply") or []:
        if not isinstance(obj, Mapping):
            continue
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace")
        if isinstance(ns, str) and ns not in KEPT_NAMESPACES:
            names.add(ns, "ns")
        prefix = _PREFIX.get(str(obj.get("kind")))
        if prefix is not None:
            names.add(meta.get("name"), prefix)
        for container in _containers(obj):
            names.add(container.get("image"), "image")


def _containers(obj: Mapping[str, Any]) -> list[Obj]:
    spec = obj.get("spec") or {}
    if not isinstance(spec, Mapping):
        return []
    out: list[Obj] = []
    for key in ("initContainers", "containers"):
        out.extend(c for c in spec.get(key) or [] if isinstance(c, dict))
    return out


def _scrub(value: Any, names: _Names, key: str = "") -> Any:
    if isinstance(value, Mapping):
        out: Obj = {}
        for k, v in value.items():
            if k == "annotations":
                continue
            if k == "env" and isinstance(v, list):
                out[k] = [{"name": e.get("name"), "value": ""} for e in v if isinstance(e, Mapping)]
                continue
            out[names.value(k) if isinstance(k, str) and UUID.search(k) else k] = _scrub(
                v, names, str(k)
            )
        return out
    if isinstance(value, list):
        return [_scrub(v, names, key) for v in value]
    if isinstance(value, str):
        return names.value(value)
    return value


def anonymize(data: Mapping[str, Any]) -> Obj:
    """A copy of scenario map ``data`` with names and UUIDs replaced (module docstring)."""
    names = _Names()
    _collect(data, names)
    scrubbed: Obj = _scrub(dict(data), names)
    scrubbed["name"] = "from-cluster-anonymized"
    scrubbed["description"] = "imported with kgpu sim --from-cluster --anonymize"
    return scrubbed


__all__ = ["anonymize"]
