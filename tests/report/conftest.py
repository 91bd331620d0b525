"""Fixtures for the report tests; the headless browser lives in ``headless_browser`` (a
module name no other test directory uses, so these tests import it beside another
directory's ``conftest``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from headless_browser import Browser, find_browser  # type: ignore[import-not-found]


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    binary = find_browser()
    with tempfile.TemporaryDirectory(prefix="kgpu-chromium-") as profile:
        yield Browser(binary, Path(profile))
