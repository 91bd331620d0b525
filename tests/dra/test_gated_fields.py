"""``DRAConsumableCapacity``'s fields dropped on write while the gate is off
(:mod:`kgpu.dra.gated_fields`, kube-apiserver's ``dropDisabledFields``), in every served shape,
and the API-server stand-in storing claims and templates the way a real 1.35 server does."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.cluster.kube import KubeStore
from kgpu.dra.gated_fields import drop_disabled
from kgpu.testing.apiserver import FakeApiServer, write_kubeconfig


def off(_gate: str) -> bool:
    return False


def on(_gate: str) -> bool:
    return True


def _claim(request: dict[str, Any], **status: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {
            "devices": {
                "requests": [request],
                "constraints": [{"requests": ["gpu"], "distinctAttribute": "gpu.nvidia.com/uuid"}],
            }
        },
    }
    if status:
        obj["status"] = status
    return obj


V1 = {
    "name": "gpu",
    "exactly": {"deviceClassName": "g", "capacity": {"requests": {"memory": "20Gi"}}},
}
V1BETA1 = {"name": "gpu", "deviceClassName": "g", "capacity": {"requests": {"memory": "20Gi"}}}
SUBS = {
    "name": "gpu",
    "firstAvailable": [
        {"name": "big", "deviceClassName": "g", "capacity": {"requests": {"memory": "40Gi"}}},
        {"name": "small", "deviceClassName": "g"},
    ],
}
ALLOCATED = {
    "allocation": {
        "devices": {
            "results": [
                {
                    "request": "gpu",
                    "driver": "gpu.nvidia.com",
                    "pool": "n",
                    "device": "gpu-0",
                    "shareID": "2f6a1d7e-58a4-4c1e-9c9d-0d3c2a8b1f10",
                    "consumedCapacity": {"memory": "20Gi"},
                }
            ]
        }
    }
}


@pytest.mark.parametrize("request_", [V1, V1BETA1, SUBS], ids=["v1", "v1beta1", "subrequests"])
def test_a_claim_loses_capacity_requests_and_distinct_attributes(request_: dict[str, Any]) -> None:
    claim = _claim(copy.deepcopy(request_), **ALLOCATED)
    before = copy.deepcopy(claim)
    stored = drop_disabled("ResourceClaim", claim, None, off)
    assert claim == before  # what it was given is not changed (a store shares small maps)
    (request,) = stored["spec"]["devices"]["requests"]
    assert "capacity" not in request and "capacity" not in request.get("exactly", {})
    assert all("capacity" not in s for s in request.get("firstAvailable", []))
    assert [s["name"] for s in request.get("firstAvailable", [])] == [
        s["name"] for s in request_.get("firstAvailable", [])
    ]
    assert stored["spec"]["devices"]["constraints"] == [{"requests": ["gpu"]}]
    (result,) = stored["status"]["allocation"]["devices"]["results"]
    assert set(result) == {"request", "driver", "pool", "device"}
    assert drop_disabled("ResourceClaim", claim, None, on) is claim  # gate on: kept


def test_fields_in_use_before_the_write_are_kept_and_nothing_to_drop_is_the_same_object() -> None:
    old = _claim(copy.deepcopy(V1))
    new = copy.deepcopy(old)
    assert drop_disabled("ResourceClaim", new, old, off) is new  # in use: an update keeps them
    plain = {"kind": "ResourceClaim", "spec": {"devices": {"requests": [{"name": "g"}]}}}
    assert drop_disabled("ResourceClaim", plain, None, off) is plain
    pod = {"kind": "Pod", "spec": {"devices": {"requests": [V1BETA1]}}}
    assert drop_disabled("Pod", pod, None, off) is pod


def test_a_template_loses_them_under_spec_spec() -> None:
    template = {
        "kind": "ResourceClaimTemplate",
        "spec": {"spec": _claim(copy.deepcopy(V1))["spec"]},
    }
    stored = drop_disabled("ResourceClaimTemplate", template, None, off)
    assert stored["spec"]["spec"]["devices"]["requests"][0]["exactly"] == {"deviceClassName": "g"}


@pytest.mark.parametrize("v1beta1", [False, True])
def test_a_slice_loses_multiple_allocations_and_request_policies(v1beta1: bool) -> None:
    body = {
        "allowMultipleAllocations": True,
        "capacity": {"memory": {"value": "80Gi", "requestPolicy": {"default": "80Gi"}}},
    }
    device = {"name": "gpu-0", "basic": body} if v1beta1 else {"name": "gpu-0", **body}
    slice_ = {"kind": "ResourceSlice", "spec": {"devices": [device]}}
    (stored,) = drop_disabled("ResourceSlice", slice_, None, off)["spec"]["devices"]
    got = stored["basic"] if v1beta1 else stored
    assert "allowMultipleAllocations" not in got
    assert got["capacity"] == {"memory": {"value": "80Gi"}}
    assert "allowMultipleAllocations" in (device["basic"] if v1beta1 else device)


@pytest.fixture
def kube_at(tmp_path: Path) -> Iterator[Any]:
    opened: list[tuple[FakeApiServer, KubeStore]] = []

    def connect(release: str, **gates: bool) -> KubeStore:
        server = FakeApiServer(release=release, feature_gates=dict(gates)).start()
        config = write_kubeconfig(tmp_path / f"kc-{len(opened)}", server.url)
        store = KubeStore.from_config(str(config), user_agent="test-client/1.0")
        opened.append((server, store))
        return store

    yield connect
    for server, store in opened:
        store.close()
        server.stop()


@pytest.mark.parametrize(
    ("api", "request_"),
    [
        ("resource.k8s.io/v1", V1),
        ("resource.k8s.io/v1beta2", V1),
        ("resource.k8s.io/v1beta1", V1BETA1),
    ],
)
def test_the_stand_in_at_1_35_stores_a_claim_without_its_capacity_request(
    kube_at: Any, api: str, request_: dict[str, Any]
) -> None:
    store = kube_at("1.35")
    claim = {
        **_claim(copy.deepcopy(request_)),
        "apiVersion": api,
        "metadata": {"name": "c", "namespace": "default"},
    }
    store.create(claim)
    (request,) = store.get("resource.k8s.io/v1", "ResourceClaim", "c", "default")["spec"][
        "devices"
    ]["requests"]
    assert "capacity" not in request["exactly"]
    assert request["exactly"]["deviceClassName"] == "g"
    template = {
        "apiVersion": api,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"spec": copy.deepcopy(claim["spec"])},
    }
    store.create(template)
    stored = store.get("resource.k8s.io/v1", "ResourceClaimTemplate", "t", "default")
    assert "capacity" not in stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert "distinctAttribute" not in stored["spec"]["spec"]["devices"]["constraints"][0]


@pytest.mark.parametrize(
    ("release", "gates"), [("1.35", {"DRAConsumableCapacity": True}), ("1.36", {})]
)
def test_the_stand_in_keeps_them_with_the_gate(
    kube_at: Any, release: str, gates: dict[str, bool]
) -> None:
    store = kube_at(release, **gates)
    claim = {
        **_claim(copy.deepcopy(V1)),
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"name": "c", "namespace": "default"},
    }
    store.create(claim)
    stored = store.get("resource.k8s.io/v1", "ResourceClaim", "c", "default")
    assert stored["spec"]["devices"]["requests"][0]["exactly"]["capacity"] == {
        "requests": {"memory": "20Gi"}
    }
    assert stored["spec"]["devices"]["constraints"][0]["distinctAttribute"] == "gpu.nvidia.com/uuid"
