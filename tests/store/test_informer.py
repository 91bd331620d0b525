"""Informers on the in-memory store: what a component built on them sees (adds, updates,
deletes, a relist after 410 Gone, recovery after failures) and what they cost the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from kgpu.store import (
    Backoff,
    CachedStore,
    Informer,
    MemoryStore,
    MemoryWatch,
    NotFound,
    ObjectList,
    Scope,
    SharedInformers,
    StoreError,
)

FAST = Backoff(initial_s=0.01, max_s=0.05)


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


class CountingStore(MemoryStore):
    """A MemoryStore that counts reads, can fail the next lists, and can end open watches
    (a server closing its streams)."""

    def __init__(self, history: int = 1024) -> None:
        super().__init__(history=history)
        self.calls: dict[str, int] = {"get": 0, "list": 0, "watch": 0}
        self.fail_lists = 0
        self.open: list[MemoryWatch] = []

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        self.calls["get"] += 1
        return super().get(api_version, kind, name, namespace)

    def list(self, api_version: str, kind: str, *args: Any, **kwargs: Any) -> ObjectList:
        self.calls["list"] += 1
        if self.fail_lists:
            self.fail_lists -= 1
            raise StoreError("connection refused")
        return super().list(api_version, kind, *args, **kwargs)

    def watch(self, api_version: str, kind: str, *args: Any, **kwargs: Any) -> MemoryWatch:
        self.calls["watch"] += 1
        w = super().watch(api_version, kind, *args, **kwargs)
        self.open.append(w)
        return w

    def drop_watches(self) -> None:
        for w in self.open:
            w.stop()
        self.open.clear()


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.changes = 0
        self.changed = threading.Event()

    def attach(self, informer: Informer) -> None:
        informer.add_handler(
            on_add=lambda o: self.events.append(("add", o["metadata"]["name"])),
            on_update=lambda a, b: self.events.append(("update", b["metadata"]["name"])),
            on_delete=lambda o: self.events.append(("delete", o["metadata"]["name"])),
            on_change=self._change,
        )

    def _change(self) -> None:
        self.changes += 1
        self.changed.set()


def _until(cond: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.005)
    return cond()


def _informer(store: MemoryStore, labels: Mapping[str, str] | None = None) -> Informer:
    return Informer(store, Scope.of("v1", "Node", labels=labels), backoff=FAST, wait_s=0.05)


def test_list_then_watch_feeds_cache_and_handlers() -> None:
    store = CountingStore()
    store.create(node("a"))
    informer = _informer(store)
    rec = Recorder()
    rec.attach(informer)
    informer.sync()
    assert informer.synced and [n["metadata"]["name"] for n in informer.list()] == ["a"]
    store.create(node("b"))
    store.update({**store.get("v1", "Node", "a"), "spec": {"unschedulable": True}})
    store.delete("v1", "Node", "b")
    assert informer.sync() == 3
    assert rec.events == [("add", "a"), ("add", "b"), ("update", "a"), ("delete", "b")]
    assert rec.changes == 2  # the first list, then one batch of three events
    assert informer.get("a") is not None and informer.get("b") is None
    assert (store.calls["list"], store.calls["watch"]) == (1, 1)
    assert informer.resource_version == str(store.resource_version)


def test_objects_entering_and_leaving_a_label_selector() -> None:
    """A node that loses the watched label is deleted from the cache (the API server's watch
    sends DELETED), one that gains it is added."""
    store = MemoryStore()
    store.create(node("a", domain="d1"))
    store.create(node("b"))
    informer = _informer(store, {"domain": "d1"})
    rec = Recorder()
    rec.attach(informer)
    informer.sync()
    store.patch("v1", "Node", "a", {"metadata": {"labels": {"domain": None}}})
    store.patch("v1", "Node", "b", {"metadata": {"labels": {"domain": "d1"}}})
    informer.sync()
    assert rec.events == [("add", "a"), ("delete", "a"), ("add", "b")]
    assert [n["metadata"]["name"] for n in informer.list()] == ["b"]


def test_gone_relists_and_reports_what_changed_while_away() -> None:
    store = CountingStore(history=2)
    for name in "abc":
        store.create(node(name))
    informer = _informer(store)
    rec = Recorder()
    rec.attach(informer)
    informer.sync()
    store.drop_watches()  # the stream ends; meanwhile the server compacts its history
    store.delete("v1", "Node", "a")
    store.update({**store.get("v1", "Node", "b"), "spec": {"unschedulable": True}})
    for name in "def":
        store.create(node(name))
    informer.start()
    try:
        assert _until(lambda: store.calls["list"] == 2 and informer.get("f") is not None)
    finally:
        informer.stop()
    assert informer.stats.failures == 1  # the 410
    assert sorted(rec.events[3:]) == [
        ("add", "d"),
        ("add", "e"),
        ("add", "f"),
        ("delete", "a"),
        ("update", "b"),
    ]
    assert [n["metadata"]["name"] for n in informer.list()] == ["b", "c", "d", "e", "f"]


def test_a_dropped_watch_resumes_from_its_version_without_a_list() -> None:
    store = CountingStore()
    informer = _informer(store).start()
    try:
        assert informer.wait_synced(5)
        store.drop_watches()
        store.create(node("late"))
        assert _until(lambda: informer.get("late") is not None)
    finally:
        informer.stop()
    assert store.calls["list"] == 1 and store.calls["watch"] >= 2


def test_failures_back_off_and_recover() -> None:
    store = CountingStore()
    store.fail_lists = 3
    store.create(node("a"))
    informer = _informer(store).start()
    try:
        assert informer.wait_synced(5)
    finally:
        informer.stop()
    assert informer.stats.failures == 3 and informer.get("a") is not None


def test_backoff_doubles_to_a_cap_with_jitter() -> None:
    b = Backoff()
    assert [b.delay(n, lambda: 0.0) for n in (1, 2, 3, 7, 20)] == [0.8, 1.6, 3.2, 30.0, 30.0]
    assert b.delay(1, lambda: 1.0) == pytest.approx(1.6)  # jitter stretches up to 2x


def test_a_failing_handler_does_not_stop_the_others() -> None:
    store = MemoryStore()
    informer = _informer(store)

    def broken(_: dict[str, Any]) -> None:
        raise RuntimeError("bug")

    informer.add_handler(on_add=broken)
    rec = Recorder()
    rec.attach(informer)
    store.create(node("a"))
    informer.sync()
    store.create(node("b"))
    informer.sync()
    assert rec.events == [("add", "a"), ("add", "b")]


def test_a_late_handler_gets_the_cached_objects() -> None:
    store = MemoryStore()
    store.create(node("a"))
    informer = _informer(store)
    informer.sync()
    rec = Recorder()
    rec.attach(informer)
    assert rec.events == [("add", "a")] and rec.changes == 1


def test_threaded_informer_reports_changes_as_they_happen() -> None:
    store = MemoryStore()
    informer = _informer(store).start()
    rec = Recorder()
    rec.attach(informer)
    try:
        assert informer.wait_synced(5)
        rec.changed.clear()
        store.create(node("a"))
        assert rec.changed.wait(5)
        assert informer.get("a") is not None
    finally:
        informer.stop()
    assert not informer.running


def test_cached_store_reads_from_a_covering_informer() -> None:
    store = CountingStore()
    store.create(node("a", gpu="yes"))
    store.create(node("b"))
    cached = CachedStore(store, SharedInformers(store, threaded=False))
    informer = cached.informers.acquire("v1", "Node", labels={"gpu": "yes"})
    before = dict(store.calls)
    # covered: the query is at least as narrow as the informer
    assert [n["metadata"]["name"] for n in cached.list("v1", "Node", labels={"gpu": "yes"})] == [
        "a"
    ]
    assert cached.get("v1", "Node", "a")["metadata"]["name"] == "a"
    assert store.calls == before
    # not covered: all nodes, or a node outside the selector, go to the store
    assert len(cached.list("v1", "Node")) == 2
    assert cached.get("v1", "Node", "b")["metadata"]["name"] == "b"
    assert (store.calls["list"], store.calls["get"]) == (before["list"] + 1, before["get"] + 1)
    cached.informers.release(informer)
    assert cached.informers.informers() == []


def test_a_whole_kind_informer_answers_not_found_itself() -> None:
    store = CountingStore()
    cached = CachedStore(store, SharedInformers(store, threaded=False))
    cached.informers.acquire("v1", "Node")
    with pytest.raises(NotFound):
        cached.get("v1", "Node", "missing")
    assert store.calls["get"] == 0


def test_shared_informers_are_counted_per_scope() -> None:
    store = CountingStore()
    shared = SharedInformers(store)
    one = shared.acquire("v1", "Node", labels={"x": "1"})
    two = shared.acquire("v1", "Node", labels={"x": "1"})
    other = shared.acquire("v1", "Node", labels={"x": "2"})
    assert one is two and one is not other and store.calls["list"] == 2
    shared.release(one)
    assert two.running
    shared.release(two)
    assert not two.running and shared.informers() == [other]
    shared.stop()
    assert not other.running
