"""What :class:`KubeStore` puts on the wire: the real API paths, queries, bodies and credentials,
and how the API server's answers become store errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kgpu.cluster.kube import KubeApiError, KubeStore
from kgpu.errors import FieldError
from kgpu.store import AlreadyExists, Conflict, NotFound
from kgpu.testing.apiserver import FakeApiServer

from .conftest import TEST_CLIENT, TOKEN, write_kubeconfig

SLICE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-a-gpu.nvidia.com-abcde", "labels": {"kgpu.io/node": "node-a"}},
    "spec": {
        "driver": "gpu.nvidia.com",
        "nodeName": "node-a",
        "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
        "devices": [{"name": "gpu-0", "attributes": {"index": {"int": 0}}}],
    },
}


def _writes(server: FakeApiServer) -> list[tuple[str, str, dict[str, str]]]:
    return [(r.method, r.path, r.query) for r in server.requests if r.method != "GET"]


def test_publishing_a_resource_slice_posts_it_with_the_agents_credentials(
    kube: KubeStore, apiserver: FakeApiServer
) -> None:
    made = kube.create(SLICE)
    (post,) = apiserver.calls("POST")
    assert (post.method, post.path) == ("POST", "/apis/resource.k8s.io/v1/resourceslices")
    assert post.query == {"fieldManager": "kgpu", "fieldValidation": "Strict"}
    assert post.headers["authorization"] == f"Bearer {TOKEN}"
    assert post.headers["content-type"] == "application/json"
    assert post.body == SLICE
    assert made["metadata"]["resourceVersion"] and made["metadata"]["uid"]
    assert made["spec"] == SLICE["spec"]
    assert post.user_agent == TEST_CLIENT
    # The table knows ResourceSlices; the one discovery request finds the group's versions.
    assert [r.path for r in apiserver.requests] == [
        "/apis/resource.k8s.io",
        "/apis/resource.k8s.io/v1/resourceslices",
    ]


def test_listing_nodes_sends_a_label_selector_and_returns_whole_objects(
    kube: KubeStore, apiserver: FakeApiServer
) -> None:
    for name, zone in (("a", "z1"), ("b", "z2"), ("c", "z1")):
        labels = {"topology.kubernetes.io/zone": zone, "nvidia.com/gpu.present": "true"}
        kube.create(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        )
    apiserver.requests.clear()
    nodes = kube.list(
        "v1", "Node", labels={"topology.kubernetes.io/zone": "z1", "nvidia.com/gpu.present": "true"}
    )
    (call,) = apiserver.requests
    assert call.path == "/api/v1/nodes"
    assert call.query == {
        "labelSelector": "nvidia.com/gpu.present=true,topology.kubernetes.io/zone=z1",
        "limit": "500",
    }
    assert [(n["apiVersion"], n["kind"], n["metadata"]["name"]) for n in nodes] == [
        ("v1", "Node", "a"),
        ("v1", "Node", "c"),
    ]


def test_namespaced_urls_and_all_namespace_lists(kube: KubeStore, apiserver: FakeApiServer) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}}
    kube.create(pod)
    kube.get("v1", "Pod", "p", "ml")
    kube.list("v1", "Pod")
    kube.list("v1", "Pod", namespace="ml")
    kube.delete("v1", "Pod", "p", "ml")
    assert [(r.method, r.path) for r in apiserver.requests] == [
        ("POST", "/api/v1/namespaces/ml/pods"),
        ("GET", "/api/v1/namespaces/ml/pods/p"),
        ("GET", "/api/v1/pods"),
        ("GET", "/api/v1/namespaces/ml/pods"),
        ("DELETE", "/api/v1/namespaces/ml/pods/p"),
    ]


def test_stale_put_is_a_conflict_and_taken_name_is_already_exists(
    kube: KubeStore, apiserver: FakeApiServer
) -> None:
    first = kube.create(SLICE)
    kube.update({**first, "spec": {**first["spec"], "devices": []}})
    with pytest.raises(Conflict, match="the object has been modified"):
        kube.update(first)
    put = apiserver.calls("PUT")[-1]
    assert put.path == "/apis/resource.k8s.io/v1/resourceslices/node-a-gpu.nvidia.com-abcde"
    assert put.body is not None
    assert put.body["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    with pytest.raises(AlreadyExists, match="already exists"):
        kube.create(SLICE)
    with pytest.raises(NotFound, match=r'resourceslices\.resource\.k8s\.io "gone" not found'):
        kube.get("resource.k8s.io/v1", "ResourceSlice", "gone")


def test_claim_status_goes_through_the_status_subresource(
    kube: KubeStore, apiserver: FakeApiServer
) -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": {"results": []}}},
    }
    made = kube.create(claim)
    assert made["status"] == claim["status"]
    assert [(r.method, r.path) for r in apiserver.requests] == [
        ("GET", "/apis/resource.k8s.io"),
        ("POST", "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims"),
        ("PUT", "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c/status"),
    ]
    apiserver.requests.clear()
    # A spec-only change does not touch the status subresource.
    kube.update({**made, "spec": {"devices": {"requests": [{"name": "gpu"}]}}})
    assert [r.path for r in apiserver.requests] == [
        "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c"
    ]


def test_apply_is_one_server_side_apply_request(kube: KubeStore, apiserver: FakeApiServer) -> None:
    """Custom resources refuse unconditional PUTs (422): apply needs no read first, it is a
    PATCH the server merges under field manager kgpu."""
    domain = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "d", "namespace": "ml", "resourceVersion": "999"},
        "spec": {"numNodes": 2},
    }
    kube.apply(domain)
    made = kube.apply({**domain, "spec": {"numNodes": 3}})
    assert made["spec"] == {"numNodes": 3}
    path = "/apis/resource.nvidia.com/v1beta1/namespaces/ml/computedomains/d"
    query = {"fieldManager": "kgpu", "fieldValidation": "Strict", "force": "true"}
    assert _writes(apiserver) == [("PATCH", path, query), ("PATCH", path, query)]
    first = apiserver.calls("PATCH")[0]
    assert first.headers["content-type"] == "application/apply-patch+yaml"
    assert first.body is not None and "resourceVersion" not in first.body["metadata"]
    # The server itself does refuse a PUT without one.
    code, answer = apiserver.handle(
        "PUT",
        path,
        b'{"metadata": {"name": "d"}, "spec": {}}',
        {"authorization": f"Bearer {TOKEN}"},
    )
    assert (code, answer["reason"]) == (422, "Invalid")


def test_other_kinds_are_found_by_discovery_once(kube: KubeStore, apiserver: FakeApiServer) -> None:
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    kube.create(widget)
    kube.get("example.com/v1", "Widget", "w")
    assert [r.path for r in apiserver.requests] == [
        "/apis/example.com/v1",
        "/apis/example.com/v1/namespaces/default/widgets",
        "/apis/example.com/v1/namespaces/default/widgets/w",
    ]
    with pytest.raises(KubeApiError, match="does not serve kind 'Gadget'") as err:
        kube.get("example.com/v1", "Gadget", "g")
    assert err.value.reason == "NotFound"


def test_wrong_credentials_are_an_api_error_not_a_missing_object(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", apiserver.url, token="wrong")
    store = KubeStore.from_config(str(kubeconfig), user_agent=TEST_CLIENT)
    with pytest.raises(KubeApiError) as err:
        store.get("v1", "Node", "a")
    assert (err.value.reason, err.value.code) == ("Unauthorized", 401)
    store.close()


def test_unreachable_server_is_reported(tmp_path: Path) -> None:
    server = FakeApiServer().start()
    url = server.url
    server.stop()
    store = KubeStore.from_config(
        str(write_kubeconfig(tmp_path / "kubeconfig", url)), timeout=2, user_agent=TEST_CLIENT
    )
    with pytest.raises(KubeApiError, match="cannot reach the API server") as err:
        store.list("v1", "Node")
    assert err.value.code == 0
    store.close()


def test_a_kubeconfig_that_cannot_be_used_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(FieldError) as err:
        KubeStore.from_config(str(missing))
    assert str(missing) in str(err.value)
    bad = write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")
    with pytest.raises(FieldError, match=r"contexts\[other\]"):
        KubeStore.from_config(str(bad), context="other")


def test_in_cluster_config_uses_the_service_account(
    apiserver: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a pod the store needs no kubeconfig: the API server comes from the service env
    (the service-account paths are the client's; the test points them at tmp files)."""
    from kubernetes.config import incluster_config

    token = tmp_path / "token"
    token.write_text(TOKEN)
    ca = tmp_path / "ca.crt"
    ca.write_text("unused for http")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(ca))
    host, port = apiserver.url.removeprefix("http://").split(":")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    store = KubeStore.from_config(user_agent=TEST_CLIENT)
    assert store.host == f"https://{host}:{port}"
    store.close()


def test_apply_keeps_what_other_managers_set_and_drops_what_kgpu_no_longer_sets(
    kube: KubeStore, apiserver: FakeApiServer
) -> None:
    labelled = {
        **SLICE,
        "metadata": {**SLICE["metadata"], "labels": {"kgpu.io/node": "node-a", "old": "x"}},
    }
    kube.apply(labelled)
    # another controller labels the slice with a merge patch of its own
    code, _ = apiserver.handle(
        "PATCH",
        f"/apis/resource.k8s.io/v1/resourceslices/{SLICE['metadata']['name']}?fieldManager=other",
        b'{"metadata": {"labels": {"team": "ml"}}}',
        {"authorization": f"Bearer {TOKEN}", "content-type": "application/merge-patch+json"},
    )
    assert code == 200
    applied = kube.apply({**SLICE, "spec": {**SLICE["spec"], "devices": []}})
    assert applied["spec"]["devices"] == []
    assert applied["metadata"]["labels"] == {"kgpu.io/node": "node-a", "team": "ml"}


def test_merge_patch_sends_only_the_changed_labels(
    kube: KubeStore, apiserver: FakeApiServer
) -> None:
    kube.create(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "labels": {"a": "1"}}}
    )
    patched = kube.patch("v1", "Node", "n", {"metadata": {"labels": {"b": "2", "a": None}}})
    assert patched["metadata"]["labels"] == {"b": "2"}
    call = apiserver.calls("PATCH")[-1]
    assert call.headers["content-type"] == "application/merge-patch+json"
    assert call.body == {"metadata": {"labels": {"b": "2", "a": None}}}
    assert call.rule == ("", "nodes", "patch")
    kube.patch("v1", "Node", "n", {"status": {"capacity": {"pods": "110"}}}, subresource="status")
    assert apiserver.calls("PATCH")[-1].rule == ("", "nodes/status", "patch")
    assert kube.get("v1", "Node", "n")["status"] == {"capacity": {"pods": "110"}}
    with pytest.raises(Conflict):
        kube.patch("v1", "Node", "n", {"metadata": {"resourceVersion": "1", "labels": {}}})
