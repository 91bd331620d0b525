"""The devices a node offers driver ``compute-domain.nvidia.com``: IMEX channel slots and
IMEX daemon slots, as one ResourceSlice per node (``resource.k8s.io/v1``).

Upstream publishes ``channel-<id>`` and ``daemon-<id>`` devices with attributes ``type``
(``channel``/``daemon``) and ``id``; the DeviceClasses select on ``type``. kgpu publishes
``slots`` of each so that several ComputeDomains can run on one node (upstream: one).
Only nodes with an NVLink fabric (a clique) get devices: elsewhere IMEX has nothing to join.
"""

from __future__ import annotations

from typing import Any

from kgpu.computedomain.api import DRIVER
from kgpu.dra.api import RESOURCE_API
from kgpu.hardware.model import Machine

#: Channel and daemon slots per node: how many ComputeDomains may share one node.
DEFAULT_SLOTS = 8


def machine_clique(machine: Machine | None) -> str | None:
    """The node's NVLink clique (``<clusterUUID>.<cliqueId>``) from its GPUs' fabric info."""
    if machine is None:
        return None
    for gpu in machine.gpus:
        if gpu.fabric is not None and gpu.fabric.state == "completed":
            return gpu.fabric.clique
    return None


def devices(slots: int = DEFAULT_SLOTS) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for kind in ("channel", "daemon"):
        for i in range(slots):
            out.append(
                {
                    "name": f"{kind}-{i}",
                    "attributes": {"type": {"string": kind}, "id": {"int": i}},
                }
            )
    return out


def node_slice(node_name: str, generation: int = 1, slots: int = DEFAULT_SLOTS) -> dict[str, Any]:
    """The node's one ResourceSlice for this driver (pool = node name, as upstream)."""
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices(slots),
        },
    }
