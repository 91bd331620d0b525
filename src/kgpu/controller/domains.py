"""ComputeDomains driven by events: which keys an informer event queues, and what syncing one
key does.

Keys are ``("domain", namespace, name)`` for a ComputeDomain and ``("orphan", uid)`` for the
objects and node labels of a domain that no longer exists. Syncing a domain runs
:func:`kgpu.computedomain.reconcile.sync_domain` against the informers' indexes
(:class:`~kgpu.controller.index.ClusterIndex`), so a domain costs what it owns; nothing runs on
a timer. What a sync reports as events becomes Kubernetes Events on the ComputeDomain
(``kubectl describe computedomain``).

The informers can lag behind the controller's own writes; a sync that wrote the ComputeDomain
(finalizer, status) keeps the written copy and the next sync of that key reads it instead of an
older cached one (client-go's mutation cache), so the same status is not written twice and
events are not repeated.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kgpu.computedomain.api import API_VERSION, KIND
from kgpu.computedomain.objects import DAEMON_IMAGE
from kgpu.computedomain.reconcile import DomainEvent, remove_owned, sync_domain
from kgpu.controller.index import ClusterIndex, Touched
from kgpu.store import ObjectStore

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, ...]
COMPONENT = "kgpu-controller"


def _rv(obj: Mapping[str, Any] | None) -> int:
    value = str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
    return int(value) if value.isdigit() else -1


class DomainController:
    """Routes events to keys and syncs them; ``store`` is the (fenced) store writes go to."""

    def __init__(
        self,
        store: ObjectStore,
        index: ClusterIndex,
        namespace: str,
        *,
        identity: str = COMPONENT,
        record_events: bool = True,
        daemon_image: str = DAEMON_IMAGE,
    ) -> None:
        self.store = store
        self.daemon_image = daemon_image
        self.index = index
        self.namespace = namespace
        self.identity = identity
        self.record_events = record_events
        self._lock = threading.Lock()
        self._written: dict[tuple[str, str], Obj] = {}
        self._waiting: set[str] = set()  # uids whose pods wait for room
        self.syncs = 0
        self.events: list[DomainEvent] = []  # recent events, for tests and logs
        self._events_kept = 1000

    # -- routing -----------------------------------------------------------------------------
    def keys(self, touched: Touched) -> list[Key]:
        """The keys an event concerns."""
        out: list[Key] = [("domain", ns, name) for ns, name in sorted(touched.domains)]
        uids = set(touched.uids)
        if touched.room:
            with self._lock:
                uids |= self._waiting
        for uid in sorted(uids):
            found = self.index.domain_key(uid)
            key: Key = ("domain", *found) if found is not None else ("orphan", uid)
            if key not in out:
                out.append(key)
        return out

    def all_keys(self) -> list[Key]:
        """Every domain and every orphan: what a new leader syncs first."""
        keys: list[Key] = []
        live = set()
        for raw in self.index.domains():
            meta = raw.get("metadata") or {}
            keys.append(("domain", str(meta.get("namespace") or "default"), str(meta["name"])))
            live.add(str(meta.get("uid") or ""))
        keys += [("orphan", uid) for uid in sorted(self.index.owner_uids() - live)]
        return keys

    # -- syncing -----------------------------------------------------------------------------
    def sync(self, key: Key) -> None:
        """Sync one key; raises the store's errors (the caller retries with backoff)."""
        self.syncs += 1
        if key[0] == "domain":
            self._sync_domain(key[1], key[2])
        elif key[0] == "orphan":
            uid = key[1]
            if self.index.domain_key(uid) is None:
                removed = remove_owned(self.store, uid, self.index, self.namespace)
                if removed:
                    log.info("removed %d object(s) of deleted ComputeDomain %s", removed, uid)

    def _latest(self, namespace: str, name: str) -> Obj | None:
        cached = self.index.domain(namespace, name)
        with self._lock:
            written = self._written.get((namespace, name))
            if cached is None:
                self._written.pop((namespace, name), None)
                return None
            if written is not None and _rv(written) > _rv(cached):
                return written
            self._written.pop((namespace, name), None)
        return cached

    def _sync_domain(self, namespace: str, name: str) -> None:
        raw = self._latest(namespace, name)
        if raw is None:
            return  # deleted: what it owned goes by its orphan key
        uid = str((raw.get("metadata") or {}).get("uid") or "")
        result = sync_domain(self.store, raw, self.index, self.namespace, self.daemon_image)
        with self._lock:
            if result.domain is not None:
                self._written[(namespace, name)] = result.domain
            if result.waiting:
                self._waiting.add(uid)
            else:
                self._waiting.discard(uid)
        # one Kubernetes Event per reason and sync ("created 3 objects" is one event, not 3)
        merged: dict[tuple[str, str], list[DomainEvent]] = {}
        for event in result.events:
            merged.setdefault((event.type, event.reason), []).append(event)
        for group in merged.values():
            first = group[0]
            message = "; ".join(e.message for e in group)
            self._record(DomainEvent(first.type, first.reason, first.object, message), raw)

    # -- events ------------------------------------------------------------------------------
    def _record(self, event: DomainEvent, domain: Obj) -> None:
        log.log(
            logging.WARNING if event.type == "Warning" else logging.INFO,
            "%s %s: %s",
            event.object,
            event.reason,
            event.message,
        )
        with self._lock:
            self.events.append(event)
            del self.events[: -self._events_kept]
        if not self.record_events:
            return
        meta = domain.get("metadata") or {}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:
            self.store.create(
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {
                        "generateName": f"{meta.get('name')}.",
                        "namespace": meta.get("namespace") or "default",
                    },
                    "involvedObject": {
                        "apiVersion": API_VERSION,
                        "kind": KIND,
                        "name": meta.get("name"),
                        "namespace": meta.get("namespace") or "default",
                        "uid": meta.get("uid"),
                    },
                    "reason": event.reason,
                    "message": event.message[:1024],
                    "type": event.type,
                    "source": {"component": COMPONENT},
                    "reportingComponent": COMPONENT,
                    "reportingInstance": self.identity,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                }
            )
        except Exception as exc:  # an event that cannot be written never fails the sync
            log.info("cannot record event %s on %s: %s", event.reason, event.object, exc)
