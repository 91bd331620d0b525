"""Shared test fixtures: where the acceptance inputs live."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
ACCEPTANCE = SHARED / "acceptance"


@pytest.fixture(scope="session")
def acceptance() -> Path:
    """The outside inputs under ../shared/acceptance, loaded unchanged."""
    if not ACCEPTANCE.is_dir():
        pytest.fail(f"{ACCEPTANCE} is missing: CI runs with ../shared beside the clone")
    return ACCEPTANCE
