"""``advance``: the simulated clock moves; pods whose runtime ends on the way succeed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kgpu.sim.scenario_parts import parse_duration
from kgpu.sim.steps.base import Step, StepInput, Verbs


@dataclass(frozen=True, kw_only=True)
class AdvanceStep(Step):
    action = "advance"
    seconds: float

    @classmethod
    def parse(cls, value: Any, into: StepInput) -> Step | None:
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            into.problem(str(exc))
            return None
        return cls(seconds=seconds, title=into.title, index=into.index)

    def summary(self) -> str:
        return f"advance the clock {self.seconds:g}s"

    def perform(self, cluster: Verbs) -> None:
        cluster.advance(self.seconds)


__all__ = ["AdvanceStep"]
