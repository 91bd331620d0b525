"""One watch stream of the API server, read by a background thread.

The API server sends one JSON event per line of a chunked response; an ``ERROR`` event carries a
``Status`` (code 410 = the requested ``resourceVersion`` is gone: list again). The stream ends
when the server's ``timeoutSeconds`` passes, when the connection breaks, or on :meth:`stop`; the
caller (an informer) then watches again from the last version it saw.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kgpu.store import Gone, Obj, StoreError, WatchEvent


class WatchError(StoreError):
    """An ``ERROR`` event other than 410."""

    def __init__(self, message: str, reason: str, code: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.code = code


class KubeWatch:
    """A :class:`~kgpu.store.Watch` over one streaming response. ``convert`` turns each
    event's object into the caller's form (``apiVersion``/``kind`` filled in, a served
    ``resource.k8s.io`` version converted to the internal one)."""

    def __init__(self, response: Any, convert: Callable[[Obj], Obj], name: str = "") -> None:
        self._response = response
        self._convert = convert
        self._events: queue.Queue[WatchEvent | BaseException | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._read, name=f"watch {name}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buf = b""
        try:
            for chunk in self._response.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self._events.put(self._event(json.loads(line)))
        except Exception as exc:  # a broken stream ends the watch; the caller watches again
            if isinstance(exc, StoreError):
                self._events.put(exc)
        self._events.put(None)

    def _event(self, raw: Obj) -> WatchEvent | BaseException:
        etype = str(raw.get("type", ""))
        obj = raw.get("object") or {}
        if etype == "ERROR":
            code = int(obj.get("code") or 0)
            message = str(obj.get("message") or "watch error")
            if code == 410:
                return Gone(message)
            return WatchError(message, str(obj.get("reason") or "InternalError"), code)
        if etype == "BOOKMARK":
            return WatchEvent("BOOKMARK", obj)
        return WatchEvent(etype, self._convert(obj))  # type: ignore[arg-type]

    def next(self, timeout: float | None = None) -> WatchEvent | None:
        if self._closed and self._events.empty():
            return None
        try:
            item = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is None:
            self._closed = True
            return None
        if isinstance(item, BaseException):
            self._closed = True
            raise item
        return item

    def __iter__(self) -> Iterator[WatchEvent]:
        while True:
            event = self.next(None)
            if event is None:
                return
            yield event

    @property
    def closed(self) -> bool:
        return self._closed

    def stop(self) -> None:
        """End the stream now: the reading thread, blocked in a socket read, is woken by a
        shutdown of the socket (a plain close would leave it waiting for the next event)."""
        self._closed = True
        for step in ("shutdown", "close", "release_conn"):
            with contextlib.suppress(Exception):  # already closed or released
                getattr(self._response, step)()
        self._events.put(None)
