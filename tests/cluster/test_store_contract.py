"""One behaviour table, two stores: what a controller sees from the in-memory store it also sees
from the API-server store (over HTTP to the loopback API server), so code tested on one runs on
the other."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.cluster.kube import KubeStore
from kgpu.store import AlreadyExists, Conflict, MemoryStore, NotFound, ObjectStore
from kgpu.testing.apiserver import FakeApiServer

from .conftest import TEST_CLIENT, TOKEN, write_kubeconfig


@pytest.fixture(params=["memory", "kube"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    server = FakeApiServer(token=TOKEN).start()
    kube = KubeStore.from_config(
        str(write_kubeconfig(tmp_path / "kubeconfig", server.url)), user_agent=TEST_CLIENT
    )
    try:
        yield kube
    finally:
        kube.close()
        server.stop()


def _cm(name: str, data: str = "a", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, **meta},
        "data": {"k": data},
    }


def _claim(name: str, **status: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "jobs"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "g"}}]}},
    }
    if status:
        obj["status"] = status
    return obj


def test_stale_update_conflicts_and_fresh_one_lands(store: ObjectStore) -> None:
    first = store.create(_cm("x"))
    assert first["metadata"]["namespace"] == "default"
    fresh = store.update({**first, "data": {"k": "b"}})
    with pytest.raises(Conflict):
        store.update({**first, "data": {"k": "c"}})
    assert store.get("v1", "ConfigMap", "x")["data"] == {"k": "b"}
    assert int(fresh["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])


def test_create_twice_and_missing_get_update_delete(store: ObjectStore) -> None:
    store.create(_cm("x"))
    with pytest.raises(AlreadyExists):
        store.create(_cm("x"))
    with pytest.raises(NotFound):
        store.delete("v1", "ConfigMap", "nope")
    with pytest.raises(NotFound):
        store.get("v1", "ConfigMap", "nope")
    with pytest.raises(NotFound):
        store.update(_cm("nope"))


def test_update_without_resource_version_is_unconditional(store: ObjectStore) -> None:
    store.create(_cm("x"))
    store.update(_cm("x", "b"))
    domain = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "d", "namespace": "jobs"},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "d-channel"}}},
    }
    store.create(domain)
    store.update({**domain, "spec": {**domain["spec"], "numNodes": 4}})
    assert store.get("v1", "ConfigMap", "x")["data"] == {"k": "b"}
    assert (
        store.get("resource.nvidia.com/v1beta1", "ComputeDomain", "d", "jobs")["spec"]["numNodes"]
        == 4
    )


def test_apply_creates_then_replaces_whatever_the_version(store: ObjectStore) -> None:
    made = store.apply(_cm("x", "a", labels={"v": "1"}))
    stale = {**made, "data": {"k": "b"}}
    store.update({**made, "data": {"k": "c"}})
    applied = store.apply(stale)
    assert applied["data"] == {"k": "b"}
    assert store.get("v1", "ConfigMap", "x")["data"] == {"k": "b"}
    assert store.get("v1", "ConfigMap", "x")["metadata"]["uid"] == made["metadata"]["uid"]


def test_finalizer_holds_deletion_until_removed(store: ObjectStore) -> None:
    store.create(_cm("held", finalizers=["kgpu.io/test"]))
    store.delete("v1", "ConfigMap", "held")
    marked = store.get("v1", "ConfigMap", "held")
    assert marked["metadata"]["deletionTimestamp"]
    marked["metadata"]["finalizers"] = []
    store.update(marked)
    with pytest.raises(NotFound):
        store.get("v1", "ConfigMap", "held")


def test_list_filters_by_namespace_and_labels_and_versions_share_a_group(
    store: ObjectStore,
) -> None:
    store.create(_cm("a", namespace="n1", labels={"x": "1", "y": "1"}))
    store.create(_cm("b", namespace="n2", labels={"x": "2", "y": "1"}))
    names = [o["metadata"]["name"] for o in store.list("v1", "ConfigMap", labels={"x": "2"})]
    assert names == ["b"]
    assert [o["metadata"]["name"] for o in store.list("v1", "ConfigMap", namespace="n1")] == ["a"]
    both = store.list("v1", "ConfigMap", labels={"y": "1"})
    assert [(o["kind"], o["apiVersion"], o["metadata"]["name"]) for o in both] == [
        ("ConfigMap", "v1", "a"),
        ("ConfigMap", "v1", "b"),
    ]
    assert store.list("v1", "ConfigMap", labels={"x": "1", "y": "2"}) == []
    store.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "c"},
            "spec": {"selectors": []},
        }
    )
    assert store.list("resource.k8s.io/v1beta1", "DeviceClass")[0]["metadata"]["name"] == "c"


def test_cluster_scoped_objects_have_no_namespace(store: ObjectStore) -> None:
    made = store.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"generateName": "node-a-gpu.nvidia.com-"},
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "node-a",
                "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            },
        }
    )
    name = made["metadata"]["name"]
    assert name.startswith("node-a-gpu.nvidia.com-") and len(name) > len("node-a-gpu.nvidia.com-")
    assert "namespace" not in made["metadata"]
    assert store.get("resource.k8s.io/v1", "ResourceSlice", name)["spec"]["nodeName"] == "node-a"
    store.delete("resource.k8s.io/v1", "ResourceSlice", name)
    assert store.list("resource.k8s.io/v1", "ResourceSlice") == []


def test_status_is_written_with_the_object(store: ObjectStore) -> None:
    """ResourceClaims have a status subresource on a real server; the store still carries it."""
    made = store.create(_claim("c", reservedFor=[{"resource": "pods", "name": "p", "uid": "1"}]))
    assert made["status"]["reservedFor"][0]["name"] == "p"
    read = store.get("resource.k8s.io/v1", "ResourceClaim", "c", "jobs")
    assert read["status"] == made["status"]
    read["status"] = {"allocation": {"devices": {"results": []}}}
    store.update(read)
    assert store.get("resource.k8s.io/v1", "ResourceClaim", "c", "jobs")["status"] == {
        "allocation": {"devices": {"results": []}}
    }
    listed = store.list("resource.k8s.io/v1", "ResourceClaim", namespace="jobs")
    assert [o["status"] for o in listed] == [{"allocation": {"devices": {"results": []}}}]


def test_releasing_the_last_finalizer_with_a_status_change_removes_the_claim(
    store: ObjectStore,
) -> None:
    claim = _claim("held", reservedFor=[{"resource": "pods", "name": "p", "uid": "1"}])
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    store.create(claim)
    store.delete("resource.k8s.io/v1", "ResourceClaim", "held", "jobs")
    marked = store.get("resource.k8s.io/v1", "ResourceClaim", "held", "jobs")
    marked["metadata"]["finalizers"] = []
    marked["status"] = {}
    store.update(marked)
    assert store.list("resource.k8s.io/v1", "ResourceClaim", namespace="jobs") == []


def _events(store: ObjectStore, watch: Any, count: int) -> list[tuple[str, str]]:
    out = []
    for _ in range(count):
        event = watch.next(5)
        assert event is not None
        if event.type != "BOOKMARK":
            out.append((event.type, event.object["metadata"]["name"]))
    watch.stop()
    return out


def test_watch_from_a_list_sees_every_later_change_in_order(store: ObjectStore) -> None:
    store.create(_cm("before"))
    listed = store.list("v1", "ConfigMap")
    watch = store.watch("v1", "ConfigMap", resource_version=listed.resource_version)
    made = store.create(_cm("x"))
    store.update({**made, "data": {"k": "b"}})
    store.delete("v1", "ConfigMap", "x")
    assert _events(store, watch, 3) == [("ADDED", "x"), ("MODIFIED", "x"), ("DELETED", "x")]


def test_watch_reports_objects_entering_and_leaving_its_selector(store: ObjectStore) -> None:
    store.create(_cm("a", labels={"team": "ml"}))
    rv = store.list("v1", "ConfigMap").resource_version
    watch = store.watch("v1", "ConfigMap", labels={"team": "ml"}, resource_version=rv)
    store.patch("v1", "ConfigMap", "a", {"metadata": {"labels": {"team": None}}})
    store.patch("v1", "ConfigMap", "a", {"metadata": {"labels": {"team": "ml"}}})
    assert _events(store, watch, 2) == [("DELETED", "a"), ("ADDED", "a")]


def test_merge_patch_changes_only_what_it_names(store: ObjectStore) -> None:
    made = store.create(_cm("x", labels={"keep": "1", "drop": "1"}))
    out = store.patch("v1", "ConfigMap", "x", {"metadata": {"labels": {"drop": None, "new": "1"}}})
    assert out["metadata"]["labels"] == {"keep": "1", "new": "1"} and out["data"] == {"k": "a"}
    stale = {"metadata": {"resourceVersion": made["metadata"]["resourceVersion"]}}
    with pytest.raises(Conflict):
        store.patch("v1", "ConfigMap", "x", {**stale, "data": {"k": "z"}})
    with pytest.raises(NotFound):
        store.patch("v1", "ConfigMap", "nope", {"data": {}})
