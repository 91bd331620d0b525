"""What the simulated autoscaling controllers (the HPA controller, KEDA's operator) share: they
keep each object of their kind parsed, by uid, and reparse it only when its spec changed; a
spec that does not parse is reported once, not every round; their status is written only when
it changed, without journaling the write as someone else's.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from kgpu.sim.context import SimContext
from kgpu.sim.controllers.base import meta_of
from kgpu.store import NotFound

Obj = dict[str, Any]


class Parsed(Protocol):
    """What a controller keeps of one object: at least the spec it parsed."""

    raw_spec: Obj


def changed_specs(
    objects: Iterable[Obj], known: Mapping[str, Parsed], live: set[str]
) -> Iterator[tuple[str, Obj, Obj]]:
    """``(uid, object, spec)`` of each object not being deleted whose spec is not the one
    ``known`` holds for its uid; every such object's uid is added to ``live`` (a uid of
    ``known`` left out of it is gone)."""
    for obj in objects:
        meta = meta_of(obj)
        if meta.get("deletionTimestamp"):
            continue
        uid = str(meta["uid"])
        live.add(uid)
        entry = known.get(uid)
        spec = obj.get("spec") or {}
        if entry is not None and entry.raw_spec == spec:
            continue
        yield uid, obj, spec


def first_report(reported: dict[str, Obj], uid: str, spec: Obj) -> bool:
    """Whether this bad ``spec`` is news (and from now on not): a spec is reported once."""
    if reported.get(uid) == spec:
        return False
    reported[uid] = copy.deepcopy(spec)
    return True


def write_status(
    ctx: SimContext,
    api_version: str,
    kind: str,
    name: str,
    namespace: str,
    status: Mapping[str, Any],
) -> None:
    """Replace the object's status when it differs (an object gone meanwhile is skipped)."""
    store = ctx.store
    with store.muted():
        try:
            obj = store.get(api_version, kind, name, namespace)
        except NotFound:
            return
        if obj.get("status") == status:
            return
        obj["status"] = dict(status)
        meta_of(obj).pop("resourceVersion", None)
        store.update(obj)
