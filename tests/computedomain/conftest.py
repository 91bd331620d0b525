"""Fixtures for the ComputeDomain tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cd_cluster import MiniCluster  # type: ignore[import-not-found]


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Any:
    def make(cliques: dict[str, int]) -> MiniCluster:
        return MiniCluster(tmp_path / "nodes", cliques)

    return make
