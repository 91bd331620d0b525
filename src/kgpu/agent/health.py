"""The agent's health endpoint: ``GET /healthz`` for the kubelet's startup and liveness probes.

Why its own server rather than a path on the metrics one: metrics are optional (and may be
turned off), the probes are not; and a scrape that is slow to render must never make a probe
time out. The answer is computed by the agent at request time (:meth:`Agent.health_check`): 200 with
``ok`` once its components have started and its loops keep ticking, else 503 with the reason
in the body (``starting: ...``, ``the watch loop has not run for 41.0 s``), which is what
``kubectl describe pod`` shows for a failed probe. ``HOST:PORT`` is parsed as the metrics
address is (``:8081`` every interface, port 0 a free one).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from kgpu.metrics.server import parse_address
from kgpu.metrics.serving import Limits, PooledHTTPServer, ServerThread, send_reply

log = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
#: (healthy, reason): what the agent says about itself right now.
Check = Callable[[], tuple[bool, str]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server  # type: ignore[assignment]

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != HEALTH_PATH:
            send_reply(self, 404, f"not found; the agent's health is at {HEALTH_PATH}\n".encode())
            return
        try:
            healthy, reason = self.server.check()
        except Exception as exc:  # a probe must get an answer, never a reset connection
            healthy, reason = False, f"the health check failed: {exc}"
        send_reply(self, 200 if healthy else 503, (reason + "\n").encode())

    def log_message(self, format: str, *args: object) -> None:
        log.debug("health http: " + format, *args)


class _Server(PooledHTTPServer):
    check: Check


#: Probes are one request every few seconds: two workers; 500 idle connections cost 500
#: sockets (capped at 64 open, the oldest silent one dropped), never a thread each.
LIMITS = Limits(workers=2, max_connections=64, read_timeout=5.0, idle_timeout=10.0)


class HealthServer:
    """``GET /healthz`` on ``address``, answered by ``check``, in a background thread. Binds in
    the constructor, so a busy port fails the agent's start with the address named."""

    def __init__(self, address: str, check: Check) -> None:
        host, port = parse_address(address, "--health-address")
        try:
            self._httpd = _Server((host, port), _Handler, name="kgpu-agent-health", limits=LIMITS)
        except OSError as exc:
            raise OSError(
                exc.errno, f"--health-address: cannot serve on {address}: {exc.strerror}"
            ) from None
        self._httpd.check = check
        self._serving = ServerThread(self._httpd, "kgpu-agent-health")

    @property
    def port(self) -> int:
        return self._serving.port

    def start(self) -> None:
        self._serving.start()

    def stop(self) -> None:
        self._serving.stop()
