"""The client-side rate limit: a burst at once, then the steady rate, for every request the
store sends (watches included)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kgpu.cluster.kube import KubeStore
from kgpu.cluster.ratelimit import TokenBucket
from kgpu.testing.apiserver import FakeApiServer

from .conftest import TEST_CLIENT, write_kubeconfig


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))
        self.now += seconds


def test_burst_then_steady_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(5, 10, clock=clock, sleep=clock.sleep)
    for _ in range(12):
        bucket.acquire()
    assert clock.slept == [0.2, 0.2]  # 10 at once, then one per 1/5 s
    clock.now += 1.0  # a quiet second refills 5 tokens
    for _ in range(5):
        bucket.acquire()
    assert clock.slept == [0.2, 0.2]
    assert bucket.waited_s == pytest.approx(0.4)


def test_concurrent_callers_queue_rather_than_stampede() -> None:
    clock = Clock()
    bucket = TokenBucket(10, 1, clock=clock, sleep=clock.sleep)
    waits = [bucket.reserve() for _ in range(4)]  # four callers arrive together
    assert waits == pytest.approx([0.0, 0.1, 0.2, 0.3])


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="qps > 0"):
        TokenBucket(0, 10)


def test_the_store_paces_its_requests(tmp_path: Path) -> None:
    server = FakeApiServer().start()
    store = KubeStore.from_config(
        str(write_kubeconfig(tmp_path / "kc", server.url)),
        qps=50.0,
        burst=2,
        user_agent=TEST_CLIENT,
    )
    try:
        start = time.monotonic()
        for _ in range(6):
            store.list("v1", "Node")
        watch = store.watch("v1", "Node")
        watch.stop()
        # 7 requests, 2 free, then 1/50 s apart: at least 5/50 s in all
        assert time.monotonic() - start >= 0.1
        assert store.throttled_s > 0.0
        assert len(server.requests) == 7
    finally:
        store.close()
        server.stop()
