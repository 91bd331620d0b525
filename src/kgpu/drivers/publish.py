"""Publishing a node's ResourceSlices through the object store, as the kubelet plugin helper of
Kubernetes does: the node owns one pool per driver; a change to its devices replaces every
slice of that pool with a new generation, so the scheduler never mixes old and new slices
(it ignores slices of older generations and treats the pool as incomplete until all
``resourceSliceCount`` slices of the newest one are present).

Each slice names its Node as owner (``ownerReferences``, controller), as the kubelet plugin
helper does, so that Kubernetes' garbage collector removes the slices of a deleted Node.
:class:`SlicePublisher` keeps the pools published: with a caching store it watches the node's
slices (one informer, field selector ``spec.nodeName``) and publishes a pool again when another
client deleted one of its slices.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

from kgpu.dra.api import RESOURCE_API
from kgpu.dra.gated_fields import drop_slice_fields
from kgpu.dra.slices import slice_name
from kgpu.store import CachedStore, Informer, NotFound, ObjectStore, StoreError

Obj = dict[str, Any]
log = logging.getLogger(__name__)


def _pool_slices(store: ObjectStore, driver: str, pool: str) -> list[Obj]:
    """The pool's slices as published by :func:`publish_slices` (named
    ``<node>-<driver>-<i>``, i = 0, 1, ...): from the informer's cache when one holds the
    node's slices, else found by name so that publishing on a cluster of thousands of nodes
    does not read every slice."""
    selector = {"spec.nodeName": pool, "spec.driver": driver}
    cache = (
        store.informers.covering(RESOURCE_API, "ResourceSlice", fields=selector)
        if isinstance(store, CachedStore)
        else None
    )
    if cache is not None:
        cached = store.list(RESOURCE_API, "ResourceSlice", fields=selector)
        return [s for s in cached if (s["spec"].get("pool") or {}).get("name") == pool]
    found: list[Obj] = []
    for i in itertools.count():
        try:
            s = store.get(RESOURCE_API, "ResourceSlice", slice_name(pool, driver, i))
        except NotFound:
            return found
        spec = s.get("spec") or {}
        if spec.get("driver") == driver and (spec.get("pool") or {}).get("name") == pool:
            found.append(s)
    return found  # pragma: no cover - itertools.count() never ends


def _content(slice_: Obj) -> Any:
    """What makes two slices the same: name, owner and the spec without the pool generation."""
    spec = copy.deepcopy(slice_.get("spec") or {})
    (spec.get("pool") or {}).pop("generation", None)
    meta = slice_.get("metadata") or {}
    return meta.get("name"), meta.get("ownerReferences"), spec


def node_owner(store: ObjectStore, node_name: str) -> list[Obj] | None:
    """The ownerReferences naming the Node (its uid read through the store), or None when
    the Node cannot be read (the slices are then published without an owner)."""
    try:
        node = store.get("v1", "Node", node_name)
    except StoreError as exc:
        if not isinstance(exc, NotFound):
            log.warning("node %s: cannot read its uid for the slices' owner: %s", node_name, exc)
        return None
    uid = (node.get("metadata") or {}).get("uid")
    if not uid:
        return None
    return [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": uid, "controller": True}]


_LOOKUP: Any = object()


@dataclass
class ServerForm:
    """What the API server is known to drop from the slices it stores, learned from its
    answers: ``gated`` when it dropped ``DRAConsumableCapacity``'s fields (a 1.34-1.35 server
    without the gate, :mod:`kgpu.dra.gated_fields`). A pool stored without them is then the
    same pool, and is not written again on every publication; a restarted agent (after the
    gate was turned on) writes once and learns again."""

    gated: bool = False


def publish_slices(
    store: ObjectStore,
    driver: str,
    node_name: str,
    slices: list[Obj],
    owner: list[Obj] | None = _LOOKUP,
    server: ServerForm | None = None,
) -> int:
    """Make ``slices`` the node's pool for ``driver``; returns the pool generation now live.

    Slices are named ``<node>-<driver>-<i>`` whatever names they came with, and owned by
    ``owner`` (default: the Node, looked up through the store). Nothing is
    written when the published pool already has the same devices (as the server stores them,
    ``server``: what it is known to drop, learned here from its answers). Otherwise every
    slice gets generation ``current + 1``, new slices are written first and stale ones (of this
    driver and this pool only) deleted afterwards, so a reader never sees an empty pool.
    Slices of other drivers or other nodes are never touched.
    """
    existing = _pool_slices(store, driver, node_name)
    if owner is _LOOKUP:
        owner = node_owner(store, node_name)
    current = max((int(s["spec"]["pool"].get("generation", 0)) for s in existing), default=0)
    wanted = [copy.deepcopy(s) for s in slices]
    for i, s in enumerate(wanted):
        # the pool's slices are always named by slice_name(): that is how the next publish
        # finds them again, whoever built them
        s.setdefault("metadata", {})["name"] = slice_name(node_name, driver, i)
        if owner is not None:
            s["metadata"]["ownerReferences"] = owner
        s.setdefault("apiVersion", RESOURCE_API)
        s.setdefault("kind", "ResourceSlice")
        spec = s.setdefault("spec", {})
        spec["driver"] = driver
        spec.setdefault("nodeName", node_name)
        pool = spec.setdefault("pool", {})
        pool["name"] = node_name
        pool["resourceSliceCount"] = len(wanted)
    newest = [s for s in existing if int(s["spec"]["pool"].get("generation", 0)) == current]
    if existing and len(newest) == len(existing):
        have = sorted(map(_key, newest))
        if have == sorted(map(_key, wanted)) or (
            server is not None
            and server.gated
            and have == sorted(_key(drop_slice_fields(s)) for s in wanted)
        ):
            return current
    generation = current + 1
    names = set()
    for s in wanted:
        s["spec"]["pool"]["generation"] = generation
        names.add(s["metadata"]["name"])
        s["metadata"].pop("resourceVersion", None)
        stored = store.apply(s)
        if server is not None and not server.gated and _key(stored) != _key(s):
            server.gated = _key(stored) == _key(drop_slice_fields(s))
    for s in existing:
        name = s["metadata"]["name"]
        if name not in names:
            with contextlib.suppress(NotFound):
                store.delete(RESOURCE_API, "ResourceSlice", name)
    return generation


def _key(slice_: Obj) -> str:
    return json.dumps(_content(slice_), sort_keys=True)


def unpublish_slices(store: ObjectStore, driver: str, node_name: str) -> None:
    """Remove the node's pool for ``driver`` (the node or the driver went away)."""
    for s in _pool_slices(store, driver, node_name):
        with contextlib.suppress(NotFound):
            store.delete(RESOURCE_API, "ResourceSlice", s["metadata"]["name"])


class SlicePublisher:
    """The node's pools, kept published. :meth:`publish` remembers what each driver publishes;
    with a :class:`~kgpu.store.CachedStore` an informer on the node's slices (field selector
    ``spec.nodeName``, so the node never reads other nodes' slices) serves the reads, and a
    slice of ours deleted by another client is published again."""

    def __init__(self, store: ObjectStore, node_name: str) -> None:
        self.store = store
        self.node_name = node_name
        self._wanted: dict[str, list[Obj]] = {}
        self._owner: list[Obj] | None = None  # the Node's uid, read once
        self._server = ServerForm()  # what the API server drops from slices
        self._lock = threading.RLock()
        self._informer: Informer | None = None
        self._unsubscribe: Any = None
        if isinstance(store, CachedStore):
            self._informer = store.informers.acquire(
                RESOURCE_API, "ResourceSlice", fields={"spec.nodeName": node_name}
            )
            self._unsubscribe = self._informer.add_handler(on_delete=self._deleted)

    def publish(self, driver: str, slices: list[Obj]) -> int:
        with self._lock:
            self._wanted[driver] = copy.deepcopy(slices)
            if self._owner is None:
                self._owner = node_owner(self.store, self.node_name)
            return publish_slices(
                self.store, driver, self.node_name, slices, self._owner, self._server
            )

    def unpublish(self, driver: str) -> None:
        with self._lock:
            self._wanted.pop(driver, None)
            unpublish_slices(self.store, driver, self.node_name)

    def _deleted(self, obj: Obj) -> None:
        driver = str((obj.get("spec") or {}).get("driver", ""))
        with self._lock:
            wanted = self._wanted.get(driver)
            if wanted is None:
                return
            try:
                # a Node deleted and created again has a new uid: read it again
                self._owner = node_owner(self.store, self.node_name)
                publish_slices(
                    self.store, driver, self.node_name, wanted, self._owner, self._server
                )
            except StoreError as exc:  # the next deletion or view change tries again
                log.warning("%s: cannot publish the slices again: %s", driver, exc)

    def close(self) -> None:
        if self._informer is not None and isinstance(self.store, CachedStore):
            self._unsubscribe()
            self.store.informers.release(self._informer)
            self._informer = None
