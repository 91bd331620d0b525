"""The /metrics server under load and against idle clients (issue 11): 200 concurrent scrapes
all answered, threads bounded, and a client that sends nothing is dropped instead of holding a
worker forever. Loopback only; every socket has a timeout, so the tests end by themselves."""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kgpu.metrics.server import BACKLOG, MetricsServer

BODY = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}"}} {i}\n' for i in range(2000))  # ~70 KB


def _scrape(port: int, barrier: threading.Barrier | None = None) -> tuple[int, int]:
    """(status, body length) of one GET /metrics on a fresh connection."""
    if barrier is not None:
        barrier.wait(timeout=30)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), len(body)


def test_200_concurrent_scrapes_are_all_answered_by_a_bounded_pool() -> None:
    assert BACKLOG >= 128
    server = MetricsServer("127.0.0.1:0", lambda: BODY, workers=8)
    server.start()
    threads_before = threading.active_count()
    try:
        barrier = threading.Barrier(200)
        with ThreadPoolExecutor(200) as pool:
            peak = 0
            futures = [pool.submit(_scrape, server.port, barrier) for _ in range(200)]
            while not all(f.done() for f in futures):
                peak = max(peak, threading.active_count())
                time.sleep(0.01)
            results = [f.result(timeout=60) for f in futures]
    finally:
        server.stop()
    assert results == [(200, len(BODY.encode()))] * 200
    # the 200 client threads, the accept loop and 8 workers: no thread per connection
    assert peak <= threads_before + 200
    assert threading.active_count() <= threads_before


def test_an_idle_client_is_dropped_and_does_not_starve_scrapes() -> None:
    server = MetricsServer("127.0.0.1:0", lambda: BODY, workers=2, read_timeout=0.5)
    server.start()
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(5)]
    try:
        start = time.monotonic()
        assert _scrape(server.port) == (200, len(BODY.encode()))  # 5 idle > 2 workers
        for conn in idle:
            assert conn.recv(1) == b""  # closed by the server, not by our 10 s timeout
        assert time.monotonic() - start < 9
    finally:
        for conn in idle:
            conn.close()
        server.stop()


def test_a_client_that_stops_mid_request_is_dropped() -> None:
    server = MetricsServer("127.0.0.1:0", lambda: BODY, workers=1, read_timeout=0.5)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as slow:
            slow.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never the blank line
            assert slow.recv(1) == b""
        assert _scrape(server.port) == (200, len(BODY.encode()))
    finally:
        server.stop()
