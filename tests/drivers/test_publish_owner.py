"""Published ResourceSlices name their Node as owner, and a node's pools stay published: a
slice another client deletes comes back, read from one watch of the node's own slices."""

from __future__ import annotations

import time

from kgpu.dra.slices import resource_slices
from kgpu.drivers.publish import SlicePublisher, publish_slices
from kgpu.hardware.profiles import load_machine
from kgpu.store import CachedStore, MemoryStore

API = "resource.k8s.io/v1"
CLIQUE = "c0ffee00-0000-4000-8000-000000000001.3"


def _store_with_node(name: str) -> tuple[MemoryStore, str]:
    store = MemoryStore()
    node = store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    return store, node["metadata"]["uid"]


def test_slices_are_owned_by_their_node() -> None:
    store, uid = _store_with_node("n1")
    machine = load_machine("gb200", hostname="n1", clique=CLIQUE)
    publish_slices(store, "gpu.nvidia.com", "n1", resource_slices(machine, "n1"))
    (s,) = store.list(API, "ResourceSlice")
    assert s["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": uid, "controller": True}
    ]
    # the same devices again: nothing written
    rv = store.resource_version
    publish_slices(store, "gpu.nvidia.com", "n1", resource_slices(machine, "n1"))
    assert store.resource_version == rv


def test_a_node_that_is_not_there_gets_slices_without_owner() -> None:
    store = MemoryStore()
    machine = load_machine("gb200", hostname="n1", clique=CLIQUE)
    publish_slices(store, "gpu.nvidia.com", "n1", resource_slices(machine, "n1"))
    (s,) = store.list(API, "ResourceSlice")
    assert "ownerReferences" not in s["metadata"]


def test_a_deleted_slice_is_published_again() -> None:
    store, _ = _store_with_node("n1")
    cached = CachedStore(store)
    publisher = SlicePublisher(cached, "n1")
    machine = load_machine("gb200", hostname="n1", clique=CLIQUE)
    publisher.publish("gpu.nvidia.com", resource_slices(machine, "n1"))
    # someone else's slices on another node are not watched by this node
    (informer,) = cached.informers.informers()
    assert dict(informer.scope.fields) == {"spec.nodeName": "n1"}
    (s,) = store.list(API, "ResourceSlice")
    store.delete(API, "ResourceSlice", s["metadata"]["name"])
    deadline = time.monotonic() + 5
    while not store.list(API, "ResourceSlice") and time.monotonic() < deadline:
        time.sleep(0.01)
    (again,) = store.list(API, "ResourceSlice")
    assert again["spec"]["devices"] == s["spec"]["devices"]
    assert again["spec"]["pool"]["generation"] == 1  # a fresh pool: nothing older is left
    publisher.unpublish("gpu.nvidia.com")  # unpublished on purpose: stays gone
    time.sleep(0.05)
    assert store.list(API, "ResourceSlice") == []
    publisher.close()
    assert cached.informers.informers() == []
