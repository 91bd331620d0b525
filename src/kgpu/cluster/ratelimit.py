"""A client-side rate limit for API requests: a token bucket, as client-go's default
``flowcontrol`` limiter (QPS 5, burst 10).

Why on the client: one misbehaving agent among thousands (a hot loop after a bug, a relist
storm) must not be able to take more than its share of the API server; the server's own
priority-and-fairness is the second line, not the first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: client-go's defaults (rest.Config QPS and Burst).
DEFAULT_QPS = 5.0
DEFAULT_BURST = 10


class TokenBucket:
    """``burst`` requests at once, then ``qps`` per second. :meth:`acquire` reserves a token and
    sleeps until it is due, so concurrent callers are served in order without busy waiting."""

    def __init__(
        self,
        qps: float = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"rate limit needs qps > 0 and burst >= 1, got {qps}/{burst}")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()
        self.waited_s = 0.0  # total time callers spent throttled, for logs and benchmarks

    def reserve(self) -> float:
        """Take a token; how long the caller must wait before using it."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
            self.waited_s += wait
            return wait

    def acquire(self) -> None:
        wait = self.reserve()
        if wait > 0:
            self._sleep(wait)
