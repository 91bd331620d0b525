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
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from kgpu.metrics.serving import Limits, PooledHTTPServer, ServerThread, send_reply

log = logging.getLogger(__name__)

#: (ok, text) of one check
Check = Callable[[], tuple[bool, str]]


#: Probes only: two workers, no thread per connection (kgpu.metrics.serving).
LIMITS = Limits(workers=2, max_connections=64, read_timeout=5.0, idle_timeout=10.0)


class HealthServer:
    """Serves ``/healthz`` and ``/readyz`` from two checks on ``host:port``."""

    def __init__(self, address: tuple[str, int], healthz: Check, readyz: Check) -> None:
        self._address = address
        self.checks = {"/healthz": healthz, "/readyz": readyz}
        self._serving: ServerThread | None = None

    @property
    def port(self) -> int:
        return self._serving.port if self._serving is not None else 0

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
                send_reply(self, code, text.encode())

        server = PooledHTTPServer(self._address, Handler, name="health", limits=LIMITS)
        self._serving = ServerThread(server, "health").start()
        return self

    def stop(self) -> None:
        serving, self._serving = self._serving, None
        if serving is not None:
            serving.stop()
