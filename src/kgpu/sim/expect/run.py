"""Checking an expect file while a scenario runs: each step's block right after that step (the
cluster moves on), ``final`` at the end; the outcome as lines a CI log shows and as JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kgpu.sim.expect.checks import Cluster, Observed
from kgpu.sim.expect.schema import Block, Expectations
from kgpu.sim.steps import Step


@dataclass(frozen=True)
class Failure:
    """One assertion that did not hold: where in the run, which entry of which file, what."""

    where: str  # "final", "initial", "after steps[2] (fail a tray)"
    check: str  # the entry's field path in its file: "final.workloads[0]"
    file: str
    subject: str  # "Deployment/default/web"
    field: str
    expected: str
    got: str

    def line(self) -> str:
        at = f"{self.file}: {self.check}" if self.file else self.check
        return (
            f"{self.where}: {self.subject}: {self.field}: expected {self.expected}, "
            f"got {self.got}  [{at}]"
        )

    def to_json(self) -> dict[str, str]:
        return {
            "where": self.where,
            "check": self.check,
            "file": self.file,
            "subject": self.subject,
            "field": self.field,
            "expected": self.expected,
            "got": self.got,
        }


@dataclass
class ExpectResult:
    assertions: int
    failures: list[Failure] = field(default_factory=list)
    files: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failed_assertions(self) -> int:
        return len({(f.file, f.check, f.where) for f in self.failures})

    def summary(self) -> str:
        files = ", ".join(f for f in self.files if f) or "the scenario"
        if self.ok:
            return f"expect: all {self.assertions} assertion(s) hold ({files})"
        return (
            f"expect: {self.failed_assertions} of {self.assertions} assertion(s) failed ({files})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "files": list(self.files),
            "assertions": self.assertions,
            "passed": self.assertions - self.failed_assertions,
            "failures": [f.to_json() for f in self.failures],
        }


class ExpectRun:
    """Follows one run (:meth:`observe` after the start and after every step, :meth:`finish`
    at the end) and checks each block at its point."""

    def __init__(self, expectations: Expectations, steps: Sequence[Step]) -> None:
        self.expectations = expectations
        self.steps = tuple(steps)
        self.failures: list[Failure] = []
        self._mark = 0  # events before this index belong to earlier points
        self._pending = list(expectations.blocks)

    def observe(self, ctx: Cluster, step: Step | None) -> None:
        """The cluster after the start (``step`` None) or after ``step``."""
        if step is None:
            index = -1
        elif step.index < len(self.steps) and self.steps[step.index] is step:
            index = step.index
        else:
            return  # a step run by hand, not one of the scenario's
        events = ctx.event_log[self._mark :]  # every occurrence, repeats counted on one entry too
        self._mark = len(ctx.event_log)
        due = [b for b in self._pending if b.step == index]
        for block in due:
            self._check(block, Observed(ctx, events))
            self._pending.remove(block)

    def finish(self, ctx: Cluster) -> ExpectResult:
        for block in self._pending:
            if block.step is None:
                self._check(block, Observed(ctx, ctx.events))
            else:
                self.failures.append(
                    Failure(block.where, block.path, block.file, "the step", "ran", "yes", "no")
                )
        self._pending = []
        return ExpectResult(self.expectations.assertions, self.failures, self.expectations.files)

    def _check(self, block: Block, seen: Observed) -> None:
        for check in block.checks:
            for miss in check.evaluate(seen):
                self.failures.append(
                    Failure(
                        block.where,
                        check.path,
                        block.file,
                        check.subject(),
                        miss.field,
                        miss.expected,
                        miss.got,
                    )
                )


__all__ = ["ExpectResult", "ExpectRun", "Failure"]
