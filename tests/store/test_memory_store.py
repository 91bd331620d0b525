"""The in-memory object store behaves like the API server where controllers can tell.

The full behaviour table runs on both stores in tests/cluster/test_store_contract.py; a test
there that is the same to the letter for MemoryStore is not repeated here.
"""

from __future__ import annotations

import pytest

from kgpu.store import AlreadyExists, MemoryStore, NotFound


def _cm(name: str, data: str = "a") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"k": data},
    }


def test_create_twice_and_missing_delete() -> None:
    store = MemoryStore()
    store.create(_cm("x"))
    with pytest.raises(AlreadyExists):
        store.create(_cm("x"))
    with pytest.raises(NotFound):
        store.delete("v1", "ConfigMap", "nope")


def test_finalizer_holds_deletion_until_removed() -> None:
    store = MemoryStore()
    obj = _cm("held")
    obj["metadata"] = {"name": "held", "finalizers": ["kgpu.io/test"]}  # type: ignore[index]
    store.create(obj)
    store.delete("v1", "ConfigMap", "held")
    marked = store.get("v1", "ConfigMap", "held")
    assert marked["metadata"]["deletionTimestamp"]
    marked["metadata"]["finalizers"] = []
    store.update(marked)
    with pytest.raises(NotFound):
        store.get("v1", "ConfigMap", "held")


def test_list_filters_by_namespace_and_labels_and_versions_share_a_group() -> None:
    store = MemoryStore()
    a = _cm("a")
    a["metadata"] = {"name": "a", "namespace": "n1", "labels": {"x": "1"}}  # type: ignore[index]
    b = _cm("b")
    b["metadata"] = {"name": "b", "namespace": "n2", "labels": {"x": "2"}}  # type: ignore[index]
    store.create(a)
    store.create(b)
    assert [o["metadata"]["name"] for o in store.list("v1", "ConfigMap", labels={"x": "2"})] == [
        "b"
    ]
    assert [o["metadata"]["name"] for o in store.list("v1", "ConfigMap", namespace="n1")] == ["a"]
    store.create(
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c"}}
    )
    assert store.list("resource.k8s.io/v1beta1", "DeviceClass")[0]["metadata"]["name"] == "c"
