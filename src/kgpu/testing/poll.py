"""Waiting, in a test, for what another thread or process does: poll until a check holds.

The agent, the controller and the fakes change state on their own threads and in child
processes, often with no event a test could wait on; a test polls a check with a deadline
instead of sleeping a fixed time (too short on a loaded CI machine, too long everywhere else).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    check: Callable[[], T],
    timeout_s: float = 10.0,
    step_s: float = 0.02,
    ignore: tuple[type[Exception], ...] = (),
) -> T | None:
    """``check()``'s first truthy value, or its last value once ``timeout_s`` has passed.

    ``check`` runs at least once, and once more after the deadline. An exception of a type in
    ``ignore`` (a status file read while it is rewritten, say) counts as a falsy ``None``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value: T | None = check()
        except ignore:
            value = None
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step_s)
