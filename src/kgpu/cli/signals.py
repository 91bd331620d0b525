"""How the long-running commands (``agent``, ``metrics``, ``sim --serve-metrics``) stop.

SIGTERM (what the kubelet sends a pod) and SIGINT (Ctrl-C) both end the wait; the command then
says which one arrived in one line, cleans up, and exits 0 after SIGTERM — a clean stop, so a
DaemonSet rollout does not count a crash — or 130 after SIGINT, as shells report an interrupted
program. Python's default for SIGINT (a KeyboardInterrupt raised wherever the main thread is)
would print a traceback from whichever frame it hit.
"""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

#: The exit status after each signal: 128 + SIGINT as a shell reports Ctrl-C; 0 after SIGTERM.
EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 0}


class StopSignals:
    """Turns SIGINT and SIGTERM into an event the command waits on."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.received: signal.Signals | None = None

    def install(self) -> StopSignals:
        for sig in EXIT_CODES:
            signal.signal(sig, self._on_signal)
        return self

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.received = signal.Signals(signum)
        self.event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once a stop signal arrived (after ``timeout`` seconds at most)."""
        return self.event.wait(timeout)

    def wait_forever(self) -> None:
        # short waits: a handler runs between them even where a long wait would not wake
        while not self.event.wait(0.5):
            pass

    @property
    def name(self) -> str:
        return self.received.name if self.received is not None else "stop"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.received, 0) if self.received is not None else 0


def exit_on_sigint() -> None:
    """For every other command: Ctrl-C ends it with one line and exit 130 (click would print
    ``Aborted!`` and exit 1). The exit unwinds, so ``finally`` blocks still clean up."""

    def interrupted(_signum: int, _frame: FrameType | None) -> None:
        sys.stderr.write("SIGINT: interrupted\n")
        raise SystemExit(EXIT_CODES[signal.SIGINT])

    signal.signal(signal.SIGINT, interrupted)


__all__ = ["EXIT_CODES", "StopSignals", "exit_on_sigint"]
