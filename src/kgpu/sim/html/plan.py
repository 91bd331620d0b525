"""``kgpu plan --report``: the one node a plan describes, drawn as the cluster map draws nodes.

The picture has one frame with one node and no pods: every device is free, so the cells show
what the node would offer (MIG devices at their placements, time-sliced or MPS replicas).
"""

from __future__ import annotations

from typing import Any

from kgpu.node.model import NodeView
from kgpu.sim.html.capture import CLIQUE_LABEL
from kgpu.sim.html.gpus import gpu_cells

Obj = dict[str, Any]


def plan_picture(view: NodeView, name: str, description: str = "") -> Obj:
    """The picture document (see :mod:`kgpu.sim.html.capture`) of one planned node."""
    machine = view.machine
    node = {
        "name": name,
        "group": machine.profile,
        "clique": view.labels.get(CLIQUE_LABEL, ""),
        "machine": machine.profile,
        "ready": True,
        "unschedulable": False,
        "config": view.config_name,
        "migConfig": view.mig_config_name,
        "pods": 0,
        "gpus": gpu_cells(machine, view, {}),
        "channels": [],
    }
    frame = {
        "title": "plan",
        "time": 0.0,
        "phases": {},
        "events": [],
        "eventCount": 0,
        "groups": [
            {
                "name": machine.profile,
                "machine": machine.profile,
                "nodes": 1,
                "ready": 1,
                "gpus": len(machine.gpus),
                "inUse": 0,
                "unhealthy": 0,
                "shown": 1,
            }
        ],
        "nodes": [node],
        "pending": [],
        "workloads": {},
        "stats": {"time": 0.0, "title": "plan"},
        "warnings": list(view.warnings),
    }
    return {
        "kind": "plan",
        "title": f"kgpu plan: {name}",
        "description": description,
        "frames": [frame],
        "timeline": [],
    }
