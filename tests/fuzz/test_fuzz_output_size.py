"""What ``kgpu sim --watch`` and ``kgpu validate`` print is bounded by their input (issue 25):
the output grows with the cluster and the steps, not with the length of a name, and an error
repeated thousands of times prints a screenful. Time bounds live with the other fuzz tests;
this file owns output size.

Mutated scenarios come from :mod:`tests.fuzz.mutate` as in ``test_fuzz_commands.py``; the
bound is generous (:data:`BYTES_PER_INPUT_BYTE` per byte of scenario, plus a base for the
built-in tables) but catches the 16-27 MB that 105-466 KB scenarios used to print.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgpu.cli import output

from .harness import REPO, run_cli
from .mutate import mutated_yaml

EXAMPLES = REPO / "examples"
#: Output bytes per byte of input at most, plus :data:`BASE_BYTES` for headers and tables.
BYTES_PER_INPUT_BYTE = 40
BASE_BYTES = 256 * 1024
LONG = "KGPU_FUZZ_EXAMPLES" in os.environ
SCENARIOS = [
    EXAMPLES / "mps-job.yaml",
    EXAMPLES / "taints-and-selectors.yaml",
    EXAMPLES / "autoscaling" / "t4-keda.yaml",
]


def _budget(ci: int) -> int:
    return int(os.environ.get("KGPU_FUZZ_EXAMPLES", ci))


@pytest.fixture(autouse=True)
def _narrow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """80 columns, as in a pipe or ``kubectl exec``: where folding made output grow most."""
    monkeypatch.setattr(output.console, "_width", 80)
    monkeypatch.setattr(output.err_console, "_width", 80)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)


def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="kgpu-fuzz-size-") as tmp:
        copy = Path(tmp) / "examples"
        shutil.copytree(EXAMPLES, copy)
        yield copy


def _size_ok(args: list[str], roots: list[Path], input_bytes: int) -> tuple[int, int]:
    outcome = run_cli(args, roots=roots)
    assert not outcome.failure, outcome.describe()
    printed = len(outcome.stdout.encode()) + len(outcome.stderr.encode())
    return printed, BYTES_PER_INPUT_BYTE * input_bytes + BASE_BYTES


@settings(
    max_examples=_budget(8),
    deadline=None,
    database=None,
    derandomize=not LONG,
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_watch_output_is_bounded_by_the_input(data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(SCENARIOS), label="scenario")
    docs: list[Any] = [d for d in yaml.safe_load_all(seed.read_text()) if d is not None]
    body = data.draw(mutated_yaml(docs), label="input")
    for root in _workdir():
        target = root / seed.relative_to(EXAMPLES)
        target.write_bytes(body)
        args = ["sim", str(target), "--watch"]
        printed, bound = _size_ok(args, [target.parent, Path.cwd()], len(body))
        assert printed <= bound, f"kgpu {' '.join(args)} printed {printed} bytes (> {bound})"


def _named(length: int, steps: int = 6) -> str:
    name = "n" + "x" * length
    return (
        f"name: {name}\nnodes: [{{name: {name[:60]}, machine: t4, count: 3}}]\nsteps:\n"
        + "".join(
            f"  - name: {name} {i}\n    addNodes: [{{name: g{i}-{name[:50]}, machine: t4}}]\n"
            for i in range(steps)
        )
    )


def test_watch_output_does_not_grow_with_a_name(tmp_path: Path) -> None:
    sizes = []
    for length in (300, 30_000):
        scenario = tmp_path / f"named-{length}.yaml"
        scenario.write_text(_named(length))
        outcome = run_cli(["sim", str(scenario), "--watch"], roots=[tmp_path])
        assert outcome.exit_code == 0, outcome.describe()
        sizes.append(len(outcome.stdout))
    assert sizes[1] < sizes[0] * 1.1 + 2000, sizes  # 100 times the name, about the same output


def test_a_mistake_repeated_thousands_of_times_prints_a_screenful(tmp_path: Path) -> None:
    scenario = tmp_path / "many.yaml"
    scenario.write_text(
        "name: many\nnodes:\n"
        + "".join(f"  - {{name: n{i}, machine: no-such-{i}}}\n" for i in range(5000))
    )
    for command in (["sim"], ["validate"]):
        outcome = run_cli([*command, str(scenario)], roots=[tmp_path])
        assert outcome.exit_code == 1, outcome.describe()
        lines = outcome.stderr.splitlines()
        assert len(lines) <= 60 and "4,950 more problem(s) not listed" in lines[-1], lines[-3:]
