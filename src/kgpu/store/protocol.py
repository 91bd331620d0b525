"""The object-store protocol: the part of the Kubernetes API kgpu's components use.

Core code (the allocator, ComputeDomain reconcile, slice publishing) talks to this protocol
only, so the same decisions run against the in-memory store of the simulator and the tests
(:mod:`kgpu.store.memory`) and against a real API server (:mod:`kgpu.cluster.kube`). The
semantics are the API server's: every write bumps ``resourceVersion``, a stale one conflicts,
``list`` reports the collection's ``resourceVersion`` and ``watch`` continues from it, and a
watch that starts from a version the server no longer remembers fails with :class:`Gone` so
the caller lists again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from kgpu.store.objects import Obj

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


class StoreError(Exception):
    """Base for object-store errors; ``reason`` and ``code`` mirror the API server's Status."""

    reason = "InternalError"
    code = 500


class NotFound(StoreError):
    reason = "NotFound"
    code = 404


class AlreadyExists(StoreError):
    reason = "AlreadyExists"
    code = 409


class Conflict(StoreError):
    reason = "Conflict"
    code = 409


class Gone(StoreError):
    """The requested ``resourceVersion`` is older than what the server remembers (HTTP 410,
    reason ``Expired``): list again and watch from the new version."""

    reason = "Expired"
    code = 410


class Invalid(StoreError):
    """The object fails the server's validation (HTTP 422)."""

    reason = "Invalid"
    code = 422


class ObjectList(list[Obj]):
    """The items of a list call together with the collection's ``resourceVersion``: a watch
    started from it misses no change and repeats none."""

    def __init__(self, items: list[Obj] | None = None, resource_version: str = "") -> None:
        super().__init__(items or [])
        self.resource_version = resource_version


@dataclass(frozen=True)
class WatchEvent:
    """One change as the API server streams it. A ``BOOKMARK`` carries only
    ``metadata.resourceVersion``: the point a re-started watch may continue from."""

    type: EventType
    object: Obj

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion", ""))


class Watch(Protocol):
    """An open watch. Iterating blocks for the next event and ends when the watch is stopped
    or the server closes the stream (the caller then watches again from the last version)."""

    def __iter__(self) -> Iterator[WatchEvent]: ...

    def next(self, timeout: float | None = None) -> WatchEvent | None:
        """The next event, or None when ``timeout`` seconds pass without one or the stream
        has ended (see :attr:`closed`)."""
        ...

    @property
    def closed(self) -> bool: ...

    def stop(self) -> None: ...


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
        fields: Mapping[str, str] | None = None,
    ) -> ObjectList:
        """Objects of a kind, optionally in one namespace, matching all ``labels`` and
        ``fields`` (equality selectors), with the collection's ``resourceVersion``."""
        ...

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        resource_version: str | None = None,
        bookmarks: bool = False,
    ) -> Watch:
        """Changes to matching objects after ``resource_version`` (from :meth:`list`); with
        ``None``, the current objects first as ``ADDED`` events. :class:`Gone` when the version
        is too old to continue from."""
        ...

    def create(self, obj: Obj) -> Obj:
        """Store a new object; :class:`AlreadyExists` if its name is taken."""
        ...

    def update(self, obj: Obj) -> Obj:
        """Replace an object; :class:`Conflict` when its ``resourceVersion`` is stale."""
        ...

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        """JSON merge patch (RFC 7386) of one object, or of its ``status`` subresource; a
        ``metadata.resourceVersion`` in the patch is a precondition (:class:`Conflict`)."""
        ...

    def apply(self, obj: Obj) -> Obj:
        """Create or replace, ignoring ``resourceVersion`` (server-side apply, simplified)."""
        ...

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        """Delete, or mark for deletion while finalizers remain; :class:`NotFound` if absent."""
        ...
