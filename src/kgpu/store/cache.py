"""Shared informers, and an object store whose reads come from them.

Why shared: two components that need the same objects (the ComputeDomain driver and, later,
the agent's own-Node watch) must not open two watches for them; like client-go's
SharedInformerFactory, :class:`SharedInformers` hands out one informer per scope and counts
its users, stopping it when the last one lets go.

Why a caching store: components keep calling ``store.get``/``store.list`` as before; a
:class:`CachedStore` answers from a synced informer whose scope covers the request and goes to
the server only when none does. So a component opts in by starting an informer, and code that
runs on the plain in-memory store (the simulator) needs no second path. Cached reads are, as
client-go's listers, as fresh as the last watch event: code that must not act on a stale copy
writes with a ``resourceVersion`` precondition or a patch of only the fields it owns.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from kgpu.store.forwarding import ForwardingStore
from kgpu.store.informer import Backoff, Informer, Scope
from kgpu.store.objects import Obj
from kgpu.store.protocol import NotFound, ObjectList, ObjectStore


class SharedInformers:
    """One informer per :class:`Scope` over one store, reference counted.

    ``threaded`` (the default) runs each informer in its own thread; without it the owner
    steps them all with :meth:`sync` (a simulator that keeps one clock).
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        threaded: bool = True,
        backoff: Backoff | None = None,
        sync_timeout_s: float = 30.0,
    ) -> None:
        self.store = store
        self.threaded = threaded
        self.backoff = backoff
        self.sync_timeout_s = sync_timeout_s
        self._lock = threading.Lock()
        self._informers: dict[Scope, Informer] = {}
        self._users: dict[Scope, int] = {}

    def acquire(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        *,
        wait: bool = True,
    ) -> Informer:
        """The (started) informer of this scope; with ``wait``, after its first list has
        arrived or ``sync_timeout_s`` passed (reads then go to the server until it has).
        Pair every call with :meth:`release`."""
        scope = Scope.of(api_version, kind, namespace, labels, fields)
        with self._lock:
            informer = self._informers.get(scope)
            if informer is None:
                informer = Informer(self.store, scope, backoff=self.backoff)
                self._informers[scope] = informer
                if self.threaded:
                    informer.start()
            self._users[scope] = self._users.get(scope, 0) + 1
        if not self.threaded and not informer.synced:
            informer.sync()
        elif wait:
            informer.wait_synced(self.sync_timeout_s)
        return informer

    def release(self, informer: Informer) -> None:
        """One user fewer; the last one's release stops the informer."""
        with self._lock:
            left = self._users.get(informer.scope, 0) - 1
            if left > 0:
                self._users[informer.scope] = left
                return
            self._users.pop(informer.scope, None)
            if self._informers.get(informer.scope) is informer:
                del self._informers[informer.scope]
        informer.stop()

    def informers(self) -> list[Informer]:
        with self._lock:
            return list(self._informers.values())

    def covering(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> Informer | None:
        """A synced informer holding every object such a list returns, or None."""
        for informer in self.informers():
            s = informer.scope
            if (
                s.api_version == api_version
                and s.kind == kind
                and informer.synced
                and s.covers(namespace, labels, fields)
            ):
                return informer
        return None

    def sync(self) -> int:
        """Step every informer once without waiting (for ``threaded=False``); events applied."""
        return sum(informer.sync() for informer in self.informers())

    def stop(self) -> None:
        with self._lock:
            informers = list(self._informers.values())
            self._informers.clear()
            self._users.clear()
        for informer in informers:
            informer.stop()


class CachedStore(ForwardingStore):
    """An :class:`~kgpu.store.ObjectStore` that reads from :class:`SharedInformers` where one
    covers the read, and from ``store`` otherwise; writes and watches go to ``store``."""

    def __init__(self, store: ObjectStore, informers: SharedInformers | None = None) -> None:
        super().__init__(store)
        self.informers = informers if informers is not None else SharedInformers(store)

    # -- reads -------------------------------------------------------------------------------
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        for informer in self.informers.informers():
            s = informer.scope
            if s.api_version != api_version or s.kind != kind or not informer.synced:
                continue
            if s.namespace is not None and s.namespace != (namespace or "default"):
                continue
            obj = informer.get(name, namespace)
            if obj is not None:
                return obj
            if not s.labels and s.fields in ((), (("metadata.name", name),)):
                # the informer holds every object this name could be: it does not exist
                raise NotFound(f"{kind} {name!r} not found")
        return self.store.get(api_version, kind, name, namespace)

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> ObjectList:
        informer = self.informers.covering(api_version, kind, namespace, labels, fields)
        if informer is None:
            return self.store.list(api_version, kind, namespace, labels, fields)
        return ObjectList(informer.list(namespace, labels, fields), informer.resource_version)

    # -- lifecycle ---------------------------------------------------------------------------
    def stop_informers(self) -> None:
        self.informers.stop()

    def close(self) -> None:
        """Stop the informers and close the underlying store (if it can be closed)."""
        self.stop_informers()
        close: Any = getattr(self.store, "close", None)
        if close is not None:
            close()
