"""One NVML event reader per process: health and metrics share it, and no scrape waits on it.

On a real H200 the exporter drained an event set of its own on every scrape while the health
monitor waited on another; the driver serialises event waits, so each scrape took 388-506 ms.
The fake NVML here blocks ``nvmlEventSetWait_v2`` the way that driver did (one wait at a time).
"""

from __future__ import annotations

import threading
import time

import pytest

from kgpu.drivers.metrics import MetricsComponent
from kgpu.hardware.backend import XidEvent
from kgpu.hardware.events import EventHub
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.testing.fake_nvml import FakeNvml

from .conftest import series


def _node() -> tuple[FakeNvml, NvmlBackend]:
    fake = FakeNvml(SimulatedBackend(load_machine("dgx-h100", hostname="n")))
    return fake, NvmlBackend(fake)


def _wait_for(check: object, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(check) and check():
            return True
        time.sleep(0.01)
    return False


def test_scrapes_never_wait_on_nvml_events_and_health_and_metrics_see_one_reader() -> None:
    fake, backend = _node()
    health = backend.events().subscribe()  # what the agent's health loop holds
    metrics = MetricsComponent("127.0.0.1:0", backend, None, "n")
    metrics.start()
    try:
        assert _wait_for(lambda: "kgpu-gpu-events" in fake.wait_threads)
        durations = []
        for _ in range(5):  # each one overlaps the reader's half-second wait
            started = time.perf_counter()
            text = metrics.scrape()
            durations.append(time.perf_counter() - started)
            time.sleep(0.05)
        assert max(durations) < 0.1, durations  # the old drain queued behind the wait: ~0.45 s
        assert {v for _, v in series(text, "DCGM_FI_DEV_XID_ERRORS")} == {0}

        fake.inject_event(3, 79)
        assert [(e.gpu_uuid, e.xid) for e in health.wait(5.0)] == [
            (backend.snapshot().gpus[3].uuid, 79)
        ]
        assert _wait_for(lambda: backend.events().last_xids())
        ((labels, value),) = series(metrics.scrape(), "DCGM_FI_DEV_XID_ERRORS", gpu="3")
        assert value == 79
        assert (labels["err_code"], labels["err_msg"]) == ("79", "GPU has fallen off the bus")
        # one event set, one waiting thread: the scrapes made no NVML event call at all
        assert fake.calls.count("nvmlEventSetCreate") == 1
        assert set(fake.wait_threads) == {"kgpu-gpu-events"}
    finally:
        metrics.stop()
        health.close()
        backend.close()
    assert not backend.events().running


def test_kgpu_metrics_alone_starts_the_reader_itself_and_stops_it() -> None:
    """No health loop: the exporter holds the reader while it serves, and lets it go."""
    fake, backend = _node()
    metrics = MetricsComponent("127.0.0.1:0", backend, None, "n")
    assert not backend.events().running
    metrics.start()
    try:
        assert backend.events().running
        fake.inject_event(5, 48)
        assert _wait_for(lambda: backend.events().last_xids())
        ((labels, value),) = series(metrics.scrape(), "DCGM_FI_DEV_XID_ERRORS", gpu="5")
        assert (value, labels["err_msg"]) == (48, "Double Bit ECC Error")
    finally:
        metrics.stop()
    assert not backend.events().running
    backend.close()


def test_every_subscriber_gets_every_event_once_and_a_failing_wait_is_retried() -> None:
    queue: list[int] = []
    lock = threading.Lock()
    failures = [RuntimeError("NVML lost")]

    def wait(timeout_s: float) -> list[XidEvent]:
        if failures:
            raise failures.pop()
        with lock:
            got = list(queue)
            queue.clear()
        if not got:
            time.sleep(min(timeout_s, 0.01))
        return [XidEvent(f"GPU-{n}", 13 + n) for n in got]

    hub = EventHub(wait, wait_s=0.01)
    a, b = hub.subscribe(), hub.subscribe()
    try:
        with lock:
            queue.extend([0, 1])
        got_a = a.wait(3.0)
        got_b = b.wait(3.0)
        assert [e.xid for e in got_a] == [13, 14] == [e.xid for e in got_b]
        assert a.wait(0.05) == []  # delivered once
        assert hub.last_xids() == {"GPU-0": 13, "GPU-1": 14}
    finally:
        a.close()
        assert hub.running  # b still holds it
        b.close()
    assert not hub.running


@pytest.mark.parametrize("closing", ["metrics", "health"])
def test_either_user_stopping_leaves_the_reader_to_the_other(closing: str) -> None:
    fake, backend = _node()
    health = backend.events().subscribe()
    metrics = MetricsComponent("127.0.0.1:0", backend, None, "n")
    metrics.start()
    try:
        if closing == "metrics":
            metrics.stop()
        else:
            health.close()
        assert backend.events().running
        fake.inject_event(1, 94)
        assert _wait_for(
            lambda: backend.events().last_xids().get(backend.snapshot().gpus[1].uuid) == 94
        )
    finally:
        metrics.stop()
        health.close()
        backend.close()
