"""Steps on nodes: what ``kubectl label/taint/cordon/uncordon/delete node`` do, a node that
stops answering and comes back, node groups joining, an XID on a GPU, and the device plugin
starting or stopping cluster-wide (installing or removing the GPU Operator)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.errors import join_path, shown
from kgpu.sim.scenario_parts import (
    MAX_NODES,
    NodeSpec,
    parse_labels,
    parse_node_spec,
    parse_taint_list,
)
from kgpu.sim.steps.base import Step, StepInput, Verbs


@dataclass(frozen=True, kw_only=True)
class LabelStep(Step):
    action = "label"
    node: str
    labels: Mapping[str, str | None]  # None removes the label

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step | None:
        if not isinstance(value, Mapping):
            into.problem("must be a map with node and labels")
            return None
        node = into.known_node(value.get("node"), join_path(into.path, "node"))
        labels = parse_labels(
            value.get("labels"), join_path(into.path, "labels"), into.err, allow_null=True
        )
        return cls(node=node or "", labels=labels, title=into.title, index=into.index)

    def summary(self) -> str:
        pairs = ", ".join(f"{k}={'-' if v is None else v}" for k, v in self.labels.items())
        return f"label {self.node} {pairs}"

    def perform(self, cluster: Verbs) -> None:
        cluster.label_node(self.node, self.labels)


@dataclass(frozen=True, kw_only=True)
class TaintStep(Step):
    action = "taint"
    node: str
    taints: tuple[dict[str, str], ...]  # the node's new taint list

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step | None:
        if not isinstance(value, Mapping):
            into.problem("must be a map with node and taints (the node's new taint list)")
            return None
        node = into.known_node(value.get("node"), join_path(into.path, "node"))
        taints = parse_taint_list(
            value.get("taints") or [], join_path(into.path, "taints"), into.err
        )
        return cls(node=node or "", taints=tuple(taints), title=into.title, index=into.index)

    def summary(self) -> str:
        shown = ", ".join(f"{t['key']}={t['value']}:{t['effect']}" for t in self.taints)
        return f"taint {self.node}: {shown or 'none'}"

    def perform(self, cluster: Verbs) -> None:
        cluster.taint_node(self.node, list(self.taints))


@dataclass(frozen=True, kw_only=True)
class XidStep(Step):
    action = "xid"
    node: str
    gpu: int | str  # index or UUID
    xid: int
    gi: int | None = None  # a MIG device's GPU-instance id
    ci: int | None = None  # and compute-instance id

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step | None:
        if not isinstance(value, Mapping):
            into.problem("must be a map with node, gpu and xid")
            return None
        node = into.known_node(value.get("node"), join_path(into.path, "node"))
        gpu = value.get("gpu", 0)
        if isinstance(gpu, bool) or not isinstance(gpu, (int, str)):
            into.problem("must be a GPU index or UUID", join_path(into.path, "gpu"))
        xid = value.get("xid", 79)
        if isinstance(xid, bool) or not isinstance(xid, int) or xid < 0:
            into.problem(f"{shown(xid)}: must be an XID number", join_path(into.path, "xid"))
        for key in ("gi", "ci"):  # NVML's GPU-instance / compute-instance ids of a MIG device
            ident = value.get(key)
            if ident is not None and (
                isinstance(ident, bool) or not isinstance(ident, int) or ident < 0
            ):
                into.problem(
                    f"{shown(ident)}: must be a non-negative integer (the MIG device's "
                    f"{'GPU' if key == 'gi' else 'compute'}-instance id)",
                    join_path(into.path, key),
                )
        if value.get("ci") is not None and value.get("gi") is None:
            into.problem(
                "a compute-instance id needs its GPU instance: set gi too",
                join_path(into.path, "ci"),
            )
        return cls(
            node=node or "",
            gpu=gpu,
            xid=xid,
            gi=value.get("gi"),
            ci=value.get("ci"),
            title=into.title,
            index=into.index,
        )

    def summary(self) -> str:
        return f"XID {self.xid} on {self.node} GPU {self.gpu}"

    def perform(self, cluster: Verbs) -> None:
        cluster.inject_xid(self.node, self.gpu, self.xid, self.gi, self.ci)


@dataclass(frozen=True, kw_only=True)
class _NodeStep(Step):
    """A step whose value is the name of an existing node."""

    node: str

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step | None:
        node = into.known_node(value)
        return cls(node=node or "", title=into.title, index=into.index)

    def summary(self) -> str:
        return f"{self.action} {self.node}"


@dataclass(frozen=True, kw_only=True)
class FailNodeStep(_NodeStep):
    """The node stops answering: NotReady, tainted unreachable, its pods evicted."""

    action = "failNode"

    def perform(self, cluster: Verbs) -> None:
        cluster.fail_node(self.node)


@dataclass(frozen=True, kw_only=True)
class RecoverNodeStep(_NodeStep):
    action = "recoverNode"

    def perform(self, cluster: Verbs) -> None:
        cluster.recover_node(self.node)


@dataclass(frozen=True, kw_only=True)
class DeleteNodeStep(_NodeStep):
    action = "deleteNode"

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step | None:
        step = super().parse(value, into)
        if isinstance(value, str):
            into.nodes.discard(value)  # later steps cannot name it
        return step

    def perform(self, cluster: Verbs) -> None:
        cluster.delete_node(self.node)


@dataclass(frozen=True, kw_only=True)
class CordonStep(_NodeStep):
    action = "cordon"

    def perform(self, cluster: Verbs) -> None:
        cluster.cordon(self.node, True)


@dataclass(frozen=True, kw_only=True)
class UncordonStep(_NodeStep):
    action = "uncordon"

    def perform(self, cluster: Verbs) -> None:
        cluster.cordon(self.node, False)


@dataclass(frozen=True, kw_only=True)
class AddNodesStep(Step):
    action = "addNodes"
    specs: tuple[NodeSpec, ...]

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step:
        items = value if isinstance(value, list) else [value]
        specs = []
        for i, item in enumerate(items):
            spec = parse_node_spec(item, join_path(into.path, i), into.err)
            if spec:
                if len(into.nodes) + spec.most_nodes() > MAX_NODES:
                    into.problem(
                        f"{len(into.nodes) + spec.most_nodes()} nodes: at most {MAX_NODES} "
                        "(kgpu sim's limit for one scenario)",
                        join_path(into.path, i, "count"),
                    )
                    continue
                for n in spec.names():
                    if n in into.nodes:
                        into.problem(f"node {n!r} already exists", join_path(into.path, i, "name"))
                    into.nodes.add(n)
                specs.append(spec)
        return cls(specs=tuple(specs), title=into.title, index=into.index)

    def summary(self) -> str:
        return "add nodes " + ", ".join(n for spec in self.specs for n in spec.names())

    def perform(self, cluster: Verbs) -> None:
        for spec in self.specs:
            cluster.add_nodes(spec)


@dataclass(frozen=True, kw_only=True)
class DevicePluginStep(Step):
    action = "devicePlugin"
    running: bool

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step | None:
        if not isinstance(value, bool):
            into.problem("must be true (start the device plugin) or false (stop it)")
            return None
        return cls(running=value, title=into.title, index=into.index)

    def summary(self) -> str:
        return "start the device plugin" if self.running else "stop the device plugin"

    def perform(self, cluster: Verbs) -> None:
        cluster.set_device_plugin(self.running)


__all__ = [
    "AddNodesStep",
    "CordonStep",
    "DeleteNodeStep",
    "DevicePluginStep",
    "FailNodeStep",
    "LabelStep",
    "RecoverNodeStep",
    "TaintStep",
    "UncordonStep",
    "XidStep",
]
