"""The controller's health endpoint: ``GET /healthz`` and ``GET /readyz``.

What they mean, on every replica (leader or standby):

- ``/healthz`` (liveness): the process's loops run: the leader election loop is alive and, on
  the leader, its sync workers are. A standby is healthy: waiting for the Lease is its job. A
  failure here means restart me.
- ``/readyz`` (readiness): the informers have their first lists and the admission webhook
  serves. A standby is ready too, on purpose: the webhook runs on every replica, and the
  Service in front of it must keep endpoints while leadership moves. Which replica leads is
  the Lease's holder (``kubectl get lease``), and the first line of both answers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

#: (ok, text) of one check
Check = Callable[[], tuple[bool, str]]


class HealthServer:
    """Serves ``/healthz`` and ``/readyz`` from two checks on ``host:port``."""

    def __init__(self, address: tuple[str, int], healthz: Check, readyz: Check) -> None:
        self._address = address
        self.checks = {"/healthz": healthz, "/readyz": readyz}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_address[1] if self._server is not None else 0

    def start(self) -> HealthServer:
        checks = self.checks

        class Handler(BaseHTTPRequestHandler):
            timeout = 10

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("health: " + format, *args)

            def do_GET(self) -> None:
                check = checks.get(self.path.split("?", 1)[0])
                if check is None:
                    code, text = 404, "not found: /healthz or /readyz\n"
                else:
                    try:
                        ok, text = check()
                    except Exception as exc:  # a check that breaks is a failed check
                        ok, text = False, f"check failed: {exc}\n"
                    code = 200 if ok else 503
                data = text.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer(self._address, Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="health", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        self._thread = None
