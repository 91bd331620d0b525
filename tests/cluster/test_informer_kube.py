"""Informers through :class:`KubeStore` over HTTP: what a component sees when the API server
restarts, drops a watch mid-stream, or compacts its history, and what each costs in requests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.cluster.kube import KubeStore
from kgpu.store import Backoff, Informer, Scope
from kgpu.testing.apiserver import FakeApiServer

from .conftest import TEST_CLIENT, TOKEN, write_kubeconfig

AUTH = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    fake = FakeApiServer(token=TOKEN, bookmark_interval_s=0.1).start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def kube(server: FakeApiServer, tmp_path: Path) -> Iterator[KubeStore]:
    store = KubeStore.from_config(
        str(write_kubeconfig(tmp_path / "kubeconfig", server.url)),
        qps=None,
        page_size=2,
        user_agent=TEST_CLIENT,
    )
    try:
        yield store
    finally:
        store.close()


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def _until(cond: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def _names(informer: Informer) -> list[str]:
    return [o["metadata"]["name"] for o in informer.list()]


@pytest.fixture
def informer(kube: KubeStore, server: FakeApiServer) -> Iterator[Callable[..., Informer]]:
    started: list[Informer] = []

    def start(**labels: str) -> Informer:
        inf = Informer(
            kube, Scope.of("v1", "Node", labels=labels or None), backoff=Backoff(0.02, 0.1)
        )
        inf.start()
        started.append(inf)
        assert inf.wait_synced(10)
        assert _until(lambda: server.open_watches() == len(started))  # listed, now watching
        return inf

    yield start
    for inf in started:
        inf.stop()


def _server_write(server: FakeApiServer, method: str, path: str, body: dict[str, Any]) -> None:
    import json

    code, answer = server.handle(method, path, json.dumps(body).encode(), AUTH)
    assert code < 300, answer


def test_lists_in_pages_then_watches_from_the_lists_version(
    server: FakeApiServer, kube: KubeStore, informer: Callable[..., Informer]
) -> None:
    for i in range(5):
        kube.create(_node(f"n{i}", gpu="yes"))
    kube.create(_node("cpu"))
    server.requests.clear()
    inf = informer(gpu="yes")
    assert _names(inf) == [f"n{i}" for i in range(5)]
    lists = [r for r in server.requests if r.verb == "list"]
    assert [r.query.get("continue", "") != "" for r in lists] == [False, True, True]
    assert all(r.query["labelSelector"] == "gpu=yes" and r.query["limit"] == "2" for r in lists)
    (watch,) = [r for r in server.requests if r.verb == "watch"]
    assert watch.query["resourceVersion"] == str(server.resource_version)  # the list's
    assert watch.query["allowWatchBookmarks"] == "true"
    assert 300 <= int(watch.query["timeoutSeconds"]) < 600


def test_a_watch_dropped_mid_stream_resumes_without_a_list(
    server: FakeApiServer, kube: KubeStore, informer: Callable[..., Informer]
) -> None:
    kube.create(_node("a"))
    inf = informer()
    assert server.drop_watches() == 1
    kube.create(_node("b"))
    kube.delete("v1", "Node", "a")
    assert _until(lambda: _names(inf) == ["b"])
    assert inf.stats.lists == 1 and inf.stats.watches == 2


def test_a_restarted_server_is_relisted_and_changes_made_meanwhile_arrive(
    server: FakeApiServer, kube: KubeStore, informer: Callable[..., Informer]
) -> None:
    kube.create(_node("a"))
    kube.create(_node("b"))
    inf = informer()
    deleted: list[str] = []
    inf.add_handler(on_delete=lambda o: deleted.append(o["metadata"]["name"]))
    server.stop()  # while it is down, another client changes the cluster (etcd keeps it)
    _server_write(server, "POST", "/api/v1/nodes", _node("c"))
    code, _ = server.handle("DELETE", "/api/v1/nodes/a", b"", AUTH)
    assert code == 200
    server.restart()  # a fresh watch cache: the informer's version is too old -> 410 -> list
    assert _until(lambda: _names(inf) == ["b", "c"])
    assert deleted == ["a"]
    assert inf.stats.lists == 2


def test_compaction_means_a_relist_unless_bookmarks_kept_the_version_fresh(
    server: FakeApiServer, kube: KubeStore, informer: Callable[..., Informer]
) -> None:
    kube.create(_node("a", pool="x"))
    inf = informer(pool="x")
    # writes the informer does not see (another label) move the server's version on; a
    # bookmark brings the informer's version along without any event
    kube.create(_node("other"))
    assert _until(lambda: inf.resource_version == str(server.resource_version))
    server.compact()
    server.drop_watches()
    kube.create(_node("b", pool="x"))
    assert _until(lambda: _names(inf) == ["a", "b"])
    assert inf.stats.lists == 1  # resumed from the bookmark's version: no relist

    # without a fresh version (bookmarks far apart), the same compaction costs one relist
    server.bookmark_interval_s = 3600
    server.drop_watches()
    assert _until(lambda: server.open_watches() == 1)
    kube.create(_node("c"))  # unseen: the informer's version falls behind
    server.compact()
    server.drop_watches()
    kube.create(_node("d", pool="x"))
    assert _until(lambda: _names(inf) == ["a", "b", "d"])
    assert inf.stats.lists == 2 and inf.stats.failures == 1


def test_a_continue_token_that_expired_between_pages_restarts_the_list(
    server: FakeApiServer, kube: KubeStore
) -> None:
    for i in range(5):
        kube.create(_node(f"n{i}"))
    pages = []

    def compact_after_first_page(rec: Any) -> None:
        if rec.verb == "list":
            pages.append(rec.query.get("continue", ""))
            if len(pages) == 2:
                server.compact()

    server.on_request = compact_after_first_page
    listed = kube.list("v1", "Node")
    assert [n["metadata"]["name"] for n in listed] == [f"n{i}" for i in range(5)]
    assert len(pages) == 3 and pages[1] and not pages[2]  # page 1, expired page 2, whole list
