"""Serving ``/metrics`` over HTTP, with nothing but the standard library.

Every request renders afresh from :meth:`kgpu.metrics.collector.Exporter.scrape`, so values are
read at scrape time. ``HOST:PORT`` follows dcgm-exporter's ``--address``: ``:9400`` listens on
every interface, port 0 picks a free port (tests read :attr:`MetricsServer.port`).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kgpu.errors import FieldError, FieldProblem
from kgpu.metrics.exposition import CONTENT_TYPE

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


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body = self.server.render().encode("utf-8")
            self._reply(200, CONTENT_TYPE, body)
        elif path in ("/", "/health"):
            self._reply(200, "text/plain; charset=utf-8", b"kgpu metrics: see /metrics\n")
        else:
            self._reply(404, "text/plain; charset=utf-8", b"not found\n")

    def _reply(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("metrics http: " + format, *args)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    render: Callable[[], str]


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsServer:
    """An HTTP server for one render function, run in a background thread."""

    def __init__(self, address: str, render: Callable[[], str]) -> None:
        host, port = parse_address(address)
        server_class = _Server6 if ":" in host else _Server
        self._httpd = server_class((host, port), _Handler)
        self._httpd.render = render
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="kgpu-metrics-http", daemon=True
        )
        self._thread.start()

    def serve_forever(self) -> None:
        self._httpd.serve_forever()

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._httpd.server_close()
