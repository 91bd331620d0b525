"""Watches, field selectors and merge patches on the in-memory store behave as the API
server's do: what a component built on list+watch sees is the same on both."""

from __future__ import annotations

import threading

import pytest

from kgpu.store import Conflict, Gone, MemoryStore, NotFound, merge_patch


def node(name: str, **labels: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def pod(name: str, node_name: str = "") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"nodeName": node_name},
    }


def test_list_then_watch_misses_nothing_and_repeats_nothing() -> None:
    store = MemoryStore()
    store.create(node("a"))
    listed = store.list("v1", "Node")
    assert [n["metadata"]["name"] for n in listed] == ["a"]
    store.create(node("b"))  # between the list and the watch
    w = store.watch("v1", "Node", resource_version=listed.resource_version)
    store.delete("v1", "Node", "a")
    events = [(e.type, e.object["metadata"]["name"]) for e in w.drain()]
    assert events == [("ADDED", "b"), ("DELETED", "a")]


def test_watch_without_version_starts_with_current_objects() -> None:
    store = MemoryStore()
    store.create(node("a"))
    w = store.watch("v1", "Node")
    store.update({**store.get("v1", "Node", "a"), "spec": {"unschedulable": True}})
    assert [e.type for e in w.drain()] == ["ADDED", "MODIFIED"]


def test_versions_increase_and_deleted_event_has_its_own() -> None:
    store = MemoryStore()
    created = store.create(node("a"))
    w = store.watch("v1", "Node", resource_version=created["metadata"]["resourceVersion"])
    store.delete("v1", "Node", "a")
    (event,) = w.drain()
    assert int(event.resource_version) > int(created["metadata"]["resourceVersion"])


def test_field_and_label_selectors_on_list_and_watch() -> None:
    store = MemoryStore()
    w = store.watch("v1", "Pod", fields={"spec.nodeName": "n1"})
    store.create(pod("p1", "n1"))
    store.create(pod("p2", "n2"))
    assert [e.object["metadata"]["name"] for e in w.drain()] == ["p1"]
    assert [
        p["metadata"]["name"] for p in store.list("v1", "Pod", fields={"spec.nodeName": "n2"})
    ] == ["p2"]
    store.create(node("g", gpu="yes"))
    store.create(node("c"))
    assert [n["metadata"]["name"] for n in store.list("v1", "Node", labels={"gpu": "yes"})] == ["g"]


def test_watch_from_a_version_older_than_history_is_gone() -> None:
    store = MemoryStore(history=4)
    first = store.create(node("n0"))
    for i in range(1, 10):
        store.create(node(f"n{i}"))
    with pytest.raises(Gone):
        store.watch("v1", "Node", resource_version=first["metadata"]["resourceVersion"])
    # a fresh list gives a version the watch can continue from
    rv = store.list("v1", "Node").resource_version
    store.watch("v1", "Node", resource_version=rv)


def test_blocking_next_wakes_on_write_and_on_stop() -> None:
    store = MemoryStore()
    w = store.watch("v1", "Node", resource_version=store.list("v1", "Node").resource_version)
    threading.Timer(0.05, lambda: store.create(node("late"))).start()
    event = w.next(timeout=5)
    assert event is not None and event.object["metadata"]["name"] == "late"
    threading.Timer(0.05, w.stop).start()
    assert list(w) == []
    assert w.closed


def test_bookmark_when_idle() -> None:
    store = MemoryStore()
    store.create(node("a"))
    rv = store.list("v1", "Node").resource_version
    w = store.watch("v1", "Node", resource_version=rv, bookmarks=True)
    event = w.next(timeout=0.01)
    assert event is not None and event.type == "BOOKMARK" and event.resource_version == rv


def test_merge_patch_semantics() -> None:
    assert merge_patch({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": None, "e": 4}, "f": [1]}) == {
        "a": 1,
        "b": {"d": 3, "e": 4},
        "f": [1],
    }


def test_patch_labels_keeps_other_fields_and_checks_precondition() -> None:
    store = MemoryStore()
    created = store.create(node("a", keep="1"))
    out = store.patch("v1", "Node", "a", {"metadata": {"labels": {"kgpu": "x", "keep": None}}})
    assert out["metadata"]["labels"] == {"kgpu": "x"}
    assert out["metadata"]["uid"] == created["metadata"]["uid"]
    with pytest.raises(Conflict):
        store.patch("v1", "Node", "a", {"metadata": {"resourceVersion": "1", "labels": {}}})
    with pytest.raises(NotFound):
        store.patch("v1", "Node", "missing", {"metadata": {"labels": {}}})


def test_status_patch_touches_only_status() -> None:
    store = MemoryStore()
    store.create({**pod("p"), "status": {"phase": "Pending"}})
    out = store.patch(
        "v1",
        "Pod",
        "p",
        {"spec": {"nodeName": "x"}, "status": {"phase": "Running"}},
        "ns",
        "status",
    )
    assert out["status"]["phase"] == "Running"
    assert out["spec"]["nodeName"] == ""


def test_apply_twice_without_namespace_names_one_object() -> None:
    store = MemoryStore()
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    store.apply(body)
    store.apply({**body, "data": {"a": "2"}})
    assert [c["data"] for c in store.list("v1", "ConfigMap")] == [{"a": "2"}]
