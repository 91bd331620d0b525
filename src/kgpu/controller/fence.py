"""A store that refuses writes unless this replica leads.

Why: leadership can end between a worker's read and its write (the Lease could not be renewed
for the renew deadline, or another replica took it). Stopping the workers is not enough on its
own: one may be in the middle of a sync. Every write of the controller goes through
:class:`FencedStore`, which asks the elector right before each request, so a replica that is
not the leader sends no write at all: it fails with :class:`NotLeader` instead, and the sync
is dropped (the new leader redoes it from its own view).
"""

from __future__ import annotations

from collections.abc import Callable

from kgpu.store import ForwardingStore, ObjectStore, StoreError
from kgpu.store.objects import Obj


class NotLeader(StoreError):
    """A write refused because this replica does not hold the leader Lease."""

    reason = "NotLeader"
    code = 0


class FencedStore(ForwardingStore):
    """Reads and watches pass through; writes need ``is_leader()`` to be true."""

    def __init__(self, store: ObjectStore, is_leader: Callable[[], bool]) -> None:
        super().__init__(store)
        self._is_leader = is_leader
        self.refused = 0  # writes refused (a test and the bench read it)

    def _check(self, what: str) -> None:
        if not self._is_leader():
            self.refused += 1
            raise NotLeader(f"{what}: not the leader, write refused")

    def create(self, obj: Obj) -> Obj:
        self._check(f"create {obj.get('kind')}")
        return super().create(obj)

    def update(self, obj: Obj) -> Obj:
        self._check(f"update {obj.get('kind')}")
        return super().update(obj)

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        self._check(f"patch {kind} {name}")
        return super().patch(api_version, kind, name, patch, namespace, subresource)

    def apply(self, obj: Obj) -> Obj:
        self._check(f"apply {obj.get('kind')}")
        return super().apply(obj)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        self._check(f"delete {kind} {name}")
        super().delete(api_version, kind, name, namespace)
