"""Serving ``/metrics`` over HTTP, with nothing but the standard library.

Every request renders afresh from :meth:`kgpu.metrics.collector.Exporter.scrape`, so values are
read at scrape time. ``HOST:PORT`` follows dcgm-exporter's ``--address``: ``:9400`` listens on
every interface, port 0 picks a free port (tests read :attr:`MetricsServer.port`).

The standard library's threading server starts a thread per connection and listens with a
backlog of 5: 200 concurrent scrapes overflowed the backlog (clients waited for TCP retries, the
slowest ~28 s) and a client that connected and sent nothing held its thread forever. This one
listens with a backlog of :data:`BACKLOG`, serves from :data:`WORKERS` threads and closes a
connection that sends nothing for :data:`READ_TIMEOUT` seconds.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from kgpu.errors import FieldError, FieldProblem
from kgpu.metrics.exposition import CONTENT_TYPE
from kgpu.metrics.serving import ServerThread, send_reply

log = logging.getLogger(__name__)

DEFAULT_ADDRESS = ":9400"


def parse_address(address: str, option: str = "--address") -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` for every interface, ``[::1]:PORT`` for IPv6) -> (host, port)."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise FieldError(
            FieldProblem(
                f"{address!r} is not HOST:PORT (for example :9400 or 127.0.0.1:9400)", path=option
            )
        )
    return host.strip("[]"), int(port_text)


#: Pending connections the kernel keeps for us (the standard library's default is 5: a burst
#: of scrapes beyond it is refused or retried by the client's TCP stack after a second or more).
BACKLOG = 512
#: Threads that serve requests; a connection waits in a queue of :data:`QUEUE` for one.
WORKERS = 16
QUEUE = 1024
#: Seconds a client may take to send its request (each read): an idle connection is closed
#: after this, and cannot hold a worker for longer.
READ_TIMEOUT = 5.0


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.read_timeout)  # an idle client is dropped

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body = self.server.render().encode("utf-8")
            send_reply(self, 200, body, CONTENT_TYPE)
        elif path in ("/", "/health"):
            send_reply(self, 200, b"kgpu metrics: see /metrics\n")
        else:
            send_reply(self, 404, b"not found\n")

    def log_message(self, format: str, *args: object) -> None:
        log.debug("metrics http: " + format, *args)


class _Server(HTTPServer):
    """An HTTP server with a real listen backlog and a fixed pool of worker threads.

    The accept loop only hands connections to a bounded queue; :data:`WORKERS` threads serve
    them. When the queue is full the connection is closed at once (the scraper retries at its
    next interval) rather than growing threads or memory without bound."""

    request_queue_size = BACKLOG
    allow_reuse_address = True
    daemon_threads = True
    render: Callable[[], str]
    read_timeout: float = READ_TIMEOUT

    def start_workers(self, workers: int) -> None:
        self._queue: queue.Queue[tuple[socket.socket, Any] | None] = queue.Queue(QUEUE)
        self._workers = [
            threading.Thread(target=self._work, name=f"kgpu-metrics-http-{i}", daemon=True)
            for i in range(workers)
        ]
        for thread in self._workers:
            thread.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            self._queue.put_nowait((request, client_address))
        except queue.Full:
            log.warning("metrics http: %d connections waiting; dropping one", QUEUE)
            self.shutdown_request(request)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception:  # one bad client never stops the worker
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    def stop_workers(self) -> None:
        while True:  # close what still waits: nobody will serve it
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self.shutdown_request(item[0])
        for _ in self._workers:
            self._queue.put(None)
        for thread in self._workers:
            thread.join(timeout=self.read_timeout + 5)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("metrics http: error serving %s", client_address, exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsServer:
    """An HTTP server for one render function, run in a background thread. It holds up under
    many concurrent scrapes and idle clients: see :class:`_Server`, :data:`BACKLOG`,
    :data:`WORKERS` and :data:`READ_TIMEOUT`."""

    def __init__(
        self,
        address: str,
        render: Callable[[], str],
        *,
        workers: int = WORKERS,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        host, port = parse_address(address)
        server_class = _Server6 if ":" in host else _Server
        self._httpd = server_class((host, port), _Handler)
        self._httpd.render = render
        self._httpd.read_timeout = read_timeout
        self._httpd.start_workers(workers)
        self._serving = ServerThread(self._httpd, "kgpu-metrics-http", join_timeout_s=10)

    @property
    def port(self) -> int:
        return self._serving.port

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    def start(self) -> None:
        self._serving.start()

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        self._serving.stop()
        self._httpd.stop_workers()
