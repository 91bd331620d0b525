"""A rate-limited work queue with client-go's workqueue semantics.

Why: informer events arrive on their own threads, in bursts, often several for one object; a
controller wants each object synced once per burst, never by two workers at once, and retried
after a failure with a growing delay, without a failing object starving the others. client-go's
``workqueue.RateLimitingInterface`` is that contract, and this is it:

- :meth:`WorkQueue.add` of a key already waiting is a no-op (deduplication); a key added while
  a worker holds it is queued again when that worker calls :meth:`~WorkQueue.done`, so it is
  never processed twice at once and never loses the newer change;
- :meth:`~WorkQueue.add_after` adds later (a timer heap on one thread);
- :meth:`~WorkQueue.add_rate_limited` adds after :class:`RateLimiter`'s delay: per key
  exponential (5 ms doubling up to 1000 s, client-go's ``DefaultControllerRateLimiter``) and an
  overall token bucket (10 per second, burst 100), the larger of the two;
  :meth:`~WorkQueue.forget` resets a key's failures after a success;
- :meth:`~WorkQueue.shut_down` wakes every waiting worker; :meth:`~WorkQueue.get` then returns
  None.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass
class RateLimiter(Generic[K]):
    """client-go's default controller rate limiter: the larger of a per-key exponential
    backoff (``base_s`` x 2^failures, at most ``max_s``) and an overall token bucket
    (``qps``, ``burst``) shared by every key."""

    base_s: float = 0.005
    max_s: float = 1000.0
    qps: float = 10.0
    burst: int = 100
    clock: Callable[[], float] = time.monotonic
    _failures: dict[K, int] = field(default_factory=dict)
    _tokens: float | None = None  # None until the first reservation fills the bucket
    _last: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def when(self, key: K) -> float:
        """Seconds to wait before retrying ``key`` (and count one more failure of it)."""
        with self._lock:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
            backoff = min(self.max_s, self.base_s * 2.0**failures)
            return max(backoff, self._reserve())

    def _reserve(self) -> float:
        """Take one token from the bucket; how long until it is really there."""
        now = self.clock()
        tokens = float(self.burst) if self._tokens is None else self._tokens
        if self._tokens is None:
            self._last = now
        tokens = min(float(self.burst), tokens + (now - self._last) * self.qps) - 1.0
        self._tokens, self._last = tokens, now
        return 0.0 if tokens >= 0 else -tokens / self.qps

    def forget(self, key: K) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def retries(self, key: K) -> int:
        with self._lock:
            return self._failures.get(key, 0)


class WorkQueue(Generic[K]):
    """Keys to sync, deduplicated, one worker per key at a time (see the module docstring)."""

    def __init__(
        self,
        limiter: RateLimiter[K] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limiter: RateLimiter[K] = limiter if limiter is not None else RateLimiter()
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._shutdown = False
        self._later: list[tuple[float, int, K]] = []
        self._seq = itertools.count()
        self._timer: threading.Thread | None = None
        self.adds = 0  # keys queued (after deduplication): what the bench counts

    # -- adding ------------------------------------------------------------------------------
    def add(self, key: K) -> None:
        with self._cond:
            if self._shutdown or key in self._dirty:
                return
            self._dirty.add(key)
            self.adds += 1
            if key in self._processing:
                return  # queued again by done()
            self._queue.append(key)
            self._cond.notify_all()

    def add_after(self, key: K, delay_s: float) -> None:
        if delay_s <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            heapq.heappush(self._later, (self._clock() + delay_s, next(self._seq), key))
            if self._timer is None:
                self._timer = threading.Thread(target=self._wait_loop, name="workqueue timer")
                self._timer.daemon = True
                self._timer.start()
            self._cond.notify_all()

    def add_rate_limited(self, key: K) -> None:
        self.add_after(key, self.limiter.when(key))

    def forget(self, key: K) -> None:
        self.limiter.forget(key)

    def retries(self, key: K) -> int:
        return self.limiter.retries(key)

    # -- working -----------------------------------------------------------------------------
    def get(self, timeout: float | None = None) -> K | None:
        """The next key (now held by the caller until :meth:`done`); None on shut-down or
        when ``timeout`` passes first."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while not self._queue and not self._shutdown:
                wait = None if deadline is None else deadline - self._clock()
                if wait is not None and wait <= 0:
                    return None
                self._cond.wait(wait)
            if not self._queue:
                return None
            key = self._queue.popleft()
            self._processing.add(key)
            self._dirty.discard(key)
            return key

    def done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty and not self._shutdown:
                self._queue.append(key)
                self._cond.notify_all()

    def shut_down(self) -> None:
        with self._cond:
            self._shutdown = True
            self._later.clear()
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        return self._shutdown

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def waiting(self) -> int:
        """Keys waiting for a delay to pass."""
        with self._cond:
            return len(self._later)

    def _wait_loop(self) -> None:
        with self._cond:
            while not self._shutdown:
                if not self._later:
                    self._cond.wait()
                    continue
                at, _, key = self._later[0]
                now = self._clock()
                if at > now:
                    self._cond.wait(at - now)
                    continue
                heapq.heappop(self._later)
                if key not in self._dirty:
                    self._dirty.add(key)
                    self.adds += 1
                    if key not in self._processing:
                        self._queue.append(key)
                        self._cond.notify_all()
            self._timer = None
