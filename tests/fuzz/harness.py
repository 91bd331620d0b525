"""Running one kgpu command in-process on one input, and judging what it did.

The promise under test (README, "Commands"): every command ends in exit 0, or exit 1 with
``error: file: entry: field.path: problem`` lines that name the file at fault; never a
traceback, a hang or unbounded memory. A run breaks it when

- an exception other than ``SystemExit`` leaves the command (a traceback for the user);
- it runs past :data:`RUN_SECONDS` (a timer interrupts it: a hang);
- it raises ``MemoryError`` under the address-space cap (:data:`MEMORY_BYTES` above what the
  process had when the run began), or the process's peak resident memory grows by more than that;
- it exits with a code other than 0 or 1 (``kgpu allocate`` may also say 2: "cannot allocate");
- it exits 1 without an error line, or with an error line that names neither an input file nor
  one of the options it was given (``error: --feature-gates: ...``). (``kgpu
  sim`` whose expectations do not hold exits 1 with its ``expect: N of M assertion(s) failed
  (FILE)`` summary instead: a result the scenario asked for, judged by the file it names.)

The limits read ``KGPU_FUZZ_RUN_SECONDS`` and ``KGPU_FUZZ_MEMORY_MIB`` so that a long run on a
busy machine can loosen them.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from typer.testing import CliRunner

from kgpu.cli import app

REPO = Path(__file__).resolve().parents[2]
#: The acceptance inputs, where tests/conftest.py finds them (absent in a plain clone)
ACCEPTANCE = REPO.parent / "shared" / "acceptance"

RUN_SECONDS = float(os.environ.get("KGPU_FUZZ_RUN_SECONDS", "10"))
MEMORY_BYTES = int(os.environ.get("KGPU_FUZZ_MEMORY_MIB", "1024")) * 2**20

#: ``error: <where>: ...``: <where> is the file (or files, ", "-joined) the problem is in.
ERROR_LINE = re.compile(r"^error: (?P<where>.+?): \S")
#: ``kgpu sim``'s summary when the scenario's expectations fail (exit 1 by design, for CI).
EXPECT_LINE = re.compile(r"^expect: \d+ of \d+ assertion\(s\) failed \((?P<where>.+)\)$")


class RunTimeout(BaseException):
    """Raised by the timer; a BaseException so that no ``except Exception`` in kgpu eats it."""


@dataclass
class Outcome:
    args: list[str]
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # this process's CPU time for the run (steady on a busy machine)
    failure: str = ""  # why the run broke the promise ("" when it kept it)
    details: str = ""  # the traceback, the output: what to look at
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        shown = " ".join(self.args)
        return (
            f"kgpu {shown}\n-> {self.failure} (exit {self.exit_code}, {self.seconds:.2f} s)\n"
            f"{self.details}"
        )


def _on_alarm(signum: int, frame: FrameType | None) -> None:
    raise RunTimeout()


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _address_space() -> int:
    """The process's virtual size now (what RLIMIT_AS counts)."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


@contextmanager
def _memory_cap(extra: int) -> Iterator[None]:
    """Let the run map at most ``extra`` more bytes: a runaway allocation becomes a MemoryError
    in the run (reported) instead of the machine's OOM killer (which would take pytest and
    other people's work on this shared machine with it)."""
    now = _address_space()
    if not now:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = now + extra
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _names_input(where: str, roots: Sequence[Path]) -> bool:
    """Whether an error line's location names a file the user gave (or one it refers to)."""
    for part in where.split(", "):
        path = Path(part)
        candidates = [path] if path.is_absolute() else [root / path for root in roots]
        try:
            if any(c.is_file() for c in candidates):
                return True
        except (OSError, ValueError):
            continue
    return False


def run_cli(
    args: Sequence[str], *, roots: Sequence[Path], allowed_exits: Sequence[int] = (0, 1)
) -> Outcome:
    """Run ``kgpu ARGS`` in this process and judge it (see the module docstring). ``roots``
    are the folders a relative file name in an error line may be relative to."""
    outcome = Outcome(list(args))
    runner = CliRunner()
    rss_before = _peak_rss()
    start = time.perf_counter()
    cpu_start = time.process_time()
    try:
        with _memory_cap(MEMORY_BYTES), _time_limit(RUN_SECONDS):
            result = runner.invoke(app, list(args), catch_exceptions=True)
        outcome.cpu_seconds = time.process_time() - cpu_start
    except RunTimeout:
        outcome.seconds = time.perf_counter() - start
        outcome.failure = f"hang: still running after {RUN_SECONDS:g} s"
        outcome.details = traceback.format_exc(limit=-12)
        return outcome
    except MemoryError:
        outcome.seconds = time.perf_counter() - start
        outcome.failure = f"memory: more than {MEMORY_BYTES // 2**20} MiB"
        outcome.details = traceback.format_exc(limit=-12)
        return outcome
    outcome.seconds = time.perf_counter() - start
    outcome.exit_code = result.exit_code
    outcome.stdout = result.stdout
    outcome.stderr = result.stderr
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        if isinstance(exc, MemoryError):
            outcome.failure = f"memory: more than {MEMORY_BYTES // 2**20} MiB"
        else:
            outcome.failure = f"traceback: {type(exc).__name__}: {str(exc)[:300]}"
        if result.exc_info is not None:
            outcome.details = "".join(traceback.format_exception(*result.exc_info)[-12:])
        return outcome
    grown = _peak_rss() - rss_before
    if grown > MEMORY_BYTES:
        outcome.failure = f"memory: peak RSS grew by {grown // 2**20} MiB"
        return outcome
    if result.exit_code not in allowed_exits:
        outcome.failure = f"exit code {result.exit_code} (allowed: {list(allowed_exits)})"
        outcome.details = result.stderr[-3000:]
        return outcome
    if result.exit_code == 1:
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        expect = [m for m in map(EXPECT_LINE.match, result.stderr.splitlines()) if m]
        if not errors and expect and _names_input(expect[-1].group("where"), roots):
            return outcome  # expectations that do not hold: reported, by the file that set them
        if not errors:
            outcome.failure = "exit 1 without an 'error: file: ...' line"
            outcome.details = result.stderr[-3000:]
            return outcome
        for line in errors:
            match = ERROR_LINE.match(line)
            options = {a.split("=", 1)[0] for a in args if a.startswith("-")}
            if match is None or not (
                _names_input(match.group("where"), roots) or match.group("where") in options
            ):
                outcome.failure = f"an error line that names no input file: {line[:300]!r}"
                outcome.details = result.stderr[-3000:]
                return outcome
    return outcome


@dataclass(frozen=True)
class Budget:
    """What one run may cost per byte of its input (issue 28): CPU seconds, characters of
    output, bytes of memory, each a base plus so much per input byte. The memory budget is
    checked where the run is in-process library code (tracemalloc's peak); CLI runs keep the
    address-space cap above."""

    cpu_base: float = 1.0
    cpu_per_byte: float = 0.0005
    output_base: int = 4096
    output_per_byte: int = 4
    memory_base: int = 16 << 20
    memory_per_byte: int = 4096

    def excess(self, size: int, *, cpu: float = 0.0, output: int = 0, memory: int = 0) -> str:
        """Why a run of a ``size``-byte input cost too much ("" when it did not)."""
        if cpu > self.cpu_base + self.cpu_per_byte * size:
            return f"slow: {cpu:.2f} CPU s for {size} input bytes"
        if output > self.output_base + self.output_per_byte * size:
            return f"output: {output:,} characters for {size} input bytes"
        if memory > self.memory_base + self.memory_per_byte * size:
            return f"memory: {memory // 1024:,} KiB for {size} input bytes"
        return ""
