"""The pure node view: what one node advertises (resources, device ids, labels) from its
hardware, configs and labels, and what follows from it (allocation, health).

Modules: ``view`` (:func:`build_node_view`), ``model`` (the view's types), ``labels`` (GPU
feature discovery's labels), ``allocate`` (Allocate and GetPreferredAllocation answers),
``health`` (XIDs and probes into device health), ``ids`` (replica ids ``<id>::<n>``),
``selectors`` (node selectors, affinity and taints as the scheduler matches them),
``label_syntax`` (labels a user types).
"""

from kgpu.node.health import HealthState
from kgpu.node.ids import replica_id, strip_replica
from kgpu.node.label_syntax import parse_label_args
from kgpu.node.model import AdvertisedDevice, NodeView, ResourceView
from kgpu.node.selectors import NodeSelector, Taint, Toleration, node_selector_matches
from kgpu.node.view import build_node_view

__all__ = [
    "AdvertisedDevice",
    "HealthState",
    "NodeSelector",
    "NodeView",
    "ResourceView",
    "Taint",
    "Toleration",
    "build_node_view",
    "node_selector_matches",
    "parse_label_args",
    "replica_id",
    "strip_replica",
]
