"""Fixtures for the kubelet DRA plugin tests: a MIG-partitioned DGX H100 node and claims."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from dra_kubelet_helpers import NODE

from kgpu.hardware.mig import apply_layout
from kgpu.hardware.model import Machine
from kgpu.hardware.profiles import load_machine
from kgpu.store import MemoryStore


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory under /tmp: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="kd", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def machine() -> Machine:
    """8 H100s; GPU 0 split into seven 1g.10gb MIG devices."""
    return apply_layout(load_machine("dgx-h100", hostname=NODE), {0: {"1g.10gb": 7}})


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()
