"""Serving ``/metrics`` over HTTP, with nothing but the standard library.

Every request renders afresh from :meth:`kgpu.metrics.collector.Exporter.scrape`, so values are
read at scrape time. ``HOST:PORT`` follows dcgm-exporter's ``--address``: ``:9400`` listens on
every interface, port 0 picks a free port (tests read :attr:`MetricsServer.port`).

The standard library's threading server starts a thread per connection and listens with a
backlog of 5: 200 concurrent scrapes overflowed the backlog (clients waited for TCP retries, the
slowest ~28 s) and a client that connected and sent nothing held its thread forever. This one
is :class:`kgpu.metrics.serving.PooledHTTPServer`: a backlog of :data:`BACKLOG`, one thread
for the sockets, :data:`WORKERS` threads rendering, and a connection that has not sent its
whole request within :data:`READ_TIMEOUT` seconds closed (16 trickling clients no longer
starve a scrape).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from kgpu.errors import FieldError, FieldProblem
from kgpu.metrics.exposition import CONTENT_TYPE
from kgpu.metrics.serving import LISTEN_BACKLOG, Limits, PooledHTTPServer, ServerThread, send_reply

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
BACKLOG = LISTEN_BACKLOG
#: Threads that render answers; sockets are all served by one event-loop thread.
WORKERS = 4
#: Open connections: a burst of 200 scrapes fits; each holds at most one answer.
MAX_CONNECTIONS = 256
#: Seconds a client may take to send its whole request: an idle or trickling connection is
#: closed after this, and never holds a worker.
READ_TIMEOUT = 5.0


class _Handler(BaseHTTPRequestHandler):
    server: _Server  # type: ignore[assignment]

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


class _Server(PooledHTTPServer):
    """The pooled server (:class:`kgpu.metrics.serving.PooledHTTPServer`) with the render
    function its handler calls."""

    render: Callable[[], str]


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
        limits = Limits(
            workers=workers,
            max_connections=MAX_CONNECTIONS,
            read_timeout=read_timeout,
            idle_timeout=read_timeout,
        )
        self._httpd = _Server((host, port), _Handler, name="kgpu-metrics-http", limits=limits)
        self._httpd.render = render
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
