"""Fixtures: a Kubernetes API server on loopback, and stores pointed at it.

``TOKEN`` and ``write_kubeconfig`` (from :mod:`kgpu.testing.apiserver`) are re-exported for the
cluster tests that import them from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kgpu.cluster.kube import KubeStore
from kgpu.testing.apiserver import TOKEN, FakeApiServer, write_kubeconfig

#: The user agent of the tests' own stores: test code, not a kgpu process, so the session's RBAC
#: check (tests/rbac/plugin.py) leaves its requests out; KubeStore's default ``kgpu/<version>``
#: would fail it as a kgpu client that names no process.
TEST_CLIENT = "test-client/1.0"


@pytest.fixture
def apiserver() -> Iterator[FakeApiServer]:
    server = FakeApiServer(token=TOKEN).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube(apiserver: FakeApiServer, tmp_path: Path) -> Iterator[KubeStore]:
    store = KubeStore.from_config(
        str(write_kubeconfig(tmp_path / "kubeconfig", apiserver.url)), user_agent=TEST_CLIENT
    )
    try:
        yield store
    finally:
        store.close()
