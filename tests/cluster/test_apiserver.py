"""The API-server stand-in answers as kube-apiserver would where kgpu depends on it: discovery
per release, schema checks, selectors, pagination, watches, apply conflicts, status, and the
request record RBAC is checked against."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from kgpu.testing.apiserver import FakeApiServer

DEVICE_CLASS = {
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": 'device.driver == "gpu.nvidia.com"'}}]},
}


def call(
    server: FakeApiServer,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    agent: str = "test/1",
) -> tuple[int, dict[str, Any]]:
    raw = json.dumps(body).encode() if body is not None else b""
    return server.handle(method, path, raw, {"content-type": content_type, "user-agent": agent})


def test_discovery_per_release() -> None:
    preferred = {}
    for release in ("1.32", "1.33", "1.34", "1.35", "1.36", "1.37"):
        server = FakeApiServer(release=release)
        code, group = call(server, "GET", "/apis/resource.k8s.io")
        assert code == 200 and group["kind"] == "APIGroup"
        preferred[release] = (
            [v["version"] for v in group["versions"]],
            group["preferredVersion"]["version"],
        )
        code, listing = call(server, "GET", "/apis/resource.k8s.io/" + preferred[release][1])
        names = {r["name"] for r in listing["resources"]}
        assert {"resourceslices", "resourceclaims", "resourceclaims/status"} <= names
    assert preferred == {
        "1.32": (["v1beta1"], "v1beta1"),
        "1.33": (["v1beta2", "v1beta1"], "v1beta2"),
        "1.34": (["v1", "v1beta2", "v1beta1"], "v1"),
        "1.35": (["v1", "v1beta2", "v1beta1"], "v1"),
        "1.36": (["v1", "v1beta2", "v1beta1"], "v1"),
        "1.37": (["v1", "v1beta2", "v1beta1"], "v1"),
    }
    code, version = call(FakeApiServer(release="1.33"), "GET", "/version")
    assert version["gitVersion"] == "v1.33.0"


def test_a_v1_device_class_is_refused_by_1_33_and_schemas_are_the_releases() -> None:
    server = FakeApiServer(release="1.33")
    v1 = {**DEVICE_CLASS, "apiVersion": "resource.k8s.io/v1"}
    code, answer = call(server, "POST", "/apis/resource.k8s.io/v1/deviceclasses", v1)
    assert (code, answer["reason"]) == (404, "NotFound")
    beta2 = {**DEVICE_CLASS, "apiVersion": "resource.k8s.io/v1beta2"}
    code, _ = call(server, "POST", "/apis/resource.k8s.io/v1beta2/deviceclasses", beta2)
    assert code == 201
    # the body must be of the URL's version
    code, answer = call(server, "POST", "/apis/resource.k8s.io/v1beta1/deviceclasses", beta2)
    assert code == 400 and "does not match the expected API version" in answer["message"]
    # extendedResourceName arrived in 1.34: unknown to 1.33, refused when strict
    unknown = {**beta2, "metadata": {"name": "x"}, "spec": {"extendedResourceName": "a/b"}}
    path = "/apis/resource.k8s.io/v1beta2/deviceclasses"
    code, answer = call(server, "POST", path + "?fieldValidation=Strict", unknown)
    assert (code, answer["reason"]) == (422, "Invalid")
    code, made = call(server, "POST", path, unknown)  # by default, dropped
    assert code == 201 and made["spec"] == {}
    bad = {**beta2, "metadata": {"name": "y"}, "spec": {"selectors": [{"cel": {}}]}}
    code, answer = call(server, "POST", path, bad)
    assert code == 422
    assert "spec.selectors[0].cel" in answer["message"] and "expression" in answer["message"]


def test_one_object_served_in_every_version() -> None:
    server = FakeApiServer(release="1.34")
    slice_ = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "n",
            "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"index": {"int": 0}}}],
        },
    }
    assert call(server, "POST", "/apis/resource.k8s.io/v1/resourceslices", slice_)[0] == 201
    _, beta1 = call(server, "GET", "/apis/resource.k8s.io/v1beta1/resourceslices/s")
    assert beta1["spec"]["devices"] == [
        {"name": "gpu-0", "basic": {"attributes": {"index": {"int": 0}}}}
    ]
    _, beta2 = call(server, "GET", "/apis/resource.k8s.io/v1beta2/resourceslices/s")
    assert beta2["spec"]["devices"] == slice_["spec"]["devices"]


def test_selectors_as_the_api_server_parses_them() -> None:
    server = FakeApiServer()
    for name, labels in (("a", {"zone": "z1", "gpu": "true"}), ("b", {"zone": "z2"}), ("c", {})):
        call(server, "POST", "/api/v1/nodes", {"metadata": {"name": name, "labels": labels}})

    def names(query: str) -> list[str]:
        code, answer = call(server, "GET", "/api/v1/nodes?" + query)
        assert code == 200, answer
        return [i["metadata"]["name"] for i in answer["items"]]

    assert names("labelSelector=zone+in+(z1,z3),gpu") == ["a"]
    assert names("labelSelector=zone+notin+(z1)") == ["b", "c"]
    assert names("labelSelector=!zone") == ["c"]
    assert names("fieldSelector=metadata.name%3Db") == ["b"]
    assert names("fieldSelector=spec.unschedulable%3Dfalse") == ["a", "b", "c"]
    code, answer = call(server, "GET", "/api/v1/nodes?fieldSelector=spec.nodeName%3Dx")
    assert (code, answer["message"]) == (400, "field label not supported: spec.nodeName")
    code, _ = call(server, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dx")
    assert code == 200  # pods do select on spec.nodeName


def test_pages_come_from_one_snapshot() -> None:
    server = FakeApiServer()
    for i in range(5):
        call(server, "POST", "/api/v1/namespaces/ns/configmaps", {"metadata": {"name": f"c{i}"}})
    _, first = call(server, "GET", "/api/v1/namespaces/ns/configmaps?limit=2")
    assert [i["metadata"]["name"] for i in first["items"]] == ["c0", "c1"]
    assert first["metadata"]["remainingItemCount"] == 3
    call(server, "DELETE", "/api/v1/namespaces/ns/configmaps/c3")  # after the first page
    token = first["metadata"]["continue"]
    _, rest = call(server, "GET", f"/api/v1/namespaces/ns/configmaps?limit=10&continue={token}")
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c2", "c3", "c4"]
    assert rest["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    server.compact()
    code, answer = call(server, "GET", f"/api/v1/namespaces/ns/configmaps?continue={token}")
    assert (code, answer["reason"]) == (410, "Expired")


def _watch_lines(server: FakeApiServer, query: str, count: int) -> list[dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", int(server.url.rsplit(":", 1)[1]), timeout=5)
    conn.request("GET", "/api/v1/nodes?watch=true&" + query)
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Transfer-Encoding") == "chunked"
    events = [json.loads(response.readline()) for _ in range(count)]
    conn.close()
    return events


def test_watch_streams_bookmarks_selector_transitions_and_410() -> None:
    server = FakeApiServer(bookmark_interval_s=0.05).start()
    try:
        call(server, "POST", "/api/v1/nodes", {"metadata": {"name": "a", "labels": {"x": "1"}}})
        rv = server.resource_version
        path = "/api/v1/nodes/a"
        call(
            server,
            "PATCH",
            path,
            {"metadata": {"labels": {"x": None}}},
            "application/merge-patch+json",
        )
        call(
            server,
            "PATCH",
            path,
            {"metadata": {"labels": {"x": "1"}}},
            "application/merge-patch+json",
        )
        events = _watch_lines(
            server, f"labelSelector=x%3D1&resourceVersion={rv}&allowWatchBookmarks=true", 3
        )
        assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
            ("DELETED", "a"),  # it left the selector
            ("ADDED", "a"),  # and came back
            ("BOOKMARK", None),
        ]
        assert events[2]["object"]["metadata"]["resourceVersion"] == str(server.resource_version)
        server.compact()
        (expired,) = _watch_lines(server, f"resourceVersion={rv}", 1)
        assert expired["type"] == "ERROR" and expired["object"]["code"] == 410
        assert expired["object"]["reason"] == "Expired"
    finally:
        server.stop()


def test_apply_conflicts_unless_forced_and_status_is_its_own() -> None:
    server = FakeApiServer()
    base = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c"
    apply = "application/apply-patch+yaml"
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "labels": {"owner": "kgpu"}},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "a"}}]}},
    }
    code, _ = call(server, "PATCH", base, claim, apply)
    assert code == 400  # apply needs a field manager
    assert call(server, "PATCH", base + "?fieldManager=kgpu", claim, apply)[0] == 200
    other = {**claim, "metadata": {"name": "c", "labels": {"owner": "someone"}}}
    code, answer = call(server, "PATCH", base + "?fieldManager=other", other, apply)
    assert (code, answer["reason"]) == (409, "Conflict")
    assert 'conflict with "kgpu": .metadata.labels.owner' in answer["message"]
    code, forced = call(server, "PATCH", base + "?fieldManager=other&force=true", other, apply)
    assert code == 200 and forced["metadata"]["labels"] == {"owner": "someone"}
    # status: ignored on the object, the only thing a status write changes
    status = {"allocation": {"devices": {"results": []}}}
    _, put = call(server, "PUT", base, {**forced, "status": status})
    assert "status" not in put
    _, patched = call(
        server,
        "PATCH",
        base + "/status",
        {"status": status, "spec": {}},
        "application/merge-patch+json",
    )
    assert patched["status"] == status and patched["spec"] == claim["spec"]
    stale = {**forced, "metadata": {**forced["metadata"], "resourceVersion": "1"}}
    assert call(server, "PUT", base, stale)[1]["reason"] == "Conflict"


@pytest.mark.rbac_exempt("requests sent by hand under the agent's name, not by the agent")
def test_requests_are_recorded_as_rbac_sees_them() -> None:
    server = FakeApiServer()
    call(server, "GET", "/apis/resource.k8s.io", agent="kgpu-agent/0.1")
    call(server, "POST", "/api/v1/nodes", {"metadata": {"name": "n"}}, agent="kgpu-agent/0.1")
    call(server, "GET", "/api/v1/nodes?watch=1", agent="kgpu-agent/0.1")
    merge = "application/merge-patch+json"
    call(server, "PATCH", "/api/v1/nodes/n/status", {"status": {}}, merge, agent="kgpu-agent/0.1")
    call(server, "DELETE", "/api/v1/nodes/n", agent="kubectl/1.34")
    assert server.rules("kgpu-agent") == {
        ("", "nodes", "create"),
        ("", "nodes", "watch"),
        ("", "nodes/status", "patch"),
    }
    assert ("", "nodes", "delete") in server.rules()
    discovery = server.requests[0]
    assert discovery.rule is None and discovery.user_agent == "kgpu-agent/0.1"


@pytest.mark.parametrize(
    "content_type", ["application/json-patch+json", "application/strategic-merge-patch+json"]
)
def test_patch_types_kgpu_never_sends_are_415(content_type: str) -> None:
    server = FakeApiServer()
    call(server, "POST", "/api/v1/nodes", {"metadata": {"name": "n"}})
    code, answer = call(server, "PATCH", "/api/v1/nodes/n", {"a": 1}, content_type)
    assert (code, answer["reason"]) == (415, "UnsupportedMediaType")
