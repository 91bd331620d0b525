"""Informers: a local, always-current copy of the objects one component needs, kept by list+watch.

Why: a component that polls the API server (GET its Node, LIST all Nodes every two seconds)
costs the server the same whether anything changed or not, and with thousands of nodes that is
thousands of requests per second. An informer lists once, then holds one watch open from the
list's ``resourceVersion``; the server sends only changes (and a bookmark now and then), the
component reads its local copy and is told what changed. This is client-go's reflector +
indexer + event handlers, on kgpu's :class:`~kgpu.store.ObjectStore` protocol, so the same code
runs on the simulator's :class:`~kgpu.store.MemoryStore`, in tests, and against a real API
server (:class:`kgpu.cluster.kube.KubeStore`).

How it follows client-go's reflector:

- list (the store paginates), then watch from the list's ``resourceVersion`` with bookmarks, so
  a re-opened watch continues from the last version seen and misses nothing;
- a watch that ends (the server's timeout, a dropped connection) is re-opened from the last
  version, without a list;
- :class:`Gone` (410: the version was compacted away) -> list again; objects that vanished in
  between are reported deleted, changed ones updated;
- any other failure -> wait with exponential backoff and jitter (:class:`Backoff`), so
  thousands of agents that lost the API server together do not come back together.

An informer runs in its own thread (:meth:`Informer.start`), or is stepped by its owner
(:meth:`Informer.sync`) where a thread is unwanted (a simulator keeps one clock).
"""

from __future__ import annotations

import copy
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kgpu.store.objects import Obj, matches_fields, matches_labels, namespace_of
from kgpu.store.protocol import Gone, ObjectStore, Watch, WatchEvent

log = logging.getLogger(__name__)

OnAdd = Callable[[Obj], None]
OnUpdate = Callable[[Obj, Obj], None]
OnDelete = Callable[[Obj], None]
OnChange = Callable[[], None]
Key = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class Backoff:
    """Delays between failed list/watch attempts: ``initial_s`` doubling (``factor``) up to
    ``max_s``, each stretched by up to ``jitter`` x itself at random. The defaults are
    client-go's reflector's (800 ms, 30 s, 2.0, 1.0)."""

    initial_s: float = 0.8
    max_s: float = 30.0
    factor: float = 2.0
    jitter: float = 1.0

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """The wait after the ``failures``-th failure in a row (1 = the first)."""
        base = min(self.max_s, self.initial_s * self.factor ** max(0, failures - 1))
        return base * (1.0 + self.jitter * rand())


@dataclass(frozen=True)
class Scope:
    """What an informer holds: one kind, optionally one namespace, label and field selectors
    (equality terms, evaluated by the server)."""

    api_version: str
    kind: str
    namespace: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    fields: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(
        cls,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> Scope:
        return cls(
            api_version,
            kind,
            namespace,
            tuple(sorted((labels or {}).items())),
            tuple(sorted((fields or {}).items())),
        )

    def covers(
        self,
        namespace: str | None,
        labels: Mapping[str, str] | None,
        fields: Mapping[str, str] | None,
    ) -> bool:
        """Whether every object a list with these arguments returns is in this scope (same
        kind assumed): the query is at least as narrow as the scope."""
        if self.namespace is not None and namespace != self.namespace:
            return False
        wanted_labels, wanted_fields = labels or {}, fields or {}
        return all(wanted_labels.get(k) == v for k, v in self.labels) and all(
            wanted_fields.get(k) == v for k, v in self.fields
        )

    def describe(self) -> str:
        parts = [f"{self.kind}.{self.api_version}"]
        if self.namespace is not None:
            parts.append(f"namespace={self.namespace}")
        parts += [f"{k}={v}" for k, v in self.labels + self.fields]
        return " ".join(parts)


@dataclass
class InformerStats:
    """What an informer cost the server: lists, watches opened, events received."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    failures: int = 0


@dataclass
class _Handlers:
    on_add: list[OnAdd] = field(default_factory=list)
    on_update: list[OnUpdate] = field(default_factory=list)
    on_delete: list[OnDelete] = field(default_factory=list)
    on_change: list[OnChange] = field(default_factory=list)


def _key(obj: Obj) -> Key:
    return namespace_of(obj), str((obj.get("metadata") or {}).get("name", ""))


def _rv(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


class Informer:
    """The objects of one :class:`Scope`, kept current by list+watch, with event handlers.

    Reads (:meth:`get`, :meth:`list`) never touch the server and return copies. Handlers run on
    the informer's thread (or the caller of :meth:`sync`), one at a time, after the cache has
    changed; a handler that raises is logged and the others still run. ``on_change`` handlers
    run once per batch of events (a relist, or the events that arrived together), which is
    what a component that recomputes from the whole cache wants.
    """

    def __init__(
        self,
        store: ObjectStore,
        scope: Scope,
        *,
        backoff: Backoff | None = None,
        wait_s: float = 1.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.store = store
        self.scope = scope
        self.backoff = backoff or Backoff()
        self.stats = InformerStats()
        self._wait_s = wait_s  # how long the thread blocks on the watch before re-checking
        self._rand = rand
        self._cache: dict[Key, Obj] = {}
        self._lock = threading.Lock()  # guards _cache
        self._step = threading.RLock()  # one list/watch step at a time
        self._handlers = _Handlers()
        self._listed = False
        self._rv = ""
        self._watch: Watch | None = None
        self._watch_events = 0  # events (bookmarks included) on the current watch
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: BaseException | None = None

    # -- handlers ----------------------------------------------------------------------------
    def add_handler(
        self,
        on_add: OnAdd | None = None,
        on_update: OnUpdate | None = None,
        on_delete: OnDelete | None = None,
        on_change: OnChange | None = None,
    ) -> Callable[[], None]:
        """Register callbacks; returns the function that unregisters them (a shared informer
        outlives any one user). Objects already cached are replayed to ``on_add`` (and
        ``on_change`` is called once), as client-go does for a late handler, so a component
        never misses what arrived before it subscribed."""
        added: list[tuple[list[Any], Any]] = []
        with self._step:
            if on_add is not None:
                added.append((self._handlers.on_add, on_add))
                for obj in self.list():
                    self._call(on_add, obj)
            if on_update is not None:
                added.append((self._handlers.on_update, on_update))
            if on_delete is not None:
                added.append((self._handlers.on_delete, on_delete))
            if on_change is not None:
                added.append((self._handlers.on_change, on_change))
            for handlers, fn in added:
                handlers.append(fn)
            if on_change is not None and self._listed:
                self._call(on_change)

        def remove() -> None:
            with self._step:
                for handlers, fn in added:
                    if fn in handlers:
                        handlers.remove(fn)

        return remove

    # -- reads -------------------------------------------------------------------------------
    @property
    def synced(self) -> bool:
        """True once the first list has filled the cache."""
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        """The version the cache is current to (the last list, event or bookmark)."""
        return self._rv

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Block until the first list is in the cache; False when ``timeout`` passed first."""
        return self._synced.wait(timeout)

    def get(self, name: str, namespace: str | None = None) -> Obj | None:
        ns = "" if namespace is None else namespace
        with self._lock:
            obj = self._cache.get((ns, name))
            if obj is None and namespace is None:  # a namespaced kind asked for without one
                obj = self._cache.get(("default", name))
            return copy.deepcopy(obj) if obj is not None else None

    def list(
        self,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        """Cached objects matching the filters, ordered by namespace and name."""
        with self._lock:
            chosen = [
                obj
                for key, obj in sorted(self._cache.items())
                if (namespace is None or key[0] == namespace)
                and matches_labels(obj, labels)
                and matches_fields(obj, fields)
            ]
            return copy.deepcopy(chosen)

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    # -- running -----------------------------------------------------------------------------
    def start(self) -> Informer:
        """List and watch in a background thread until :meth:`stop`."""
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name=f"informer {self.scope.describe()}", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Close the watch and end the thread; the cache keeps its last contents."""
        self._stop.set()
        watch = self._watch
        if watch is not None:
            watch.stop()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    @property
    def running(self) -> bool:
        return self._thread is not None and not self._stop.is_set()

    def sync(self, timeout: float = 0.0) -> int:
        """One step: list if needed, (re)open the watch, apply the events that arrive within
        ``timeout`` seconds; returns how many were applied. Raises the store's errors
        (:class:`Gone` included, after which the next step lists again)."""
        try:
            with self._step:
                if not self._listed:
                    self._relist()
                if self._watch is None or self._watch.closed:
                    self._open_watch()
                watch = self._watch
                assert watch is not None
            return self._drain(watch, timeout)
        except Gone:
            with self._step:
                self._listed = False
                self._close_watch()
            raise
        except Exception:
            with self._step:
                self._close_watch()
            raise

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self.sync(self._wait_s)
                self.last_error = None
                watch = self._watch
                if watch is not None and watch.closed and self._watch_events == 0:
                    # the server ended the watch without a single event: do not hammer it
                    failures += 1
                    self._stop.wait(self.backoff.delay(failures, self._rand))
                else:
                    failures = 0
            except Gone as exc:
                self.last_error = exc
                self.stats.failures += 1
                failures += 1
                log.info("%s: %s; listing again", self.scope.describe(), exc)
                if failures > 1:  # the first 410 relists at once, as client-go does
                    self._stop.wait(self.backoff.delay(failures - 1, self._rand))
            except Exception as exc:  # the server is away or refused: back off, then retry
                if self._stop.is_set():
                    return
                self.last_error = exc
                self.stats.failures += 1
                failures += 1
                delay = self.backoff.delay(failures, self._rand)
                log.warning(
                    "%s: list/watch failed (%s); retrying in %.1fs",
                    self.scope.describe(),
                    exc,
                    delay,
                )
                self._stop.wait(delay)
        self._close_watch()

    # -- internals ---------------------------------------------------------------------------
    def _relist(self) -> None:
        s = self.scope
        items = self.store.list(
            s.api_version, s.kind, s.namespace, dict(s.labels) or None, dict(s.fields) or None
        )
        self.stats.lists += 1
        fresh = {_key(obj): obj for obj in items}
        with self._lock:
            old, self._cache = self._cache, fresh
        self._rv = items.resource_version
        self._listed = True
        self._close_watch()
        changed = False
        for key, obj in fresh.items():
            before = old.get(key)
            if before is None:
                changed = True
                self._emit_add(obj)
            elif _rv(before) != _rv(obj):
                changed = True
                self._emit_update(before, obj)
        for key, obj in old.items():
            if key not in fresh:
                changed = True
                self._emit_delete(obj)
        first = not self._synced.is_set()
        self._synced.set()
        if changed or first:
            self._emit_change()

    def _open_watch(self) -> None:
        s = self.scope
        self._watch = self.store.watch(
            s.api_version,
            s.kind,
            s.namespace,
            dict(s.labels) or None,
            dict(s.fields) or None,
            resource_version=self._rv or None,
            bookmarks=True,
        )
        self._watch_events = 0
        self.stats.watches += 1

    def _close_watch(self) -> None:
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()

    def _drain(self, watch: Watch, timeout: float) -> int:
        """Apply events until ``timeout`` passes with none pending; ``on_change`` fires after
        each batch (events that arrived together). Waiting happens outside the step lock, so
        a handler can be added while the informer idles."""
        deadline = time.monotonic() + timeout
        applied = 0
        dirty = False
        while True:
            wait = 0.0 if dirty else max(0.0, deadline - time.monotonic())
            event = watch.next(wait)
            with self._step:
                if event is not None:
                    self._watch_events += 1
                if event is not None and event.type != "BOOKMARK":
                    self._apply(event)
                    applied += 1
                    dirty = True
                    continue
                if event is not None:  # a bookmark: nothing changed up to its version
                    self.stats.bookmarks += 1
                    self._rv = event.resource_version or self._rv
                if dirty:
                    dirty = False
                    self._emit_change()
                    continue
            if watch.closed or time.monotonic() >= deadline or self._stop.is_set():
                return applied

    def _apply(self, event: WatchEvent) -> None:
        self.stats.events += 1
        obj = event.object
        key = _key(obj)
        if event.type == "DELETED":
            with self._lock:
                self._cache.pop(key, None)
            self._emit_delete(obj)
        else:
            with self._lock:
                before = self._cache.get(key)
                self._cache[key] = obj
            if before is None:
                self._emit_add(obj)
            else:
                self._emit_update(before, obj)
        self._rv = event.resource_version or self._rv

    def _call(self, fn: Callable[..., None], *args: Obj) -> None:
        try:
            fn(*(copy.deepcopy(a) for a in args))
        except Exception:  # one bad handler never stops the informer
            log.exception("%s: event handler failed", self.scope.describe())

    def _emit_add(self, obj: Obj) -> None:
        for fn in list(self._handlers.on_add):
            self._call(fn, obj)

    def _emit_update(self, old: Obj, new: Obj) -> None:
        for fn in list(self._handlers.on_update):
            self._call(fn, old, new)

    def _emit_delete(self, obj: Obj) -> None:
        for fn in list(self._handlers.on_delete):
            self._call(fn, obj)

    def _emit_change(self) -> None:
        for fn in list(self._handlers.on_change):
            self._call(fn)
