"""Republishing shared GPUs to an API server that drops ``DRAConsumableCapacity``'s fields (1.35
without the gate): the stored pool lacks ``allowMultipleAllocations`` and ``requestPolicy``, so
a comparison with what the driver wants would rewrite every slice on every publication (a new
pool generation each time, each one a write the scheduler re-reads). The publisher learns from
the server's answer what it drops and compares against that (issue 27)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kgpu.cluster.kube import KubeStore
from kgpu.dra.api import RESOURCE_API
from kgpu.dra.shares import MEMORY, SharePolicy
from kgpu.drivers.gpu import GpuHandler
from kgpu.drivers.publish import SlicePublisher
from kgpu.testing.apiserver import FakeApiServer, write_kubeconfig
from kgpu.testing.views import make_machine

NODE = "node-a"
Start = Callable[..., tuple[FakeApiServer, KubeStore]]


@pytest.fixture
def at(tmp_path: Path) -> Iterator[Start]:
    servers: list[tuple[FakeApiServer, KubeStore]] = []

    def start(release: str, **gates: bool) -> tuple[FakeApiServer, KubeStore]:
        server = FakeApiServer(release=release, feature_gates=dict(gates)).start()
        config = write_kubeconfig(tmp_path / f"kc{len(servers)}", server.url)
        store = KubeStore.from_config(str(config), user_agent="test-client/1.0")
        servers.append((server, store))
        return server, store

    yield start
    for server, store in servers:
        store.close()
        server.stop()


def _writes(server: FakeApiServer) -> int:
    return sum(
        1
        for r in server.requests
        if r.method in ("POST", "PUT", "PATCH", "DELETE") and "/resourceslices" in r.path
    )


@pytest.mark.parametrize(
    ("release", "gates", "shared"),
    [("1.35", {}, False), ("1.35", {"DRAConsumableCapacity": True}, True), ("1.36", {}, True)],
)
def test_three_publications_of_the_same_gpus_write_once(
    at: Start, tmp_path: Path, release: str, gates: dict[str, bool], shared: bool
) -> None:
    server, store = at(release, **gates)
    handler = GpuHandler(
        make_machine(2, memory_mib=81559), NODE, tmp_path, kubernetes_version=release,
        shares=SharePolicy(MEMORY),
    )  # fmt: skip
    publisher = SlicePublisher(store, NODE)
    generations = [publisher.publish(handler.driver, handler.resource_slices(NODE)) for _ in "abc"]
    assert generations == [1, 1, 1]
    assert _writes(server) == 1  # one slice, written once
    (stored,) = store.list(RESOURCE_API, "ResourceSlice")
    assert all(("allowMultipleAllocations" in d) is shared for d in stored["spec"]["devices"])


def test_a_real_change_is_still_written_where_the_server_drops_the_fields(
    at: Start, tmp_path: Path
) -> None:
    server, store = at("1.35")
    publisher = SlicePublisher(store, NODE)
    policy = SharePolicy(MEMORY)
    for gpus in (2, 2, 3):
        handler = GpuHandler(make_machine(gpus, memory_mib=81559), NODE, tmp_path, shares=policy)
        publisher.publish(handler.driver, handler.resource_slices(NODE))
    assert _writes(server) == 2
    (stored,) = store.list(RESOURCE_API, "ResourceSlice")
    assert [d["name"] for d in stored["spec"]["devices"]] == ["gpu-0", "gpu-1", "gpu-2"]
