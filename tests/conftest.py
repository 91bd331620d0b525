"""Shared test fixtures: where the acceptance inputs live; the session-wide RBAC check.

The acceptance inputs (``../shared/acceptance``) come from outside this project and sit beside a
checkout in CI. A plain clone has no ``../shared``: the tests that read them skip, saying why,
and every other test still runs. ``KGPU_REQUIRE_ACCEPTANCE=1`` turns the skip into a failure
(for a CI that must prove the acceptance rows ran).

Every request kgpu's processes make against the API-server stand-in, in any test, is checked
at the end of the run against the Helm chart's roles for that process (tests/rbac/plugin.py):
a request the chart does not grant fails the run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from rbac.plugin import RbacCheck, add_options

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
ACCEPTANCE = SHARED / "acceptance"
MISSING = f"needs the acceptance inputs in {ACCEPTANCE} (absent in a plain clone)"


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(RbacCheck(config), "kgpu-rbac")


def require_acceptance() -> Path:
    """The acceptance directory, or skip (fail with KGPU_REQUIRE_ACCEPTANCE=1)."""
    if not ACCEPTANCE.is_dir():
        if os.environ.get("KGPU_REQUIRE_ACCEPTANCE") == "1":
            pytest.fail(MISSING)
        pytest.skip(MISSING)
    return ACCEPTANCE


@pytest.fixture(scope="session")
def acceptance() -> Path:
    """The outside inputs under ../shared/acceptance, loaded unchanged."""
    return require_acceptance()


@pytest.fixture
def root() -> Iterator[Path]:
    """A fresh directory right under /tmp for a test's kubelet root, sockets and files, removed
    after the test: unix socket paths are limited to 107 bytes, too few below pytest's tmp_path."""
    path = Path(tempfile.mkdtemp(prefix="kg", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
