"""What a scenario step is: one type per action, which parses its value, describes itself and
performs itself on the cluster.

A step type is a frozen dataclass deriving from :class:`Step`, with ``action`` (the key a
scenario writes: ``failNode``), :meth:`Step.parse` (the value as written -> the step, problems
added to the :class:`StepInput`), :meth:`Step.summary` (the title ``--watch`` shows) and
:meth:`Step.perform` (one call of the cluster's :class:`Verbs`). Adding a step is one new
class plus its entry in :data:`kgpu.sim.steps.STEP_TYPES` (docs/simulator.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from kgpu.errors import shown
from kgpu.sim.manifests import Manifest
from kgpu.sim.scenario_parts import Errors, NodeSpec, ObjectRef


class Verbs(Protocol):
    """The operations a step can ask of the cluster (:class:`kgpu.sim.simulation.Simulation`
    offers them, so a step in a scenario and the same call from Python do the same thing)."""

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
    def set_traffic(self, ref: ObjectRef, gpu_utilization: float) -> None: ...


@dataclass
class StepInput:
    """Where a step's value is being parsed: its field path (``steps[2].failNode``), the
    scenario's folder (relative paths), the problems found so far and the nodes that exist at
    this point of the scenario (steps that add or delete nodes change them for later steps)."""

    path: str
    base: Path
    err: Errors
    nodes: set[str]
    title: str = ""
    index: int = 0

    def problem(self, message: str, path: str | None = None) -> None:
        self.err.add(message, self.path if path is None else path)

    def known_node(self, name: object, at: str | None = None) -> str | None:
        """``name`` when such a node exists at this step, else a problem and None."""
        if not isinstance(name, str) or name not in self.nodes:
            known = ", ".join(sorted(self.nodes)) or "none"
            self.problem(f"{shown(name)}: no such node; nodes: {known}", at)
            return None
        return name


@dataclass(frozen=True, kw_only=True)
class Step:
    """One step of a scenario (see the module docstring)."""

    action: ClassVar[str]
    title: str = ""  # the step's ``name``, shown instead of the summary
    index: int = 0

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step | None:
        """The step for ``value`` as a scenario writes it; None (with problems in ``into``)
        when it is wrong."""
        raise NotImplementedError

    def summary(self) -> str:
        raise NotImplementedError

    def perform(self, cluster: Verbs) -> None:
        """Do what the step says (without settling: the caller settles after every step)."""
        raise NotImplementedError

    def describe(self) -> str:
        return self.title or self.summary()


__all__ = ["Step", "StepInput", "Verbs"]
