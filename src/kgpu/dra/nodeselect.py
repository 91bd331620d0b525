"""Which nodes a ResourceSlice or device reaches: core/v1 NodeSelector matching for the allocator.

Kept private to the DRA core for now (the simulator has its own matcher for pod affinity; the two
are to be joined in one core module). Semantics are kube-scheduler's ``nodeaffinity``: terms are
ORed, requirements within a term ANDed, a term with no requirements matches nothing,
``matchFields`` knows only ``metadata.name``, and ``Gt``/``Lt`` compare integers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NodeRef:
    """What the allocator needs of a node: its name and labels."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def of(node: Any) -> NodeRef:
        """From a Node object, a ``{name, labels}`` dict, a NodeInfo or a NodeRef."""
        if isinstance(node, NodeRef):
            return node
        if isinstance(node, Mapping):
            meta = (node.get("metadata") or {}) if "metadata" in node else node
            return NodeRef(
                str(meta.get("name", "")), tuple(sorted((meta.get("labels") or {}).items()))
            )
        return NodeRef(str(node.name), tuple(sorted(dict(node.labels).items())))


def _requirement_matches(req: Mapping[str, Any], value: str | None) -> bool:
    op = req.get("operator")
    values = [str(v) for v in req.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        try:
            have, want = int(value or ""), int(values[0])
        except (ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def node_selector_matches(selector: Mapping[str, Any] | None, node: NodeRef) -> bool:
    """Whether a core/v1 NodeSelector selects ``node``."""
    if not selector:
        return False
    labels = dict(node.labels)
    for term in selector.get("nodeSelectorTerms") or []:
        exprs = term.get("matchExpressions") or []
        fields = term.get("matchFields") or []
        if not exprs and not fields:
            continue
        if all(_requirement_matches(r, labels.get(str(r.get("key")))) for r in exprs) and all(
            _requirement_matches(r, node.name if r.get("key") == "metadata.name" else None)
            for r in fields
        ):
            return True
    return False


def reaches(spec: Mapping[str, Any], node: NodeRef) -> bool:
    """Upstream's NodeMatches for a slice spec or a per-device entry: ``nodeName``, else
    ``allNodes``, else ``nodeSelector``; none of them reaches no node."""
    if spec.get("nodeName"):
        return bool(spec["nodeName"] == node.name)
    if spec.get("allNodes"):
        return True
    if spec.get("nodeSelector") is not None:
        return node_selector_matches(spec["nodeSelector"], node)
    return False


def local_selector(node_name: str) -> dict[str, Any]:
    """The selector kube-scheduler writes for node-local devices: ``metadata.name In [node]``."""
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }
