"""What each scenario step does: one action of :data:`kgpu.sim.scenario.STEP_ACTIONS` to one
operation of the cluster.

The operations are the simulation's public verbs (:class:`Verbs`), so a step in a scenario file
and the same call from Python do exactly the same thing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kgpu.sim.manifests import Manifest
from kgpu.sim.scenario import NodeSpec, ObjectRef, Step


class Verbs(Protocol):
    """The operations a step can ask of the cluster."""

    def apply(self, manifest: Manifest) -> None: ...
    def delete(self, item: ObjectRef | Manifest) -> None: ...
    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None: ...
    def inject_xid(
        self, name: str, gpu: int | str, xid: int, gi: int | None = None, ci: int | None = None
    ) -> None: ...
    def advance(self, seconds: float) -> None: ...
    def fail_node(self, name: str) -> None: ...
    def recover_node(self, name: str) -> None: ...
    def delete_node(self, name: str) -> None: ...
    def add_nodes(self, spec: NodeSpec) -> None: ...
    def scale(self, ref: ObjectRef, replicas: int) -> None: ...
    def taint_node(self, name: str, taints: list[dict[str, str]]) -> None: ...
    def set_device_plugin(self, running: bool) -> None: ...
    def cordon(self, name: str, on: bool = True) -> None: ...


def _each(verb: Callable[[Any], None], items: list[Any]) -> None:
    for item in items:
        verb(item)


_ACTIONS: dict[str, Callable[[Verbs, Any], None]] = {
    "apply": lambda c, v: _each(c.apply, v),
    "delete": lambda c, v: _each(c.delete, v),
    "label": lambda c, v: c.label_node(v[0], v[1]),
    "xid": lambda c, v: c.inject_xid(v["node"], v["gpu"], v["xid"], v.get("gi"), v.get("ci")),
    "advance": lambda c, v: c.advance(float(v)),
    "failNode": lambda c, v: c.fail_node(v),
    "recoverNode": lambda c, v: c.recover_node(v),
    "deleteNode": lambda c, v: c.delete_node(v),
    "addNodes": lambda c, v: _each(c.add_nodes, v),
    "scale": lambda c, v: c.scale(v[0], v[1]),
    "taint": lambda c, v: c.taint_node(v[0], v[1]),
    "devicePlugin": lambda c, v: c.set_device_plugin(bool(v)),
    "cordon": lambda c, v: c.cordon(v, True),
    "uncordon": lambda c, v: c.cordon(v, False),
}


def perform(cluster: Verbs, step: Step) -> None:
    """Do what ``step`` says (without settling: the caller settles after every step)."""
    action = _ACTIONS.get(step.action)
    if action is not None:  # parse_step admits only known actions
        action(cluster, step.value)
