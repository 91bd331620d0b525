"""An HTTP server run from a background thread, and the one way its handlers answer.

Why one: the exporter's ``/metrics``, the agent's health endpoint and the controller's health
endpoint and admission webhook all serve from a daemon thread and, at stop, shut down, wait for
the thread and close the socket; and their handlers all answer a whole body with its type and
length. Written once, a fix (a stop that hangs, a socket left open, a slow client) reaches every
endpoint. It lives in this shell because it is the one both processes may import (the agent
and the controller), and no I/O may live in the core.

:class:`PooledHTTPServer` is what every one of them runs (issue 28). The standard library's
threading server gave each connection a thread for as long as the client kept it: 500 idle
connections to the agent's ``/healthz`` were 500 threads, 100 slow webhook clients 363 MiB,
and 16 clients trickling a request held all 16 ``/metrics`` workers. Here one thread owns every
socket (non-blocking, one selector): it accepts, completes the TLS handshake, reads a whole
request (head and ``Content-Length`` body) and writes the whole answer, each within a
deadline; only a complete request reaches one of a fixed number of worker threads, which run
the ``BaseHTTPRequestHandler`` on it in memory. So a slow or idle client costs one socket and
its bytes, never a thread; connections, request sizes and buffered bytes are capped. When the
connection cap is reached the oldest connection that has not sent its request within
:data:`EVICT_AFTER` seconds is dropped for the new one; with none such the new one is refused.
"""

from __future__ import annotations

import contextlib
import io
import logging
import queue
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from socketserver import BaseServer
from typing import Any, Protocol

log = logging.getLogger(__name__)

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


class Serving(Protocol):
    """What :class:`ServerThread` runs: a bound server it can serve, shut down and close."""

    server_address: Any

    def serve_forever(self) -> None: ...

    def shutdown(self) -> None: ...

    def server_close(self) -> None: ...


class ServerThread:
    """``server`` (already bound) served from a daemon thread named ``name``."""

    def __init__(
        self, server: BaseServer | Serving, name: str, *, join_timeout_s: float = 5.0
    ) -> None:
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


#: Limits of a :class:`PooledHTTPServer`, per server (each endpoint picks its own).
@dataclass(frozen=True)
class Limits:
    #: threads running handlers on complete requests
    workers: int = 2
    #: open connections; beyond it the oldest one still sending its request is dropped
    max_connections: int = 128
    #: seconds from a connection's accept (or its previous answer) to a complete request,
    #: TLS handshake included: a client trickling bytes is cut off after this, however slow
    read_timeout: float = 10.0
    #: seconds a kept-alive connection may sit idle between requests
    idle_timeout: float = 30.0
    #: seconds to write the whole answer to a client that reads slowly
    write_timeout: float = 10.0
    #: the largest request (head and body)
    max_request_bytes: int = 64 * 1024
    #: bytes held in all connections' buffers (requests read, answers unsent) together
    max_buffered_bytes: int = 32 * 1024 * 1024


MAX_HEAD = 16 * 1024
#: A connection that has not sent its request in this many seconds may be dropped for a new
#: one when the server is full.
EVICT_AFTER = 1.0
LISTEN_BACKLOG = 512


class _BufferedConnection:
    """What a ``BaseHTTPRequestHandler`` sees as its socket: the request already read, the
    answer collected in memory (the event loop writes it)."""

    def __init__(self, data: bytes, peer: Any) -> None:
        self._data = data
        self._peer = peer
        self.out: list[bytes] = []

    def makefile(self, mode: str, bufsize: int = -1) -> io.BytesIO:
        return io.BytesIO(self._data if "r" in mode else b"")

    def sendall(self, data: bytes) -> None:
        self.out.append(bytes(data))

    def settimeout(self, timeout: float | None) -> None:
        return None

    def setsockopt(self, *args: Any) -> None:
        return None

    def getpeername(self) -> Any:
        return self._peer


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: Any
    deadline: float
    state: str = "read"  # handshake | read | work | write
    buf: bytearray = field(default_factory=bytearray)
    out: bytes = b""
    sent: int = 0
    keep: bool = False
    since: float = 0.0


def _request_length(buf: bytes | bytearray, limit: int) -> int | None:
    """Bytes of the first complete request in ``buf`` (None: not complete yet); ValueError for
    one that cannot be served (too large, a body without ``Content-Length``)."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise ValueError("request head too large")
        return None
    length = 0
    for line in bytes(buf[:end]).split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        key = name.strip().lower()
        if key == b"content-length":
            length = int(value.strip())  # ValueError: not a number
            if length < 0:
                raise ValueError("negative Content-Length")
        elif key == b"transfer-encoding":
            raise ValueError("chunked requests are not served")
    total = end + 4 + length
    if total > limit:
        raise ValueError(f"request larger than {limit} bytes")
    return total if len(buf) >= total else None


class PooledHTTPServer:
    """An HTTP(S) server: one event-loop thread for every socket, ``limits.workers`` threads
    for handlers (module docstring). ``tls``: a callable giving the current server
    :class:`ssl.SSLContext` (asked once per connection, so a reloaded certificate serves the
    next handshake). Handlers reach the server as ``self.server`` (set attributes on it)."""

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        *,
        name: str,
        limits: Limits = Limits(),
        tls: Callable[[], ssl.SSLContext] | None = None,
    ) -> None:
        self.handler = handler
        self.name = name
        self.limits = limits
        self.tls = tls
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(LISTEN_BACKLOG)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self._conns: dict[socket.socket, _Conn] = {}
        self._buffered = 0
        self._done: queue.Queue[tuple[_Conn, bytes, bool]] = queue.Queue()
        self._work: queue.Queue[_Conn | None] = queue.Queue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._workers = [
            threading.Thread(target=self._worker, name=f"{name}-worker-{i}", daemon=True)
            for i in range(limits.workers)
        ]
        for thread in self._workers:
            thread.start()

    @property
    def connections(self) -> int:
        """Connections open right now (tests, debugging)."""
        return len(self._conns)

    # -- lifecycle (what ServerThread calls) -----------------------------------------------------
    def serve_forever(self) -> None:
        self._stopped.clear()
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self.socket, selectors.EVENT_READ, None)
                sel.register(self._wake_r, selectors.EVENT_READ, None)
                while not self._stop.is_set():
                    self._loop_once(sel)
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake()
        self._stopped.wait(10)

    def server_close(self) -> None:
        for _ in self._workers:
            self._work.put(None)
        for conn in list(self._conns.values()):
            self._close(conn, None)
        for sock in (self.socket, self._wake_r, self._wake_w):
            sock.close()
        for thread in self._workers:
            thread.join(timeout=5)

    # -- the event loop -------------------------------------------------------------------------
    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _loop_once(self, sel: selectors.BaseSelector) -> None:
        now = time.monotonic()
        deadline = min(
            (c.deadline for c in self._conns.values() if c.state != "work"), default=now + 0.5
        )
        for key, _events in sel.select(timeout=max(0.0, min(0.5, deadline - now))):
            sock = key.fileobj
            if sock is self.socket:
                self._accept(sel)
            elif sock is self._wake_r:
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
            else:
                conn = self._conns.get(sock)  # type: ignore[call-overload]
                if conn is not None:
                    self._step(sel, conn)
        while True:
            try:
                conn, out, keep = self._done.get_nowait()
            except queue.Empty:
                break
            if conn.sock in self._conns:
                self._answer(sel, conn, out, keep)
        now = time.monotonic()
        for conn in [c for c in self._conns.values() if c.state != "work" and c.deadline <= now]:
            if conn.state == "handshake":
                log.info("%s: TLS handshake from %s timed out", self.name, _peer(conn.peer))
            self._close(conn, sel)

    def _accept(self, sel: selectors.BaseSelector) -> None:
        for _ in range(64):
            try:
                sock, peer = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                log.debug("%s: accept failed", self.name, exc_info=True)
                return
            if len(self._conns) >= self.limits.max_connections and not self._evict(sel):
                sock.close()  # full of fresh requests: refused, the client retries
                continue

            sock.setblocking(False)
            now = time.monotonic()
            conn = _Conn(sock, peer, now + self.limits.read_timeout, since=now)
            if self.tls is not None:
                try:
                    conn.sock = self.tls().wrap_socket(
                        sock, server_side=True, do_handshake_on_connect=False
                    )
                except (OSError, ssl.SSLError) as exc:
                    log.info("%s: TLS setup for %s failed: %s", self.name, _peer(peer), exc)
                    sock.close()
                    continue
                conn.state = "handshake"
            self._conns[conn.sock] = conn
            sel.register(conn.sock, selectors.EVENT_READ, None)

    def _evict(self, sel: selectors.BaseSelector) -> bool:
        """Make room: drop the oldest connection that has not sent a whole request in
        :data:`EVICT_AFTER` seconds (a real client sends its request at once)."""
        old = time.monotonic() - min(EVICT_AFTER, self.limits.read_timeout / 2)
        waiting = [
            c for c in self._conns.values() if c.state in ("handshake", "read") and c.since < old
        ]
        if not waiting:
            return False
        self._close(min(waiting, key=lambda c: c.since), sel)
        return True

    def _step(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        try:
            if conn.state == "handshake":
                self._handshake(sel, conn)
            elif conn.state == "read":
                self._read(sel, conn)
            elif conn.state == "write":
                self._write(sel, conn)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            return
        except OSError:
            self._close(conn, sel)

    def _handshake(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        assert isinstance(conn.sock, ssl.SSLSocket)
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            sel.modify(conn.sock, selectors.EVENT_READ, None)
            return
        except ssl.SSLWantWriteError:
            sel.modify(conn.sock, selectors.EVENT_WRITE, None)
            return
        except (ssl.SSLError, OSError) as exc:  # one line per bad handshake, no traceback
            reason = getattr(exc, "reason", None) or exc.strerror or type(exc).__name__
            log.info("%s: TLS handshake from %s failed: %s", self.name, _peer(conn.peer), reason)
            self._close(conn, sel)
            return
        conn.state = "read"
        sel.modify(conn.sock, selectors.EVENT_READ, None)
        self._read(sel, conn)  # data may already sit in the TLS buffer

    def _read(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        while True:
            try:
                chunk = conn.sock.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError):
                break
            if not chunk:
                self._close(conn, sel)
                return
            if self._buffered + len(chunk) > self.limits.max_buffered_bytes:
                log.warning(
                    "%s: %d bytes buffered; dropping %s",
                    self.name,
                    self._buffered,
                    _peer(conn.peer),
                )
                self._close(conn, sel)
                return
            conn.buf += chunk
            self._buffered += len(chunk)
            if len(conn.buf) > self.limits.max_request_bytes + MAX_HEAD:
                break
        try:
            length = _request_length(conn.buf, self.limits.max_request_bytes)
        except ValueError as exc:
            log.debug("%s: %s from %s", self.name, exc, _peer(conn.peer))
            self._close(conn, sel)
            return
        if length is None:
            return
        request = bytes(conn.buf[:length])
        self._buffered -= len(conn.buf)
        conn.buf = bytearray()  # pipelined bytes after the request are not served
        conn.state = "work"
        conn.out = request  # handed to the worker through the queue
        sel.unregister(conn.sock)
        self._work.put(conn)

    def _answer(self, sel: selectors.BaseSelector, conn: _Conn, out: bytes, keep: bool) -> None:
        if not out or self._buffered + len(out) > self.limits.max_buffered_bytes:
            self._close(conn, None)
            return
        conn.out, conn.sent, conn.keep = out, 0, keep
        self._buffered += len(out)
        conn.state = "write"
        conn.deadline = time.monotonic() + self.limits.write_timeout
        sel.register(conn.sock, selectors.EVENT_WRITE, None)
        self._step(sel, conn)

    def _write(self, sel: selectors.BaseSelector, conn: _Conn) -> None:
        while conn.sent < len(conn.out):
            n = conn.sock.send(conn.out[conn.sent : conn.sent + 262144])
            if n <= 0:
                return
            conn.sent += n
        self._buffered -= len(conn.out)
        conn.out, conn.sent = b"", 0
        if not conn.keep:
            self._close(conn, sel)
            return
        now = time.monotonic()
        conn.state, conn.since = "read", now
        conn.deadline = now + self.limits.idle_timeout
        sel.modify(conn.sock, selectors.EVENT_READ, None)

    def _close(self, conn: _Conn, sel: selectors.BaseSelector | None) -> None:
        if self._conns.pop(conn.sock, None) is None:
            return
        if conn.state in ("read", "handshake"):
            self._buffered -= len(conn.buf)
        elif conn.state == "write":
            self._buffered -= len(conn.out)
        if sel is not None and conn.state != "work":
            with contextlib.suppress(KeyError, ValueError):
                sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    # -- workers ------------------------------------------------------------------------------
    def _worker(self) -> None:
        while True:
            conn = self._work.get()
            if conn is None:
                return
            out, keep = self._handle(conn.out, conn.peer)
            self._done.put((conn, out, keep))
            self._wake()

    def _handle(self, request: bytes, peer: Any) -> tuple[bytes, bool]:
        """Run the handler on one complete request: (answer bytes, keep the connection)."""
        wire = _BufferedConnection(request, peer)
        try:
            handler = self.handler.__new__(self.handler)
            handler.request = wire
            handler.client_address = peer
            handler.server = self  # type: ignore[assignment]
            handler.setup()
            try:
                handler.handle_one_request()
            finally:
                handler.finish()
        except Exception:  # one bad request never stops a worker
            log.debug("%s: error serving %s", self.name, _peer(peer), exc_info=True)
            return b"", False
        keep = not handler.close_connection and handler.request_version == "HTTP/1.1"
        return b"".join(wire.out), keep


def _peer(peer: Any) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)
