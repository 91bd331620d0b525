"""A store that hands every request to another store: the base of the stores that wrap one.

Why: several stores sit in front of a real one and change only a part of the protocol (the
:class:`~kgpu.store.CachedStore` answers reads from informers, the controller's fenced store
checks leadership before each write). Each used to repeat all nine protocol methods just to
pass the untouched ones through; subclassing :class:`ForwardingStore` they override only what
they change, and a method added to the protocol reaches every wrapper at once.
"""

from __future__ import annotations

from collections.abc import Mapping

from kgpu.store.objects import Obj
from kgpu.store.protocol import ObjectList, ObjectStore, Watch


class ForwardingStore:
    """An :class:`~kgpu.store.ObjectStore` passing every call to ``store`` unchanged."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    # -- reads -------------------------------------------------------------------------------
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        return self.store.get(api_version, kind, name, namespace)

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> ObjectList:
        return self.store.list(api_version, kind, namespace, labels, fields)

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
        return self.store.watch(
            api_version, kind, namespace, labels, fields, resource_version, bookmarks
        )

    # -- writes ------------------------------------------------------------------------------
    def create(self, obj: Obj) -> Obj:
        return self.store.create(obj)

    def update(self, obj: Obj) -> Obj:
        return self.store.update(obj)

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        return self.store.patch(api_version, kind, name, patch, namespace, subresource)

    def apply(self, obj: Obj) -> Obj:
        return self.store.apply(obj)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        self.store.delete(api_version, kind, name, namespace)
