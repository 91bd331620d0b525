"""Scenario steps: one type per action (``apply``, ``failNode``, ``advance``...), each parsing,
describing and performing itself (:mod:`~kgpu.sim.steps.base`). :data:`STEP_TYPES` is the
registry a scenario's ``steps`` are read with; its order is the order error messages list the
actions in.

Adding a step: write its class (a frozen dataclass deriving from :class:`Step` with ``action``,
``parse``, ``summary``, ``perform``) in a module of this package, and add it to
:data:`STEP_TYPES`. A step that needs a new cluster operation adds it to :class:`Verbs` and to
:class:`kgpu.sim.simulation.Simulation`. See docs/simulator.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kgpu.errors import join_path
from kgpu.sim.scenario_parts import Errors
from kgpu.sim.steps.base import Step, StepInput, Verbs
from kgpu.sim.steps.clock import AdvanceStep
from kgpu.sim.steps.nodes import (
    AddNodesStep,
    CordonStep,
    DeleteNodeStep,
    DevicePluginStep,
    FailNodeStep,
    LabelStep,
    RecoverNodeStep,
    TaintStep,
    UncordonStep,
    XidStep,
)
from kgpu.sim.steps.objects import ApplyStep, DeleteStep, ScaleStep
from kgpu.sim.steps.traffic import TrafficStep

#: action -> step type, in the order error messages list them.
STEP_TYPES: dict[str, type[Step]] = {
    cls.action: cls
    for cls in (
        ApplyStep,
        DeleteStep,
        LabelStep,
        XidStep,
        AdvanceStep,
        FailNodeStep,
        RecoverNodeStep,
        DeleteNodeStep,
        AddNodesStep,
        ScaleStep,
        CordonStep,
        UncordonStep,
        TaintStep,
        DevicePluginStep,
        TrafficStep,
    )
}


def read_step(raw: object, index: int, base: Path, err: Errors, nodes: set[str]) -> Step | None:
    """One entry of a scenario's ``steps``: ``{<action>: <value>}`` with an optional
    ``name``. ``nodes`` are the nodes that exist before it (updated for the steps after)."""
    path = join_path("steps", index)
    actions = ", ".join(STEP_TYPES)
    if not isinstance(raw, Mapping):
        err.add(f"must be a map with one of: {actions}", path)
        return None
    title = raw.get("name", "")
    keys = [k for k in raw if k != "name"]
    unknown = [k for k in keys if k not in STEP_TYPES]
    if unknown or len(keys) != 1:
        what = f"unknown action {unknown[0]!r}" if unknown else "needs exactly one action"
        err.add(f"{what}; allowed: {actions}", path)
        return None
    action = str(keys[0])
    into = StepInput(join_path(path, action), base, err, nodes, str(title or ""), index)
    return STEP_TYPES[action].parse(raw[action], into)


__all__ = ["STEP_TYPES", "Step", "StepInput", "Verbs", "read_step"]
