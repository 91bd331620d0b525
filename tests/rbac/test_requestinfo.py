"""The stand-in classifies requests as kube-apiserver's authorizer does: upstream's own table
(data/requestinfo.yaml), and a request for an API the server does not serve still recorded
with its resource (RBAC decides before the 404)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kgpu.testing.apiserver import FakeApiServer
from kgpu.testing.apiserver.requestinfo import RequestInfo, request_info

TABLE = yaml.safe_load((Path(__file__).parent / "data" / "requestinfo.yaml").read_text())


@pytest.mark.parametrize("case", TABLE["resource"], ids=lambda c: f"{c[0]} {c[1]}")
def test_resource_requests_classify_as_upstream_does(case: list[str]) -> None:
    method, url, verb, group, version, namespace, resource, sub, name = case
    assert request_info(method, url) == RequestInfo(
        verb, group, version, resource, sub, namespace, name
    )


@pytest.mark.parametrize("url", TABLE["non_resource"])
def test_non_resource_urls_are_not_resource_requests(url: str) -> None:
    info = request_info("GET", url)
    assert not info.is_resource and info.verb == "get"


def test_a_request_for_an_api_the_server_does_not_serve_is_recorded_with_its_resource() -> None:
    server = FakeApiServer()
    code, _ = server.handle(
        "GET",
        "/apis/gadgets.example.com/v1/namespaces/kgpu-system/gadgets?watch=true",
        b"",
        {"user-agent": "test-client/1.0"},
    )
    assert code == 404
    (rec,) = server.requests
    assert (rec.verb, rec.group, rec.resource, rec.namespace) == (
        "watch",
        "gadgets.example.com",
        "gadgets",
        "kgpu-system",
    )
    assert server.rules("test-client") == {("gadgets.example.com", "gadgets", "watch")}
