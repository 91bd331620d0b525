"""The simulated clock's periodic work: what real controllers do on a period rather than on a
change — Prometheus' scrapes, KEDA's polls, the HPA controller's syncs, cluster-autoscaler's
scans.

Each is a timer: ``(when, order, action)``. :func:`kgpu.sim.settle.advance` runs them in time
order as the clock moves (never while it stands still: every step at one instant happens before
them), and lets the cluster settle after each one that changed something. At one instant the
``order`` decides: a node the cloud provisioned joins first (the pods waiting for it are
scheduled before anything looks), then a scrape, so the queries after it read it, then KEDA,
the HPA controller and cluster-autoscaler, which sees the pods the scaling just made. An action
returns whether it changed the cluster and schedules its own next run.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kgpu.errors import KgpuError

#: What runs first among timers due at the same instant.
CLOUD, SCRAPE, KEDA, HPA, CLUSTER_AUTOSCALER = range(5)
_NAMES = {
    CLOUD: "node provisionings",
    SCRAPE: "Prometheus scrapes",
    KEDA: "KEDA polls",
    HPA: "HPA syncs",
    CLUSTER_AUTOSCALER: "cluster-autoscaler scans",
}
#: The periodic runs one scenario may make: 10 hours of simulated time at the default
#: intervals (scrapes and HPA syncs every 15 s, KEDA polls every 30 s, scans every 10 s: 960
#: runs an hour). Each run is real controller code (a scrape renders and parses every
#: exporter; 0.25-0.4 ms a run on a 2-core VM), so this is a few CPU seconds; a week of
#: ``advance`` (161,280 runs: 39 s) or a ``scan-interval`` of 1 ms would run for minutes.
MAX_RUNS = 10_000


class LoopLimitError(KgpuError):
    """The scenario asked for more periodic work than :data:`MAX_RUNS`."""


#: ``action(now) -> changed``: True when it wrote something the cluster must settle after.
Action = Callable[[float], bool]


@dataclass(order=True)
class Timer:
    when: float
    order: int
    seq: int
    action: Action = field(compare=False)


class Loops:
    """A time-ordered queue of timers."""

    def __init__(self, limit: int | None = None) -> None:
        self._heap: list[Timer] = []
        self._seq = itertools.count()
        self.limit = MAX_RUNS if limit is None else limit
        self.runs: dict[int, int] = {}  # timers popped so far, by order (kind)

    def __bool__(self) -> bool:
        return bool(self._heap)

    def at(self, when: float, order: int, action: Action) -> None:
        heapq.heappush(self._heap, Timer(when, order, next(self._seq), action))

    def next_time(self) -> float:
        return self._heap[0].when if self._heap else math.inf

    def pop(self) -> Timer:
        """The next timer, counted; raises :class:`LoopLimitError` past :attr:`limit`."""
        timer = self._heap[0]
        if sum(self.runs.values()) >= self.limit:
            ran = ", ".join(
                f"{count:,} {_NAMES.get(order, 'timers')}"
                for order, count in sorted(self.runs.items())
            )
            raise LoopLimitError(
                f"the simulated clock reached {timer.when:g} s after {self.limit:,} periodic "
                f"runs ({ran}), kgpu sim's limit for one scenario (10 hours at the default "
                "intervals): shorten the advance, or lengthen cluster-autoscaler's "
                "scan-interval or a ScaledObject's pollingInterval"
            )
        self.runs[timer.order] = self.runs.get(timer.order, 0) + 1
        return heapq.heappop(self._heap)


__all__ = [
    "CLOUD",
    "CLUSTER_AUTOSCALER",
    "HPA",
    "KEDA",
    "MAX_RUNS",
    "SCRAPE",
    "Action",
    "LoopLimitError",
    "Loops",
    "Timer",
]
