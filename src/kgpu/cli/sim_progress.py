"""``kgpu sim``'s progress bar: pods placed and steps done, on a terminal only.

A 100,000-GPU scenario takes a minute or more with nothing to show until its report. The bar is
drawn by a background thread that only reads the simulation's counters (``len`` of the pod and
queue maps, the steps done: atomic under the GIL), so the simulator's hot loops carry no
progress hook and a run is the same with or without it. It appears only when the stream is a
terminal and the run lasts longer than :data:`DELAY` seconds, and it erases itself when the run
ends; piped or captured output (CI, tests) never sees it.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from kgpu.sim.simulation import Simulation

#: seconds before the bar shows (a quick run stays as clean as before)
DELAY = 1.0
#: seconds between redraws
INTERVAL = 0.2


def placed(simulation: Simulation) -> tuple[int, int]:
    """(pods out of the scheduling queue, pods known): the bar's fill."""
    ctx = simulation.context
    known = len(ctx.pods)
    return known - min(known, len(ctx.pending)), known


def progress_line(simulation: Simulation) -> str:
    done, known = placed(simulation)
    steps = len(simulation.scenario.steps)
    return f"pods placed {done:,}/{known:,}  steps {simulation.steps_done}/{steps}"


class ProgressBar:
    """``with ProgressBar(simulation, sys.stderr): simulation.run()``."""

    def __init__(
        self,
        simulation: Simulation,
        stream: IO[str],
        *,
        delay: float = DELAY,
        interval: float = INTERVAL,
    ) -> None:
        self.simulation = simulation
        self.stream = stream
        self.delay = delay
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty is not None and isatty())

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="kgpu-sim-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(file=self.stream, force_terminal=True, emoji=False)
        # tables --watch prints to the same terminal go above the bar, not through it
        stdout = sys.stdout
        above = stdout is not self.stream and bool(getattr(stdout, "isatty", lambda: False)())
        bar = Progress(
            TextColumn("[bold]kgpu sim[/bold]"),
            BarColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            auto_refresh=False,
            redirect_stdout=above,
            redirect_stderr=False,
        )
        task = bar.add_task("", total=None)
        with bar:
            while True:
                self._draw(bar, task)
                if self._stop.wait(self.interval):
                    break

    def _draw(self, bar: Progress, task: TaskID) -> None:
        done, known = placed(self.simulation)
        bar.update(
            task,
            completed=done,
            total=known or None,
            description=progress_line(self.simulation),
        )
        bar.refresh()
