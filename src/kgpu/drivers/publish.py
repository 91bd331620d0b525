"""Publishing a node's ResourceSlices through the object store, as the kubelet plugin helper of
Kubernetes does: the node owns one pool per driver; a change to its devices replaces every
slice of that pool with a new generation, so the scheduler never mixes old and new slices
(it ignores slices of older generations and treats the pool as incomplete until all
``resourceSliceCount`` slices of the newest one are present)."""

from __future__ import annotations

import contextlib
import copy
import itertools
from typing import Any

from kgpu.dra.api import RESOURCE_API
from kgpu.dra.slices import slice_name
from kgpu.store import NotFound, ObjectStore

Obj = dict[str, Any]


def _pool_slices(store: ObjectStore, driver: str, pool: str) -> list[Obj]:
    """The pool's slices as published by :func:`publish_slices` (named
    ``<node>-<driver>-<i>``, i = 0, 1, ...), found by name so that publishing on a cluster of
    thousands of nodes does not read every slice."""
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
    """What makes two slices the same for consumers: the spec without the pool generation."""
    spec = copy.deepcopy(slice_.get("spec") or {})
    (spec.get("pool") or {}).pop("generation", None)
    return (slice_.get("metadata") or {}).get("name"), spec


def publish_slices(store: ObjectStore, driver: str, node_name: str, slices: list[Obj]) -> int:
    """Make ``slices`` the node's pool for ``driver``; returns the pool generation now live.

    Slices are named ``<node>-<driver>-<i>`` whatever names they came with. Nothing is
    written when the published pool already has the same devices. Otherwise every
    slice gets generation ``current + 1``, new slices are written first and stale ones (of this
    driver and this pool only) deleted afterwards, so a reader never sees an empty pool.
    Slices of other drivers or other nodes are never touched.
    """
    existing = _pool_slices(store, driver, node_name)
    current = max((int(s["spec"]["pool"].get("generation", 0)) for s in existing), default=0)
    wanted = [copy.deepcopy(s) for s in slices]
    for i, s in enumerate(wanted):
        # the pool's slices are always named by slice_name(): that is how the next publish
        # finds them again, whoever built them
        s.setdefault("metadata", {})["name"] = slice_name(node_name, driver, i)
        s.setdefault("apiVersion", RESOURCE_API)
        s.setdefault("kind", "ResourceSlice")
        spec = s.setdefault("spec", {})
        spec["driver"] = driver
        spec.setdefault("nodeName", node_name)
        pool = spec.setdefault("pool", {})
        pool["name"] = node_name
        pool["resourceSliceCount"] = len(wanted)
    newest = [s for s in existing if int(s["spec"]["pool"].get("generation", 0)) == current]
    if (
        existing
        and len(newest) == len(existing)
        and sorted(map(_key, newest)) == sorted(map(_key, wanted))
    ):
        return current
    generation = current + 1
    names = set()
    for s in wanted:
        s["spec"]["pool"]["generation"] = generation
        names.add(s["metadata"]["name"])
        s["metadata"].pop("resourceVersion", None)
        store.apply(s)
    for s in existing:
        name = s["metadata"]["name"]
        if name not in names:
            with contextlib.suppress(NotFound):
                store.delete(RESOURCE_API, "ResourceSlice", name)
    return generation


def _key(slice_: Obj) -> str:
    import json

    return json.dumps(_content(slice_), sort_keys=True)


def unpublish_slices(store: ObjectStore, driver: str, node_name: str) -> None:
    """Remove the node's pool for ``driver`` (the node or the driver went away)."""
    for s in _pool_slices(store, driver, node_name):
        with contextlib.suppress(NotFound):
            store.delete(RESOURCE_API, "ResourceSlice", s["metadata"]["name"])
