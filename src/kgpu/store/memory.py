"""The in-memory object store: the simulator's cluster state and the tests' API server.

It follows the API server's rules that controllers can observe: ``resourceVersion`` bumps on
every write and a stale one conflicts; ``generateName`` gets a suffix; deleting an object that
still has finalizers only sets ``metadata.deletionTimestamp`` until the last finalizer goes;
``list`` reports the collection's version and ``watch`` continues from it, replaying from a
bounded history (as kube-apiserver's watch cache does) and answering :class:`Gone` for a version
older than that history. Thread-safe: the agent's components and a test may share one.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, cast

from kgpu.store.objects import (
    CLUSTER_SCOPED,
    Obj,
    group_of,
    key_of,
    matches_fields,
    matches_labels,
    merge_patch,
)
from kgpu.store.protocol import (
    AlreadyExists,
    Conflict,
    EventType,
    Gone,
    NotFound,
    ObjectList,
    WatchEvent,
)

Key = tuple[str, str, str, str]

#: Events kept for watches that resume from an older ``resourceVersion``.
DEFAULT_HISTORY = 1024

_Objects = list[Obj]  # (inside MemoryStore, `list` names its method)


class MemoryWatch:
    """A watch on a :class:`MemoryStore`: events are queued by the writer's thread and read by
    the watcher's, so a slow reader never slows a write."""

    def __init__(
        self,
        store: MemoryStore,
        group: str,
        kind: str,
        namespace: str | None,
        labels: Mapping[str, str] | None,
        fields: Mapping[str, str] | None,
        bookmarks: bool,
    ) -> None:
        self._store = store
        self.group = group
        self._kind = kind
        self._namespace = namespace
        self._labels = dict(labels or {})
        self._fields = dict(fields or {})
        self._bookmarks = bookmarks
        self._queue: deque[WatchEvent] = deque()
        self._cond = threading.Condition()
        self._closed = False

    def matches(self, key: Key, obj: Obj) -> bool:
        return (
            key[0] == self.group
            and key[1] == self._kind
            and (self._namespace is None or key[2] == self._namespace)
            and matches_labels(obj, self._labels)
            and matches_fields(obj, self._fields)
        )

    def event_for(self, etype: EventType, key: Key, obj: Obj, old: Obj | None) -> WatchEvent | None:
        """What this watch sees of one change, as kube-apiserver's watch cache filters it: an
        object that starts matching the selectors arrives as ``ADDED``, one that stops matching
        leaves as ``DELETED`` (its last matching state, at the new ``resourceVersion``)."""
        now = etype != "DELETED" and self.matches(key, obj)
        before = old is not None and self.matches(key, old)
        if etype == "DELETED":
            return WatchEvent("DELETED", _clone(obj)) if self.matches(key, obj) else None
        if now:
            return WatchEvent(
                "MODIFIED" if before and etype == "MODIFIED" else "ADDED", _clone(obj)
            )
        if before and old is not None:
            gone = _clone(old)
            gone.setdefault("metadata", {})["resourceVersion"] = obj["metadata"]["resourceVersion"]
            return WatchEvent("DELETED", gone)
        return None

    def push(self, event: WatchEvent) -> None:
        with self._cond:
            if not self._closed:
                self._queue.append(event)
                self._cond.notify()

    def next(self, timeout: float | None = None) -> WatchEvent | None:
        with self._cond:
            if not self._queue and not self._closed:
                self._cond.wait(timeout)
            if self._queue:
                return self._queue.popleft()
            if self._bookmarks and not self._closed:
                rv = str(self._store.resource_version)
                return WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": rv}})
            return None

    def drain(self) -> list[WatchEvent]:
        """Every queued event, without waiting."""
        with self._cond:
            out = list(self._queue)
            self._queue.clear()
            return out

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
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._store._unwatch(self)


class MemoryStore:
    """An in-memory :class:`~kgpu.store.protocol.ObjectStore`.

    ``clock`` supplies ``creationTimestamp``/``deletionTimestamp`` values so the simulator's
    clock, not the wall clock, shows in objects. ``history`` is how many past events a watch
    can resume across. ``strategy`` is what the API server does to an object it is given
    before storing it (the simulator's: the fields of disabled feature gates dropped), as
    ``strategy(new, old)`` with ``old`` None on create; it must not change its arguments.
    """

    def __init__(
        self,
        clock: Callable[[], str] | None = None,
        history: int = DEFAULT_HISTORY,
        strategy: Callable[[Obj, Obj | None], Obj] | None = None,
    ) -> None:
        self._strategy = strategy
        self._objects: dict[Key, Obj] = {}
        # (group, kind) -> that kind's objects: a list or watch reads one kind, not the store
        self._by_kind: dict[tuple[str, str], dict[Key, Obj]] = {}
        self._lock = threading.RLock()
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)
        self._clock = clock or (lambda: "1970-01-01T00:00:00Z")
        self.resource_version = 0  # the last resourceVersion handed out
        self.revision = 0  # bumps on every write; lets callers notice change cheaply
        # (group, kind) -> revision of the last write to an object of that kind, so a cache of
        # one kind (ResourceSlices in the DRA scheduler) survives writes to other kinds.
        self.kind_revisions: dict[tuple[str, str], int] = {}
        # (resourceVersion, event type, key, object, the object before the change)
        self._history: deque[tuple[int, EventType, Key, Obj, Obj | None]] = deque(maxlen=history)
        self._watchers: list[MemoryWatch] = []
        self._leaves = _SharedLeaves()

    # -- reads -----------------------------------------------------------------------------
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        with self._lock:
            obj = self._objects.get(_probe_key(api_version, kind, name, namespace))
            if obj is None:
                raise NotFound(f"{kind} {name!r} not found")
            return _clone(obj)

    def get_shared(
        self, api_version: str, kind: str, name: str, namespace: str | None = None
    ) -> Obj | None:
        """The stored object itself, not a copy (None when absent): see :meth:`list_shared`."""
        with self._lock:
            return self._objects.get(_probe_key(api_version, kind, name, namespace))

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> ObjectList:
        group = group_of(api_version)
        with self._lock:
            chosen = [
                (key, obj)
                for key, obj in self._by_kind.get((group, kind), {}).items()
                if (namespace is None or key[2] == namespace)
                and matches_labels(obj, labels)
                and matches_fields(obj, fields)
            ]
            # filter first, then sort only what is returned (the order callers see is unchanged)
            items = [_clone(obj) for _, obj in sorted(chosen, key=lambda item: item[0])]
            return ObjectList(items, str(self.resource_version))

    def list_shared(self, api_version: str, kind: str) -> _Objects:
        """Every object of a kind, in :meth:`list`'s order, as stored: not copies. For readers
        that only read and keep what they read (the simulator's DRA scheduler indexes every
        ResourceSlice; copies doubled a 100,000-GPU cluster's memory). Safe because a stored
        object is never changed in place: every write stores a new one. The caller must not
        change what it gets."""
        group = group_of(api_version)
        with self._lock:
            return [
                obj
                for _, obj in sorted(
                    self._by_kind.get((group, kind), {}).items(), key=lambda item: item[0]
                )
            ]

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        resource_version: str | None = None,
        bookmarks: bool = False,
    ) -> MemoryWatch:
        w = MemoryWatch(self, group_of(api_version), kind, namespace, labels, fields, bookmarks)
        with self._lock:
            if resource_version in (None, "", "0"):
                mine = self._by_kind.get((w.group, kind), {})
                for key, obj in sorted(mine.items(), key=lambda item: item[0]):
                    if w.matches(key, obj):
                        w.push(WatchEvent("ADDED", _clone(obj)))
            else:
                since = _parse_rv(resource_version)
                oldest = self._history[0][0] if self._history else self.resource_version + 1
                if since < oldest - 1 and since < self.resource_version:
                    raise Gone(
                        f"too old resource version: {since} ({oldest - 1})",
                    )
                for rv, etype, key, obj, old in self._history:
                    event = w.event_for(etype, key, obj, old) if rv > since else None
                    if event is not None:
                        w.push(event)
            self._watchers.append(w)
        return w

    def kind_revision(self, api_version: str, kind: str) -> int:
        """The store revision of the last create/update/delete of an object of this kind (0
        if none yet): equal values mean no object of the kind changed in between."""
        return self.kind_revisions.get((group_of(api_version), kind), 0)

    def all(self) -> Iterable[Obj]:
        with self._lock:
            return [_clone(obj) for _, obj in sorted(self._objects.items())]

    # -- writes ----------------------------------------------------------------------------
    def create(self, obj: Obj) -> Obj:
        return self._create(self._own(obj), copy_out=True)

    def _create(self, obj: Obj, *, copy_out: bool) -> Obj:
        if self._strategy is not None:
            obj = self._strategy(obj, None)
        meta = obj.setdefault("metadata", {})
        with self._lock:
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = f"{meta['generateName']}{next(self._uid):05x}"
            if obj.get("kind") not in CLUSTER_SCOPED:
                meta.setdefault("namespace", "default")
            key = key_of(obj)
            if key in self._objects:
                raise AlreadyExists(f"{obj.get('kind')} {meta.get('name')!r} already exists")
            meta["uid"] = f"00000000-0000-4000-8000-{next(self._uid):012x}"
            meta.setdefault("creationTimestamp", self._clock())
            meta.setdefault("generation", 1)
            return self._write(key, obj, "ADDED", copy_out=copy_out)

    def create_in_place(self, obj: Obj) -> None:
        """:meth:`create`, then fill the caller's object with what the store set (name,
        namespace, uid, creationTimestamp, generation, resourceVersion) instead of returning a
        copy: for a writer that keeps the object as its own record (the simulator's pods),
        one copy fewer per object."""
        stored = self._create(self._own(obj), copy_out=False)
        meta = obj.setdefault("metadata", {})
        for key, value in stored["metadata"].items():
            if type(value) in _ATOMS:
                meta[key] = value

    def update(self, obj: Obj) -> Obj:
        obj = self._own(obj)
        key = key_of(obj)
        with self._lock:
            current = self._objects.get(key)
            if current is None:
                raise NotFound(f"{obj.get('kind')} {key[3]!r} not found")
            _check_precondition(obj, current, key)
            return self._replace(key, current, obj)

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        key = _probe_key(api_version, kind, name, namespace)
        with self._lock:
            current = self._objects.get(key)
            if current is None:
                raise NotFound(f"{kind} {name!r} not found")
            _check_precondition(patch, current, key)
            if subresource == "status":
                patch = {"status": patch.get("status")} if "status" in patch else {}
            merged = merge_patch(current, patch)
            merged.setdefault("metadata", {})["resourceVersion"] = current["metadata"][
                "resourceVersion"
            ]
            return self._replace(key, current, self._own(merged))

    def apply(self, obj: Obj) -> Obj:
        return self._apply(self._own(obj), copy_out=True)

    def apply_version(self, obj: Obj) -> str:
        """:meth:`apply`, answering only the stored object's new ``resourceVersion``: for a
        writer that keeps its own copy (the simulator's pod records) and would throw away the
        copy :meth:`apply` returns."""
        return str(self._apply(self._own(obj), copy_out=False)["metadata"]["resourceVersion"])

    def _apply(self, obj: Obj, *, copy_out: bool) -> Obj:
        with self._lock:
            if obj.get("kind") not in CLUSTER_SCOPED:
                # as the API server defaults it on create: a re-apply names the same object
                obj.setdefault("metadata", {}).setdefault("namespace", "default")
            key = key_of(obj)
            current = self._objects.get(key)
            if current is None:
                return self._create(obj, copy_out=copy_out)  # obj is already this store's copy
            return self._replace(key, current, obj, copy_out=copy_out)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        key = _probe_key(api_version, kind, name, namespace)
        with self._lock:
            current = self._objects.get(key)
            if current is None:
                raise NotFound(f"{kind} {name!r} not found")
            if current["metadata"].get("finalizers"):
                if "deletionTimestamp" not in current["metadata"]:
                    marked = _clone(current)
                    marked["metadata"]["deletionTimestamp"] = self._clock()
                    self._write(key, marked, "MODIFIED")
                return
            self._remove(key, current)

    # -- internals -------------------------------------------------------------------------
    def _own(self, obj: Obj) -> Obj:
        """The store's copy of an object coming in: equal small maps deep inside share one
        object (see :class:`_SharedLeaves`)."""
        return cast(Obj, self._leaves.copy(obj))

    def _replace(self, key: Key, current: Obj, obj: Obj, *, copy_out: bool = True) -> Obj:
        if self._strategy is not None:
            obj = self._strategy(obj, current)
        meta = obj.setdefault("metadata", {})
        for kept in ("uid", "creationTimestamp", "deletionTimestamp"):
            if kept in current["metadata"]:
                meta[kept] = current["metadata"][kept]
        generation = int(current["metadata"].get("generation", 1))
        if obj.get("spec") != current.get("spec"):
            generation += 1
        meta["generation"] = generation
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self._remove(key, obj)
            return obj
        return self._write(key, obj, "MODIFIED", copy_out=copy_out)

    def _write(self, key: Key, obj: Obj, etype: EventType, *, copy_out: bool = True) -> Obj:
        """Store ``obj`` (this store's own copy). Without ``copy_out`` the stored object itself
        comes back: internal callers only read its ``resourceVersion``."""
        rv = self._next_rv()
        obj["metadata"]["resourceVersion"] = str(rv)
        old = self._objects.get(key)
        self._objects[key] = obj
        self._by_kind.setdefault(key[:2], {})[key] = obj
        self._record(rv, etype, key, obj, old)
        return _clone(obj) if copy_out else obj

    def _remove(self, key: Key, last: Obj) -> None:
        self._objects.pop(key, None)
        self._by_kind.get(key[:2], {}).pop(key, None)
        rv = self._next_rv()
        gone = dict(last)
        gone["metadata"] = {**last.get("metadata", {}), "resourceVersion": str(rv)}
        self._record(rv, "DELETED", key, gone, last)

    def _next_rv(self) -> int:
        rv = next(self._rv)
        self.resource_version = rv
        return rv

    def _record(self, rv: int, etype: EventType, key: Key, obj: Obj, old: Obj | None) -> None:
        self.revision += 1
        self.kind_revisions[key[:2]] = self.revision
        self._history.append((rv, etype, key, obj, old))
        for w in self._watchers:
            event = w.event_for(etype, key, obj, old)
            if event is not None:
                w.push(event)

    def _unwatch(self, w: MemoryWatch) -> None:
        with self._lock:
            if w in self._watchers:
                self._watchers.remove(w)


_T = TypeVar("_T")
_ATOMS = (str, int, float, bool, type(None))


def clone(obj: _T) -> _T:
    """A deep copy of a JSON-shaped object (API objects, templates): what :class:`MemoryStore`
    copies with, several times faster than :func:`copy.deepcopy` on such data."""
    return cast(_T, _copy(obj))


def _clone(obj: _T) -> _T:
    """A deep copy of a JSON-shaped object: dicts and lists are rebuilt, strings and numbers
    shared, anything else goes to :func:`copy.deepcopy`. Four times faster than deepcopy on
    API objects, which every read and write copies."""
    return cast(_T, _copy(obj))


def _copy(obj: Any) -> Any:
    t = type(obj)
    if t is dict:
        return {k: v if type(v) in _ATOMS else _copy(v) for k, v in obj.items()}
    if t is list:
        return [v if type(v) in _ATOMS else _copy(v) for v in obj]
    if t in _ATOMS:
        return obj
    return copy.deepcopy(obj)


class _SharedLeaves:
    """One object for equal small maps inside stored objects.

    A ResourceSlice of a dgx-h100 node holds some 150 maps like ``{"string": "NVIDIA H100 80GB
    HBM3"}`` or ``{"value": "80Gi"}``, equal on every node; the pods of one workload hold equal
    ``labels``, ``limits`` and conditions. Stored objects are never changed in place (every
    write stores a new object, every read returns a copy, :meth:`MemoryStore.list_shared`
    readers only read), so equal *leaf* maps (only strings, ints, bools, None as values) at depth
    two or more can be one object: a 100,000-GPU cluster's slices take a third of the memory.
    The root and its direct children (``metadata``, which the store itself fills in) are never
    shared. Maps with floats are left alone (``-0.0 == 0.0``); bools are told from ints by type.
    The table is bounded: when full it starts over (sharing then resumes for new objects)."""

    LIMIT = 1 << 16

    def __init__(self) -> None:
        self.table: dict[tuple[tuple[Any, ...], tuple[type, ...]], dict[str, Any]] = {}

    def copy(self, obj: Any, depth: int = 0) -> Any:
        t = type(obj)
        if t is dict:
            out = {k: v if type(v) in _ATOMS else self.copy(v, depth + 1) for k, v in obj.items()}
            if depth < 2 or not out:
                return out
            types = tuple(map(type, out.values()))
            if not _LEAF_ATOMS.issuperset(types):
                return out
            key = (tuple(out.items()), types)
            hit = self.table.get(key)
            if hit is not None:
                return hit
            if len(self.table) >= self.LIMIT:
                self.table = {}
            self.table[key] = out
            return out
        if t is list:
            return [v if type(v) in _ATOMS else self.copy(v, depth + 1) for v in obj]
        if t in _ATOMS:
            return obj
        return copy.deepcopy(obj)


_LEAF_ATOMS = frozenset((str, int, bool, type(None)))


def _probe_key(api_version: str, kind: str, name: str, namespace: str | None) -> Key:
    probe: Obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}
    if namespace is not None:
        probe["metadata"]["namespace"] = namespace
    return key_of(probe)


def _check_precondition(obj: Obj, current: Obj, key: Key) -> None:
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    if rv is not None and rv != current["metadata"]["resourceVersion"]:
        raise Conflict(
            f"{key[1]} {key[3]!r}: the object has been modified; "
            "please apply your changes to the latest version and try again"
        )


def _parse_rv(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        raise Gone(f"resource version {value!r} is not one this store handed out") from None


def list_read_only(store: object, api_version: str, kind: str) -> list[Obj]:
    """The objects of a kind for a caller that will not change them: a :class:`MemoryStore`'s
    own objects (:meth:`MemoryStore.list_shared`), copies from any other store."""
    if isinstance(store, MemoryStore):
        return store.list_shared(api_version, kind)
    return list(cast(Any, store).list(api_version, kind))
