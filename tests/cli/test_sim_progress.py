"""``kgpu sim`` shows progress on a long run: a progress bar on a terminal (nothing when
stderr is piped or captured), and with ``--watch`` each step's table as soon as the step has
run rather than all of them at the end."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.cli.sim_progress import ProgressBar
from kgpu.sim.scenario import load_scenario
from kgpu.sim.simulation import Simulation

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as stderr on an interactive shell does."""

    def isatty(self) -> bool:
        return True


def _quickstart() -> Simulation:
    from kgpu.sim.quickstart import quickstart_path

    return Simulation(load_scenario(quickstart_path()))


def _wait_for(stream: io.StringIO, text: str, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in stream.getvalue():
            return True
        time.sleep(0.01)
    return False


def test_a_terminal_gets_a_bar_that_follows_pods_and_steps() -> None:
    sim = _quickstart()
    steps = len(sim.scenario.steps)
    assert steps >= 2
    tty = Terminal()
    try:
        with ProgressBar(sim, tty, delay=0, interval=0.01):
            assert _wait_for(tty, f"steps 0/{steps}")  # drawn before anything ran
            sim.run()
            # the bar keeps up with the run: the last step and every pod placed
            placed = len(sim.context.pods) - len(sim.context.pending)
            assert _wait_for(tty, f"pods placed {placed}/{len(sim.context.pods)}  steps {steps}/")
    finally:
        sim.close()
    assert "kgpu sim" in tty.getvalue()


def test_a_pipe_gets_nothing() -> None:
    sim = _quickstart()
    piped = io.StringIO()  # isatty() is False
    try:
        with ProgressBar(sim, piped, delay=0, interval=0.01):
            sim.run()
            time.sleep(0.05)
    finally:
        sim.close()
    assert piped.getvalue() == ""


def test_the_cli_writes_no_bar_when_stderr_is_captured() -> None:
    result = runner.invoke(app, ["sim"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "pods placed" not in result.stderr
    assert "kgpu sim" not in result.stderr


def test_watch_prints_each_step_before_the_next_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    printed_before: list[str] = []  # stdout as it stood when each step began
    step = Simulation.step

    def spy(self: Simulation, s: object) -> None:
        sys.stdout.flush()
        printed_before.append(sys.stdout.buffer.getvalue().decode())  # type: ignore[union-attr]
        step(self, s)  # type: ignore[arg-type]

    monkeypatch.setattr(Simulation, "step", spy)
    result = runner.invoke(app, ["sim", "--watch"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert len(printed_before) >= 2
    assert "initial state" in printed_before[0]
    assert "steps[0]" not in printed_before[0]
    # steps[0]'s table was out before steps[1] started, and steps[1]'s was not yet
    assert "steps[0]" in printed_before[1]
    assert "steps[1]" not in printed_before[1]
    assert "steps[1]" in result.stdout
