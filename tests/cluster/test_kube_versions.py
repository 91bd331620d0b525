"""The API version negotiated with each Kubernetes release: kgpu speaks resource.k8s.io v1
inside and whatever the server serves newest on the wire (1.32: v1beta1, 1.33: v1beta2,
1.34/1.35: v1), and the objects it sends pass that release's official schema."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kgpu.cluster.kube import KubeApiError, KubeStore
from kgpu.dra.classes import device_classes
from kgpu.dra.slices import resource_slices
from kgpu.hardware.profiles import load_machine
from kgpu.testing.apiserver import KINDS, RELEASES, FakeApiServer

from .conftest import TEST_CLIENT, TOKEN, write_kubeconfig

API = "resource.k8s.io/v1"


@pytest.fixture(params=sorted(RELEASES))
def release(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def served(release: str, tmp_path: Path) -> Iterator[tuple[FakeApiServer, KubeStore]]:
    server = FakeApiServer(token=TOKEN, release=release).start()
    store = KubeStore.from_config(
        str(write_kubeconfig(tmp_path / "kc", server.url)), qps=None, user_agent=TEST_CLIENT
    )
    try:
        yield server, store
    finally:
        store.close()
        server.stop()


def test_slices_classes_and_claims_travel_in_the_newest_served_version(
    served: tuple[FakeApiServer, KubeStore], release: str
) -> None:
    server, store = served
    wire = RELEASES[release][0]
    assert store.resource_api_version() == wire
    machine = load_machine("gb200", hostname="n1", clique="c0ffee00-0000-4000-8000-000000000001.3")
    (slice_,) = resource_slices(machine, "n1")
    written = store.apply(slice_)
    assert written["apiVersion"] == API  # the caller sees the internal form
    assert written["spec"] == slice_["spec"]
    for cls in device_classes():
        store.create(cls)
    claim = {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ml"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
    }
    store.create(claim)
    allocation = {
        "devices": {
            "results": [
                {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
            ]
        }
    }
    store.patch(API, "ResourceClaim", "c", {"status": {"allocation": allocation}}, "ml", "status")
    read = store.get(API, "ResourceClaim", "c", "ml")
    assert read["spec"] == claim["spec"] and read["status"]["allocation"] == allocation
    listed = store.list(API, "ResourceSlice", fields={"spec.nodeName": "n1"})
    assert [s["spec"]["devices"] for s in listed] == [slice_["spec"]["devices"]]
    dra_paths = {r.path.split("/")[3] for r in server.requests if r.group == "resource.k8s.io"}
    assert dra_paths == {wire}  # every DRA request went to the negotiated version
    discovery = [r.path for r in server.requests if r.path == "/apis/resource.k8s.io"]
    assert discovery == ["/apis/resource.k8s.io"]  # discovered once


def test_watch_events_arrive_in_the_internal_form(
    served: tuple[FakeApiServer, KubeStore],
) -> None:
    _, store = served
    rv = store.list(API, "ResourceSlice").resource_version
    watch = store.watch(API, "ResourceSlice", resource_version=rv)
    machine = load_machine("gb200", hostname="n1", clique="c0ffee00-0000-4000-8000-000000000001.3")
    (slice_,) = resource_slices(machine, "n1")
    store.apply(slice_)
    event = watch.next(5)
    watch.stop()
    assert event is not None and event.type == "ADDED"
    assert event.object["apiVersion"] == API
    assert event.object["spec"]["devices"] == slice_["spec"]["devices"]


def test_a_server_without_dra_is_a_clear_error(tmp_path: Path) -> None:
    """Kubernetes 1.31 or DRA switched off: no resource.k8s.io version kgpu speaks."""
    kinds = tuple(k for k in KINDS if k.group != "resource.k8s.io")
    server = FakeApiServer(kinds=kinds).start()
    store = KubeStore.from_config(
        str(write_kubeconfig(tmp_path / "kc", server.url)), qps=None, user_agent=TEST_CLIENT
    )
    try:
        with pytest.raises(KubeApiError, match=r"Kubernetes 1\.32 or newer") as err:
            store.list(API, "ResourceSlice")
        assert err.value.code == 404
    finally:
        store.close()
        server.stop()
