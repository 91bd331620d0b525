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

#: What runs first among timers due at the same instant.
CLOUD, SCRAPE, KEDA, HPA, CLUSTER_AUTOSCALER = range(5)

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

    def __init__(self) -> None:
        self._heap: list[Timer] = []
        self._seq = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._heap)

    def at(self, when: float, order: int, action: Action) -> None:
        heapq.heappush(self._heap, Timer(when, order, next(self._seq), action))

    def next_time(self) -> float:
        return self._heap[0].when if self._heap else math.inf

    def pop(self) -> Timer:
        return heapq.heappop(self._heap)


__all__ = ["CLOUD", "CLUSTER_AUTOSCALER", "HPA", "KEDA", "SCRAPE", "Action", "Loops", "Timer"]
