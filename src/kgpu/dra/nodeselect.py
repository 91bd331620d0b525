"""Which nodes a ResourceSlice or device reaches: core/v1 NodeSelector matching for the allocator.

The matching itself is :func:`kgpu.node.selectors.node_selector_matches` (kube-scheduler's
``nodeaffinity`` semantics, shared with the simulator's scheduler); this module adds what slices
and devices need on top: the allocator's node reference and upstream's ``nodeName`` /
``allNodes`` / ``nodeSelector`` precedence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.node.selectors import node_selector_matches as _matches


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


def node_selector_matches(selector: Mapping[str, Any] | None, node: NodeRef) -> bool:
    """Whether a core/v1 NodeSelector selects ``node`` (the one matcher of
    :mod:`kgpu.node.selectors`, on the allocator's node reference)."""
    return _matches(selector, dict(node.labels), node.name)


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
