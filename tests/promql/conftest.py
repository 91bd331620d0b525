"""Session fixtures of the PromQL tests: the sample history and a Prometheus holding it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from promql_backfill import PrometheusAPI, build_history, start_prometheus

from kgpu.promql import History


@pytest.fixture(scope="session")
def diff_history() -> History:
    return build_history()


@pytest.fixture(scope="session")
def prometheus_api(
    diff_history: History, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusAPI]:
    with start_prometheus(diff_history, tmp_path_factory.mktemp("prometheus")) as api:
        yield api
