"""The work queue behaves as client-go's: a key waits once however often it is added, is never
held by two workers, is queued again when it changed while held, and failures back off."""

from __future__ import annotations

import threading
import time

from kgpu.controller.workqueue import RateLimiter, WorkQueue


def test_a_key_added_many_times_is_synced_once() -> None:
    q: WorkQueue[str] = WorkQueue()
    for _ in range(5):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert q.get(0) == "a" and q.get(0) == "b" and q.get(0) is None


def test_a_key_changed_while_held_is_queued_again_after_done_not_before() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert q.get(0) == "a"
    q.add("a")  # an event while a worker syncs it
    assert q.get(0) is None  # no second worker gets it meanwhile
    q.done("a")
    assert q.get(0) == "a"
    q.done("a")
    assert q.get(0) is None


def test_failures_back_off_exponentially_per_key_and_forget_resets() -> None:
    now = [0.0]
    limiter: RateLimiter[str] = RateLimiter(clock=lambda: now[0])
    delays = [limiter.when("a") for _ in range(4)]
    assert delays == [0.005, 0.01, 0.02, 0.04]
    assert limiter.when("b") == 0.005  # another key is not slowed by a's failures
    limiter.forget("a")
    assert limiter.when("a") == 0.005
    capped: RateLimiter[str] = RateLimiter(base_s=1.0, max_s=8.0, clock=lambda: now[0])
    assert [capped.when("x") for _ in range(6)][-1] == 8.0


def test_the_overall_bucket_slows_a_storm_of_distinct_keys() -> None:
    now = [0.0]
    limiter: RateLimiter[int] = RateLimiter(qps=10.0, burst=3, clock=lambda: now[0])
    delays = [limiter.when(k) for k in range(5)]
    assert delays[:3] == [0.005] * 3  # the burst
    assert abs(delays[3] - 0.1) < 1e-9 and abs(delays[4] - 0.2) < 1e-9  # then 10 per second


def test_rate_limited_keys_come_back_after_their_delay() -> None:
    q: WorkQueue[str] = WorkQueue(RateLimiter(base_s=0.05))
    q.add_rate_limited("a")
    assert q.get(0) is None  # not yet
    started = time.monotonic()
    assert q.get(2.0) == "a"
    assert time.monotonic() - started >= 0.03
    assert q.retries("a") == 1


def test_shut_down_wakes_a_waiting_worker() -> None:
    q: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    worker = threading.Thread(target=lambda: got.append(q.get()))
    worker.start()
    time.sleep(0.05)
    q.shut_down()
    worker.join(2)
    assert got == [None] and not worker.is_alive()
    q.add("late")
    assert len(q) == 0
