"""An HTTP server run from a background thread, and the one way its handlers answer.

Why one: the exporter's ``/metrics``, the agent's health endpoint and the controller's health
endpoint and admission webhook all serve a standard-library server's ``serve_forever`` from a
daemon thread and, at stop, shut it down, wait for the thread and close the socket; and their
handlers all answer a whole body with its type and length. Written once, a fix (a stop that
hangs, a socket left open) reaches every endpoint. It lives in this shell because it is the one
both processes may import (the agent and the controller), and no I/O may live in the core.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import BaseServer

TEXT = "text/plain; charset=utf-8"


def send_reply(
    handler: BaseHTTPRequestHandler, code: int, body: bytes, content_type: str = TEXT
) -> None:
    """Answer ``handler``'s request with ``body`` (its type and length in the headers)."""
    handler.send_response(code)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def http_server(
    address: tuple[str, int], handler: type[BaseHTTPRequestHandler]
) -> ThreadingHTTPServer:
    """A bound server answering each connection on a daemon thread of its own (a stalled
    client never keeps the process from exiting)."""
    server = ThreadingHTTPServer(address, handler)
    server.daemon_threads = True
    return server


class ServerThread:
    """``server`` (already bound) served from a daemon thread named ``name``."""

    def __init__(self, server: BaseServer, name: str, *, join_timeout_s: float = 5.0) -> None:
        self.server = server
        self.name = name
        self.join_timeout_s = join_timeout_s
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        address: tuple[str, int] = self.server.server_address  # type: ignore[assignment]
        return int(address[1])

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> ServerThread:
        self._thread = threading.Thread(
            target=self.server.serve_forever, name=self.name, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (if started), wait for the thread, close the socket."""
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join(timeout=self.join_timeout_s)
            self._thread = None
        self.server.server_close()
