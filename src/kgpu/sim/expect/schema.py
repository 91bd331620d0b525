"""The expect file (``kgpu sim --expect FILE``, or a scenario's ``expect`` key): what must hold
after the run and after chosen steps.

```yaml
final:                       # the state after the last step (events: every event of the run)
  workloads: [{workload: Deployment/web, running: 4, pending: 0}]
  nodes: [{group: gpu, count: ">=2", ready: 2}]
steps:
  - step: fail a tray        # a scenario step's name, its index in steps, or initial
    events: [{reason: ComputeDomainNotReady}]   # events: only those this step emitted
```

Everything is checked when the file loads, against the scenario it goes with (a step that does
not exist is an error there, not a silent pass), and every problem is reported with its field
path, as the scenario's own problems are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.sim.expect.checks import CHECK_TYPES, Check
from kgpu.sim.scenario_parts import Errors
from kgpu.sim.steps import Step

TOP_KEYS = ("final", "steps")
INITIAL = "initial"
#: Block.step of the block checked after the run.
FINAL = None


@dataclass(frozen=True)
class Block:
    """The checks of one point of the run."""

    path: str  # where the block is in its file: "final", "steps[1]", "expect.final"
    step: int | None  # None: after the run; -1: before the first step; i: after steps[i]
    where: str  # how a failure names the point: "final", "initial", "after steps[2] (...)"
    checks: tuple[Check, ...]
    file: str = ""  # the file it was read from


@dataclass(frozen=True)
class Expectations:
    """Every block of one or more expect files (the scenario's and ``--expect``'s)."""

    blocks: tuple[Block, ...] = ()
    files: tuple[str, ...] = ()

    def __add__(self, other: Expectations) -> Expectations:
        return Expectations(self.blocks + other.blocks, self.files + other.files)

    @property
    def assertions(self) -> int:
        return sum(len(b.checks) for b in self.blocks)


def step_label(step: Step) -> str:
    return f"after steps[{step.index}] ({step.describe()})"


def read_expectations(
    data: object, path: str, err: Errors, steps: Sequence[Step] | None
) -> tuple[Block, ...]:
    """The blocks of an expect document at ``path`` (``""`` for a file of its own, ``expect``
    inside a scenario); problems go to ``err``. ``steps`` None (no scenario at hand, as for
    ``kgpu validate`` on an expect file alone): step references are checked for their form
    only."""
    if not isinstance(data, Mapping):
        err.add("must be a map with final and/or steps", path)
        return ()
    for key in data:
        if key not in TOP_KEYS:
            err.add(
                f"unknown field {key!r}; allowed: {', '.join(TOP_KEYS)}",
                join_path(path, str(key)) if path else str(key),
            )
    blocks: list[Block] = []

    def at(*parts: str | int) -> str:
        return join_path(path, *parts) if path else join_path(*parts)

    if data.get("final") is not None:
        checks = _checks(data["final"], at("final"), err, step=False)
        blocks.append(Block(at("final"), FINAL, "final", checks, err.file))
    raw_steps = data.get("steps")
    if raw_steps is not None and not isinstance(raw_steps, list):
        err.add("must be a list of {step: NAME | INDEX | initial, ...checks}", at("steps"))
        raw_steps = []
    for i, raw in enumerate(raw_steps or ()):
        where = at("steps", i)
        if not isinstance(raw, Mapping):
            err.add("must be a map with step and checks", where)
            continue
        index = _step_index(raw.get("step"), join_path(where, "step"), err, steps)
        checks = _checks(raw, where, err, step=True)
        if index is None:
            continue
        label = INITIAL if index < 0 or steps is None else step_label(steps[index])
        blocks.append(Block(where, index, label, checks, err.file))
    if not blocks and not err.problems:
        err.add("no checks: add final and/or steps", path)
    return tuple(blocks)


def _checks(raw: object, path: str, err: Errors, *, step: bool) -> tuple[Check, ...]:
    keys = (*CHECK_TYPES, "step") if step else tuple(CHECK_TYPES)
    if not isinstance(raw, Mapping):
        err.add(f"must be a map with any of: {', '.join(CHECK_TYPES)}", path)
        return ()
    checks: list[Check] = []
    for key, entries in raw.items():
        if key not in keys:
            err.add(f"unknown field {key!r}; allowed: {', '.join(keys)}", join_path(path, str(key)))
            continue
        if key == "step":
            continue
        cls = CHECK_TYPES[key]
        if not isinstance(entries, list) or not entries:
            err.add(f"must be a list of {{{', '.join(cls.fields)}}}", join_path(path, key))
            continue
        for i, entry in enumerate(entries):
            where = join_path(path, key, i)
            if not isinstance(entry, Mapping):
                err.add(f"must be a map with any of: {', '.join(cls.fields)}", where)
                continue
            unknown = [k for k in entry if k not in cls.fields]
            for k in unknown:
                err.add(
                    f"unknown field {k!r}; allowed: {', '.join(cls.fields)}",
                    join_path(where, str(k)),
                )
            check = cls.parse(entry, where, err)
            if check is not None and not unknown:
                checks.append(check)
    if not checks and not err.problems:
        err.add(f"no checks: add any of {', '.join(CHECK_TYPES)}", path)
    return tuple(checks)


def _step_index(value: object, path: str, err: Errors, steps: Sequence[Step] | None) -> int | None:
    """-1 for ``initial``, the index of the scenario step ``value`` names, or None (a
    problem added) when it names none or several."""
    count = len(steps) if steps is not None else 0
    span = f"0 to {count - 1}" if count else "none"
    if value == INITIAL:
        return -1
    if isinstance(value, bool) or not isinstance(value, (int, str)) or value == "":
        err.add(
            f"{value!r}: must be a step's name, its index in the scenario's steps"
            + (f" ({span})" if steps is not None else "")
            + f" or {INITIAL}",
            path,
        )
        return None
    if steps is None:
        if isinstance(value, int) and value < 0:
            err.add(f"{value}: a step index is 0 or more", path)
            return None
        return value if isinstance(value, int) else 0
    if isinstance(value, int):
        if 0 <= value < count:
            return value
        err.add(f"{value}: the scenario has {count} step(s) (indexes {span})", path)
        return None
    named = [s.index for s in steps if s.title and s.title == value]
    if len(named) == 1:
        return named[0]
    if len(named) > 1:
        err.add(
            f"{value!r}: {len(named)} steps have this name (steps "
            f"{', '.join(map(str, named))}); use the index",
            path,
        )
        return None
    names = [repr(s.title) for s in steps if s.title]
    err.add(
        f"{value!r}: no step has this name; named steps: {', '.join(names) or 'none'}; "
        f"or use an index ({span}) or {INITIAL}",
        path,
    )
    return None


def parse_expectations(data: object, file: str, steps: Sequence[Step] | None) -> Expectations:
    """An expect document (a file's whole content); FieldError listing every problem."""
    err = Errors(file)
    blocks = read_expectations(data, "", err, steps)
    if err.problems:
        raise FieldError(err.problems)
    return Expectations(blocks, (file,))


def load_expectations(path: str | Path, steps: Sequence[Step] | None) -> Expectations:
    """Read and check an expect file for a scenario with these steps (None: on its own)."""
    from kgpu.userfiles import read_yaml

    file = str(path)
    docs: list[Any] = read_yaml(path)  # a regular file, bounded, UTF-8, YAML within limits
    if len(docs) != 1:
        raise FieldError(
            FieldProblem(
                f"an expect file is one YAML document with final and/or steps; this one has "
                f"{len(docs)}",
                file=file,
            )
        )
    return parse_expectations(docs[0], file, steps)


__all__ = [
    "Block",
    "Expectations",
    "load_expectations",
    "parse_expectations",
    "read_expectations",
]
