"""The simulator's object store: a MemoryStore that remembers what others wrote.

Plugins and controllers write to the store (a ComputeDomain controller labels nodes and creates
DaemonSets, a DRA plugin writes claims); the simulator must notice those writes without listing
(and deep-copying) ten thousand pods after every controller pass. Every write made outside
:meth:`SimStore.muted` is journaled by kind, and the simulator drains the journal each round.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kgpu.dra.gated_fields import drop_disabled
from kgpu.store import MemoryStore, Obj, group_of, namespace_of


class SimStore(MemoryStore):
    """``gate_on``: whether the simulated API server serves a feature gate; the fields of
    one it does not serve are dropped on write as kube-apiserver drops them
    (:func:`kgpu.dra.gated_fields.drop_disabled`). None: every gate on."""

    def __init__(
        self,
        clock: Callable[[], str] | None = None,
        gate_on: Callable[[str], bool] | None = None,
    ) -> None:
        strategy = None
        if gate_on is not None:
            on = gate_on

            def strategy(new: Obj, old: Obj | None) -> Obj:
                return drop_disabled(str(new.get("kind", "")), new, old, on)

        super().__init__(clock, strategy=strategy)
        self._mute = 0
        self._journal: dict[str, set[tuple[str, str]]] = {}
        #: (API group, kind) of every object ever stored: a controller of a kind the cluster
        #: never had skips its listing (most scenarios have no ScaledObject or HPA)
        self.kinds: set[tuple[str, str]] = set()

    @contextmanager
    def muted(self) -> Iterator[None]:
        """Writes inside are the simulator's own: not journaled."""
        self._mute += 1
        try:
            yield
        finally:
            self._mute -= 1

    def _note(self, kind: str, namespace: str, name: str) -> None:
        if not self._mute:
            self._journal.setdefault(kind, set()).add((namespace, name))

    def _note_obj(self, obj: Obj) -> None:
        meta = obj.get("metadata") or {}
        self._note(str(obj.get("kind", "")), namespace_of(obj), str(meta.get("name", "")))

    def create(self, obj: Obj) -> Obj:
        out = super().create(obj)
        self._note_obj(out)
        self.kinds.add((group_of(str(out.get("apiVersion", ""))), str(out.get("kind", ""))))
        return out

    def create_in_place(self, obj: Obj) -> None:
        super().create_in_place(obj)
        self._note_obj(obj)
        self.kinds.add((group_of(str(obj.get("apiVersion", ""))), str(obj.get("kind", ""))))

    def update(self, obj: Obj) -> Obj:
        out = super().update(obj)
        self._note_obj(obj)
        return out

    def apply(self, obj: Obj) -> Obj:
        out = super().apply(obj)
        self._note_obj(obj)
        self.kinds.add((group_of(str(out.get("apiVersion", ""))), str(out.get("kind", ""))))
        return out

    def apply_version(self, obj: Obj) -> str:
        out = super().apply_version(obj)
        self._note_obj(obj)
        self.kinds.add((group_of(str(obj.get("apiVersion", ""))), str(obj.get("kind", ""))))
        return out

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        out = super().patch(api_version, kind, name, patch, namespace, subresource)
        self._note_obj(out)
        return out

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        super().delete(api_version, kind, name, namespace)
        probe: Obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}
        if namespace is not None:
            probe["metadata"]["namespace"] = namespace
        self._note_obj(probe)

    def drain(self) -> dict[str, set[tuple[str, str]]]:
        """What others wrote since the last drain, by kind -> {(namespace, name)}."""
        out, self._journal = self._journal, {}
        return out

    def touched(self, kind: str, namespace: str, name: str) -> bool:
        """Whether someone else wrote this object since the last drain."""
        return (namespace, name) in self._journal.get(kind, ())

    def pending(self) -> bool:
        return bool(self._journal)
