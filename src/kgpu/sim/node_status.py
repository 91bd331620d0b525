"""What a simulated node reports about itself: host resources, labels, the Node object.

Pure functions of a node's record; :mod:`kgpu.sim.node_lifecycle` decides when to recompute
and publish them. Values follow what a kubelet on the built-in machines would report (host CPU
and memory of the real instance types, ``pods: 110``, the well-known ``kubernetes.io/*`` labels).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kgpu.hardware.model import Machine
from kgpu.node.model import NodeView
from kgpu.sim.quantity import format_units
from kgpu.sim.scenario_parts import NodeSpec
from kgpu.sim.state import SimNode

Obj = dict[str, Any]

GiB = 2**30
#: Host CPU (millicores) and memory (bytes) of the built-in machines; the Node reports them.
HOST_RESOURCES: dict[str, tuple[int, int]] = {
    "dgx-h100": (224_000, 2048 * GiB),
    "h200": (192_000, 2048 * GiB),
    "p4de.24xlarge": (96_000, 1152 * GiB),
    "gb200": (144_000, 960 * GiB),
}
DEFAULT_HOST = (32_000, 128 * GiB)
NO_GPU_HOST = (8_000, 32 * GiB)
DEFAULT_PODS = 110
ARM_PROFILES = frozenset({"gb200"})
HOST_KEYS = ("cpu", "memory", "pods")


def node_address(seq: int) -> str:
    """The InternalIP of the ``seq``-th node to join (10.0.0.2, 10.0.0.3, ...): assigned once,
    so a node keeps its address and a deleted node's address is never handed on (IMEX daemons
    list their peers by address)."""
    block = seq // 250
    return f"10.{block // 256}.{block % 256}.{seq % 250 + 2}"


def host_capacity(spec: NodeSpec, machine: Machine | None) -> dict[str, int]:
    """CPU, memory and pod slots: the scenario's values, else the machine's host."""
    cpu, memory = HOST_RESOURCES.get(spec.machine or "", DEFAULT_HOST)
    if machine is None:
        cpu, memory = NO_GPU_HOST
    return {
        "cpu": spec.cpu if spec.cpu is not None else cpu,
        "memory": spec.memory if spec.memory is not None else memory,
        "pods": spec.pods if spec.pods is not None else DEFAULT_PODS,
    }


def node_labels(
    name: str, base: Machine | None, view: NodeView | None, scenario_labels: Mapping[str, str]
) -> dict[str, str]:
    """The kubelet's own labels, then GPU feature discovery's, then the scenario's (which win,
    as ``kubectl label --overwrite`` does)."""
    arch = "arm64" if base is not None and base.profile in ARM_PROFILES else "amd64"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": arch,
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": arch,
    }
    if view is not None:
        labels.update(view.labels)
    labels.update(scenario_labels)
    return labels


def advertised(
    capacity: Mapping[str, int], view: NodeView | None
) -> tuple[dict[str, int], dict[str, int]]:
    """Capacity and allocatable: the host's resources plus each device-plugin resource (all
    devices in capacity, healthy ones in allocatable)."""
    cap = {k: v for k, v in capacity.items() if k in HOST_KEYS}
    alloc = dict(cap)
    if view is not None:
        for res in view.resources:
            cap[res.name] = res.count
            alloc[res.name] = res.healthy_count
    return cap, alloc


def extended_counts(node: SimNode) -> str:
    """``nvidia.com/gpu: 7/8``: allocatable over capacity of each device resource."""
    return ", ".join(
        f"{r}: {format_units(r, node.allocatable.get(r, 0))}/{node.capacity[r]}"
        for r in node.capacity
        if r not in HOST_KEYS
    )


def node_object(node: SimNode) -> Obj:
    """The Node as its kubelet would post it."""

    def q(values: Mapping[str, int]) -> dict[str, str]:
        return {k: format_units(k, v) for k, v in sorted(values.items())}

    spec: Obj = {}
    if node.taints:
        spec["taints"] = [
            {"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect}
            for t in node.taints
        ]
    if node.unschedulable:
        spec["unschedulable"] = True
    machine = node.machine
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": dict(sorted(node.labels.items()))},
        "spec": spec,
        "status": {
            "capacity": q(node.capacity),
            "allocatable": q(node.allocatable),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if node.ready else "Unknown",
                    "reason": "KubeletReady" if node.ready else "NodeStatusUnknown",
                }
            ],
            "addresses": [
                {"type": "InternalIP", "address": node.ip},
                {"type": "Hostname", "address": node.name},
            ],
            "nodeInfo": {
                "architecture": node.labels.get("kubernetes.io/arch", "amd64"),
                "operatingSystem": "linux",
                "kubeletVersion": "v1.34.0",
                "containerRuntimeVersion": "containerd://2.0.0",
                **({"machineID": machine.profile} if machine else {}),
            },
        },
    }
