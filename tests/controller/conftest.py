"""Fixtures for the controller tests; the helpers live in ``controller_cluster`` (a module
name no other test directory uses, so running these tests beside another directory's
``conftest`` imports the right one)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from controller_cluster import Cluster  # type: ignore[import-not-found]

from kgpu.testing.apiserver import FakeApiServer


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    server = FakeApiServer(bookmark_interval_s=60.0).start()
    made = Cluster(server, tmp_path)
    try:
        yield made
    finally:
        made.close()
        server.stop()
