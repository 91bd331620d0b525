"""MemoryStore's no-copy extras (issue 17, the 100,000-GPU simulator): equal small maps inside
stored objects are one object, readers may take stored objects, writers may skip a copy; none of
it may show through the protocol (a caller changing what it got changes nothing stored)."""

from __future__ import annotations

from typing import Any

from kgpu.store import MemoryStore, list_read_only


def _slice(name: str, uuid: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.nvidia.com",
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {
                        "productName": {"string": "NVIDIA H100 80GB HBM3"},
                        "uuid": {"string": uuid},
                        "index": {"int": 0},
                        "flag": {"bool": True},
                        "one": {"int": 1},
                        "ratio": {"float": 0.5},
                    },
                }
            ],
        },
    }


def _attrs(obj: dict[str, Any]) -> dict[str, Any]:
    attrs: dict[str, Any] = obj["spec"]["devices"][0]["attributes"]
    return attrs


def test_equal_maps_are_shared_inside_the_store_but_never_through_a_read() -> None:
    store = MemoryStore()
    store.create(_slice("a", "GPU-a"))
    store.create(_slice("b", "GPU-b"))
    a, b = store.list_shared("resource.k8s.io/v1", "ResourceSlice")
    assert _attrs(a)["productName"] is _attrs(b)["productName"]  # one object for both
    assert _attrs(a)["uuid"] is not _attrs(b)["uuid"]
    # a reader changing its copy of one slice changes neither stored slice
    got = store.get("resource.k8s.io/v1", "ResourceSlice", "a")
    _attrs(got)["productName"]["string"] = "changed"
    for name in ("a", "b"):
        again = store.get("resource.k8s.io/v1", "ResourceSlice", name)
        assert _attrs(again)["productName"] == {"string": "NVIDIA H100 80GB HBM3"}


def test_sharing_keeps_types_bool_is_not_int() -> None:
    store = MemoryStore()
    first = _slice("a", "GPU-a")
    _attrs(first)["x"] = {"v": 1}
    second = _slice("b", "GPU-b")
    _attrs(second)["x"] = {"v": True}
    store.create(first)
    store.create(second)
    a = store.get("resource.k8s.io/v1", "ResourceSlice", "a")
    b = store.get("resource.k8s.io/v1", "ResourceSlice", "b")
    assert type(_attrs(a)["x"]["v"]) is int
    assert type(_attrs(b)["x"]["v"]) is bool


def test_read_only_listing_is_the_listing() -> None:
    store = MemoryStore()
    for name in ("c", "a", "b"):
        store.create(_slice(name, f"GPU-{name}"))
    store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    listed = store.list("resource.k8s.io/v1", "ResourceSlice")
    assert list_read_only(store, "resource.k8s.io/v1", "ResourceSlice") == list(listed)
    assert [s["metadata"]["name"] for s in listed] == ["a", "b", "c"]


def test_apply_version_and_create_in_place_write_what_apply_and_create_write() -> None:
    store = MemoryStore()
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "p-", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "c"}]},
    }
    store.create_in_place(pod)
    meta = pod["metadata"]
    assert meta["name"].startswith("p-") and meta["namespace"] == "default" and meta["uid"]
    stored = store.get("v1", "Pod", meta["name"], "default")
    assert stored == pod
    pod["status"] = {"phase": "Running"}
    rv = store.apply_version(pod)
    assert rv == store.get("v1", "Pod", meta["name"], "default")["metadata"]["resourceVersion"]
    assert int(rv) > int(meta["resourceVersion"])
    # the caller's object stays its own: changing it changes nothing stored
    pod["metadata"]["labels"]["app"] = "y"
    assert store.get("v1", "Pod", meta["name"], "default")["metadata"]["labels"] == {"app": "x"}
