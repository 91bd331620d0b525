"""One reader of a node's GPU events per process, fanned out to everyone who needs them.

Why one: on a real H200 (driver 580) the agent's health monitor waited in
``nvmlEventSetWait_v2`` on an event set of its own while the exporter drained another set
"without waiting" on every scrape; the driver serialises event waits, so each scrape queued
behind the monitor's half-second wait and ``/metrics`` took 388-506 ms instead of 8 ms. Here a
single thread per backend waits for events (:meth:`EventHub.acquire` starts it, the last
:meth:`EventHub.release` stops it) and hands each batch to every :class:`Subscription` (the
agent's health loop) and to :meth:`EventHub.last_xids` (``DCGM_FI_DEV_XID_ERRORS``), which a
scrape reads without calling NVML at all.

The hub is generic over the backend's ``wait_events``, so a simulated backend runs the same
code the NVML one does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kgpu.hardware.backend import XidEvent

log = logging.getLogger(__name__)

#: How long one wait blocks: the reader notices a stop (and ticks) at least this often.
WAIT_S = 0.5


class EventHub:
    """Waits on ``wait`` (a backend's ``wait_events``) in one background thread while anyone
    holds it, and publishes what arrives."""

    def __init__(self, wait: Callable[[float], list[XidEvent]], *, wait_s: float = WAIT_S) -> None:
        self._wait = wait
        self._wait_s = wait_s
        self._cond = threading.Condition()
        self._queues: list[list[XidEvent]] = []
        self._last: dict[str, XidEvent] = {}
        self._users = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._failing: str | None = None
        #: When the reader last came back from a wait (monotonic): a liveness signal, since a
        #: wait that never returns (a hung driver call) stops it.
        self.last_tick = time.monotonic()

    # -- users ---------------------------------------------------------------------------------

    def acquire(self) -> None:
        """One more user: the reader runs while there is any."""
        with self._cond:
            self._users += 1
            if self._thread is None:
                self._stop = threading.Event()
                self.last_tick = time.monotonic()
                self._thread = threading.Thread(
                    target=self._run, args=(self._stop,), name="kgpu-gpu-events", daemon=True
                )
                self._thread.start()

    def release(self) -> None:
        """One user fewer; the last one stops the reader (it ends after its current wait)."""
        with self._cond:
            self._users = max(self._users - 1, 0)
            if self._users == 0:
                self._halt()

    def stop(self) -> None:
        """Stop the reader whoever holds it (the backend is closing)."""
        with self._cond:
            self._users = 0
            self._halt()

    def _halt(self) -> None:
        self._stop.set()
        self._thread = None
        self._cond.notify_all()

    def subscribe(self) -> Subscription:
        """A queue of every event read from now on (and a hold on the reader until closed)."""
        queue: list[XidEvent] = []
        with self._cond:
            self._queues.append(queue)
        self.acquire()
        return Subscription(self, queue)

    # -- what readers see ----------------------------------------------------------------------

    def last_xids(self) -> dict[str, int]:
        """The newest XID per GPU UUID read so far (NVML names the GPU even when one of its MIG
        devices raised it), as ``DCGM_FI_DEV_XID_ERRORS`` reports it."""
        with self._cond:
            return {uuid: event.xid for uuid, event in self._last.items()}

    def last_events(self) -> dict[str, XidEvent]:
        """The newest XID event per GPU UUID, with its time."""
        with self._cond:
            return dict(self._last)

    @property
    def running(self) -> bool:
        with self._cond:
            return self._thread is not None

    # -- the reader ----------------------------------------------------------------------------

    def _run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                events = self._wait(self._wait_s)
                self._failing = None
            except Exception as exc:
                if self._failing != str(exc):  # once per distinct failure
                    log.error("waiting for GPU events failed: %s", exc)
                    self._failing = str(exc)
                self.last_tick = time.monotonic()
                stop.wait(1.0)
                continue
            self.last_tick = time.monotonic()
            if not events:
                continue
            with self._cond:
                for event in events:
                    self._last[event.gpu_uuid] = event
                for queue in self._queues:
                    queue.extend(events)
                self._cond.notify_all()

    def _wait_queue(self, queue: list[XidEvent], timeout_s: float) -> list[XidEvent]:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        with self._cond:
            while not queue and self._thread is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            events = list(queue)
            queue.clear()
            return events

    def _unsubscribe(self, queue: list[XidEvent]) -> None:
        with self._cond:
            self._queues = [q for q in self._queues if q is not queue]
        self.release()


class Subscription:
    """One consumer's view of the hub: every event read since it subscribed, each once."""

    def __init__(self, hub: EventHub, queue: list[XidEvent]) -> None:
        self.hub = hub
        self._queue = queue
        self._closed = False

    def wait(self, timeout_s: float) -> list[XidEvent]:
        """Block up to ``timeout_s`` for events; return those that arrived (maybe none)."""
        if self._closed:
            return []
        return self.hub._wait_queue(self._queue, timeout_s)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.hub._unsubscribe(self._queue)
