"""Every HTTP server kgpu runs is :class:`kgpu.metrics.serving.PooledHTTPServer` (issue 28):
idle or slow clients cost a socket, never a thread, and cannot starve another request; the
webhook's TLS is 1.2+ AEAD only, reloads its certificate and logs a bad handshake in one line.
Loopback only; every client socket has a timeout."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import logging
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgpu.agent.health import HealthServer
from kgpu.controller.webhook import RELOAD_CHECK_S, AdmissionServer
from kgpu.metrics.server import MetricsServer
from kgpu.metrics.serving import Limits, PooledHTTPServer, ServerThread, send_reply

BODY = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}"}} {i}\n' for i in range(2000))  # ~70 KB


def _get(port: int, path: str, timeout: float = 10) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def test_500_idle_connections_to_healthz_are_no_threads_and_healthz_still_answers() -> None:
    server = HealthServer("127.0.0.1:0", lambda: (True, "ok"))
    server.start()
    before = threading.active_count()
    idle = []
    try:
        for _ in range(500):
            idle.append(socket.create_connection(("127.0.0.1", server.port), timeout=10))
        time.sleep(1.2)  # older than EVICT_AFTER: the first idle one makes room
        assert threading.active_count() <= before  # the probe threads: none per connection
        start = time.monotonic()
        assert _get(server.port, "/healthz") == (200, b"ok\n")
        assert time.monotonic() - start < 5
        assert server._httpd.connections <= 64
    finally:
        for conn in idle:
            conn.close()
        server.stop()


def test_16_slow_clients_do_not_starve_a_scrape() -> None:
    server = MetricsServer("127.0.0.1:0", lambda: BODY, workers=2, read_timeout=3.0)
    server.start()
    stop = threading.Event()

    def trickle() -> None:  # a byte every 0.2 s: never a whole request
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn,
            pytest.raises(OSError),
        ):
            for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000:
                if stop.is_set():
                    return
                conn.sendall(bytes([byte]))
                time.sleep(0.2)
            raise OSError("never cut off")

    slow = [threading.Thread(target=trickle, daemon=True) for _ in range(16)]
    try:
        for thread in slow:
            thread.start()
        time.sleep(0.5)
        for _ in range(3):
            start = time.monotonic()
            status, body = _get(server.port, "/metrics")
            assert (status, len(body)) == (200, len(BODY.encode()))
            assert time.monotonic() - start < 1.0
        for thread in slow:  # each is cut off at the read deadline, not left to trickle
            thread.join(timeout=8)
            assert not thread.is_alive()
    finally:
        stop.set()
        server.stop()


def test_a_slow_reader_does_not_hold_a_worker() -> None:
    """A client that never reads its answer: the event loop holds the bytes, the worker
    is free at once, and the answer is dropped at the write deadline."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            send_reply(self, 200, b"x" * (8 * 1024 * 1024))

        def log_message(self, format: str, *args: object) -> None:
            return None

    limits = Limits(workers=1, write_timeout=1.0, max_buffered_bytes=64 * 1024 * 1024)
    server = PooledHTTPServer(("127.0.0.1", 0), Handler, name="t", limits=limits)
    serving = ServerThread(server, "t").start()
    try:
        lazy = socket.create_connection(("127.0.0.1", serving.port), timeout=10)
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        lazy.sendall(b"GET / HTTP/1.0\r\n\r\n")
        time.sleep(0.2)
        status, body = _get(serving.port, "/", timeout=5)  # the one worker is free
        assert status == 200 and len(body) == 8 * 1024 * 1024
        lazy.close()
    finally:
        serving.stop()


def test_requests_beyond_the_size_cap_are_dropped() -> None:
    server = MetricsServer("127.0.0.1:0", lambda: BODY)
    server.start()
    try:
        # dropped: closed unanswered, as a FIN or (unread bytes still queued) a reset
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn,
            contextlib.suppress(ConnectionResetError, BrokenPipeError),
        ):
            conn.sendall(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 100_000)
            assert conn.recv(1) == b""
        assert _get(server.port, "/metrics")[0] == 200
    finally:
        server.stop()


# -- the webhook's TLS ----------------------------------------------------------------------


def _certificate(directory: Path, cn: str) -> None:
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", f"/CN={cn}", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
            *("-keyout", str(directory / "tls.key"), "-out", str(directory / "tls.crt")),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[tuple[AdmissionServer, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate for the HTTPS test")
    _certificate(tmp_path, "first")
    server = AdmissionServer(
        ("127.0.0.1", 0),
        tmp_path / "tls.crt",
        tmp_path / "tls.key",
        lambda pod, ns: None,  # type: ignore[arg-type,return-value]
    ).start()
    try:
        yield server, tmp_path
    finally:
        server.stop()


def _peer_cn(port: int, cafile: Path) -> str:
    context = ssl.create_default_context(cafile=str(cafile))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        cert = tls.getpeercert()
    return dict(x[0] for x in cert["subject"])["commonName"]  # type: ignore[index,arg-type,misc]


def test_a_plain_http_probe_is_one_log_line_and_tls_below_1_2_or_cbc_is_refused(
    webhook: tuple[AdmissionServer, Path], caplog: pytest.LogCaptureFixture
) -> None:
    server, certs = webhook
    with caplog.at_level(logging.DEBUG, logger="kgpu"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            with contextlib.suppress(ConnectionResetError):  # closed, maybe reset
                assert conn.recv(1024) == b""
        time.sleep(0.3)
    lines = [r for r in caplog.records if "handshake" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert not any(r.exc_info for r in caplog.records)

    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(str(certs / "tls.crt"))
    old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_2
    old.set_ciphers("AES128-SHA:AES256-SHA:ECDHE-RSA-AES128-SHA:ECDHE-RSA-AES256-SHA")
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        pytest.raises(ssl.SSLError),
    ):
        old.wrap_socket(raw, server_hostname="localhost")
    aead = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    aead.load_verify_locations(str(certs / "tls.crt"))
    aead.maximum_version = ssl.TLSVersion.TLSv1_2
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
        aead.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert "GCM" in tls.cipher()[0] or "CHACHA20" in tls.cipher()[0]
    assert server.tls().options & ssl.OP_NO_RENEGOTIATION


def test_a_renewed_certificate_is_served_without_a_restart(
    webhook: tuple[AdmissionServer, Path],
) -> None:
    server, certs = webhook
    assert _peer_cn(server.port, certs / "tls.crt") == "first"
    renewed = certs / "renewed"
    renewed.mkdir()
    _certificate(renewed, "second")
    for name in ("tls.key", "tls.crt"):  # as a Secret volume swaps its files
        (renewed / name).replace(certs / name)
    time.sleep(RELOAD_CHECK_S + 0.1)
    assert _peer_cn(server.port, certs / "tls.crt") == "second"


def test_the_webhook_answers_over_kept_alive_connections(
    webhook: tuple[AdmissionServer, Path],
) -> None:
    server, certs = webhook
    context = ssl.create_default_context(cafile=str(certs / "tls.crt"))
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
    try:
        for _ in range(3):  # one connection, three reviews (as the API server keeps it alive)
            conn.request("POST", "/mutate-pods", json.dumps({"kind": "x"}).encode())
            answer = conn.getresponse()
            assert answer.status == 400 and b"AdmissionReview" in answer.read()
    finally:
        conn.close()
