"""The Kubernetes API as kgpu's controllers and agents see it: an object store.

Objects are plain JSON-shaped dicts in their real wire form (``apiVersion``, ``kind``,
``metadata``, ``spec``, ``status``), so what kgpu writes can be validated against the official
OpenAPI schemas and sent unchanged to a real API server. :class:`MemoryStore` is the in-process
implementation the simulator and the tests use; it follows the API server's rules that matter to
controllers: ``resourceVersion`` bumps on every write, updates with a stale ``resourceVersion``
conflict, ``generateName`` gets a random-looking suffix, and deleting an object that still has
finalizers only sets ``metadata.deletionTimestamp`` until the last finalizer is removed.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

Obj = dict[str, Any]

#: Kinds that are cluster-scoped (no namespace). Everything else defaults to "default".
CLUSTER_SCOPED = frozenset(
    {
        "Node",
        "Namespace",
        "ResourceSlice",
        "DeviceClass",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "PersistentVolume",
        "StorageClass",
        "PriorityClass",
    }
)


class StoreError(Exception):
    """Base for object-store errors; ``reason`` mirrors the API server's Status reason."""

    reason = "InternalError"


class NotFound(StoreError):
    reason = "NotFound"


class AlreadyExists(StoreError):
    reason = "AlreadyExists"


class Conflict(StoreError):
    reason = "Conflict"


def group_of(api_version: str) -> str:
    """``resource.k8s.io/v1`` -> ``resource.k8s.io``; ``v1`` -> ``""`` (the core group)."""
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def namespace_of(obj: Mapping[str, Any]) -> str:
    if obj.get("kind") in CLUSTER_SCOPED:
        return ""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default")


def object_ref(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of a namespaced object (``default`` when unset), as events and
    ``kubectl`` name it."""
    meta = obj.get("metadata") or {}
    return f"{namespace_of(obj)}/{meta.get('name', '')}"


def key_of(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """Identity of an object: (group, kind, namespace, name). Versions of one group share it."""
    meta = obj.get("metadata") or {}
    return (
        group_of(str(obj.get("apiVersion", ""))),
        str(obj.get("kind", "")),
        namespace_of(obj),
        str(meta.get("name", "")),
    )


def matches_labels(obj: Mapping[str, Any], selector: Mapping[str, str] | None) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


class ObjectStore(Protocol):
    """The subset of the Kubernetes API kgpu's controllers and agents use."""

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        """The object, or :class:`NotFound`."""
        ...

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        """Objects of a kind, optionally in one namespace and matching all ``labels``."""
        ...

    def create(self, obj: Obj) -> Obj:
        """Store a new object; :class:`AlreadyExists` if its name is taken."""
        ...

    def update(self, obj: Obj) -> Obj:
        """Replace an object; :class:`Conflict` when its ``resourceVersion`` is stale."""
        ...

    def apply(self, obj: Obj) -> Obj:
        """Create or replace, ignoring ``resourceVersion`` (server-side apply, simplified)."""
        ...

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete, or mark for deletion while finalizers remain; :class:`NotFound` if absent."""
        ...


class MemoryStore:
    """An in-memory :class:`ObjectStore` that behaves like the API server where controllers can
    tell (resource versions, conflicts, finalizers, generateName, uid). Thread-safe.

    ``clock`` supplies ``creationTimestamp``/``deletionTimestamp`` values so the simulator's
    clock, not the wall clock, shows in objects.
    """

    def __init__(self, clock: Callable[[], str] | None = None) -> None:
        self._objects: dict[tuple[str, str, str, str], Obj] = {}
        self._lock = threading.RLock()
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)
        self._clock = clock or (lambda: "1970-01-01T00:00:00Z")
        self.revision = 0  # bumps on every write; lets callers notice change cheaply
        # (group, kind) -> revision of the last write to an object of that kind, so a cache of
        # one kind (ResourceSlices in the DRA scheduler) survives writes to other kinds.
        self.kind_revisions: dict[tuple[str, str], int] = {}

    # -- reads -----------------------------------------------------------------------------
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        probe: Obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}
        if namespace is not None:
            probe["metadata"]["namespace"] = namespace
        with self._lock:
            obj = self._objects.get(key_of(probe))
            if obj is None:
                raise NotFound(f"{kind} {name!r} not found")
            return copy.deepcopy(obj)

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[Obj]:
        group = group_of(api_version)
        with self._lock:
            chosen = [
                (key, obj)
                for key, obj in self._objects.items()
                if key[0] == group
                and key[1] == kind
                and (namespace is None or key[2] == namespace)
                and matches_labels(obj, labels)
            ]
            # filter first, then sort only what is returned (the order callers see is unchanged)
            return [copy.deepcopy(obj) for _, obj in sorted(chosen, key=lambda item: item[0])]

    def kind_revision(self, api_version: str, kind: str) -> int:
        """The store revision of the last create/update/delete of an object of this kind (0
        if none yet): equal values mean no object of the kind changed in between."""
        return self.kind_revisions.get((group_of(api_version), kind), 0)

    def all(self) -> Iterable[Obj]:
        with self._lock:
            return [copy.deepcopy(obj) for _, obj in sorted(self._objects.items())]

    # -- writes ----------------------------------------------------------------------------
    def create(self, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
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
            return self._write(key, obj)

    def update(self, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        key = key_of(obj)
        with self._lock:
            current = self._objects.get(key)
            if current is None:
                raise NotFound(f"{obj.get('kind')} {key[3]!r} not found")
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv is not None and rv != current["metadata"]["resourceVersion"]:
                raise Conflict(
                    f"{obj.get('kind')} {key[3]!r}: the object has been modified; "
                    "please apply your changes to the latest version and try again"
                )
            return self._replace(key, current, obj)

    def apply(self, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        with self._lock:
            key = key_of(obj)
            current = self._objects.get(key)
            if current is None:
                return self.create(obj)
            return self._replace(key, current, obj)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        probe: Obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}
        if namespace is not None:
            probe["metadata"]["namespace"] = namespace
        key = key_of(probe)
        with self._lock:
            current = self._objects.get(key)
            if current is None:
                raise NotFound(f"{kind} {name!r} not found")
            if current["metadata"].get("finalizers"):
                if "deletionTimestamp" not in current["metadata"]:
                    marked = copy.deepcopy(current)
                    marked["metadata"]["deletionTimestamp"] = self._clock()
                    self._write(key, marked)
                return
            del self._objects[key]
            self.revision += 1
            self.kind_revisions[key[:2]] = self.revision

    # -- internals -------------------------------------------------------------------------
    def _replace(self, key: tuple[str, str, str, str], current: Obj, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        for kept in ("uid", "creationTimestamp", "deletionTimestamp"):
            if kept in current["metadata"]:
                meta[kept] = current["metadata"][kept]
        generation = int(current["metadata"].get("generation", 1))
        if obj.get("spec") != current.get("spec"):
            generation += 1
        meta["generation"] = generation
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            del self._objects[key]
            self.revision += 1
            self.kind_revisions[key[:2]] = self.revision
            return obj
        return self._write(key, obj)

    def _write(self, key: tuple[str, str, str, str], obj: Obj) -> Obj:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self._objects[key] = obj
        self.revision += 1
        self.kind_revisions[key[:2]] = self.revision
        return copy.deepcopy(obj)
