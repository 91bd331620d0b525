"""Fixtures for the kubelet DRA plugin tests: a MIG-partitioned DGX H100 node and claims."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kgpu.cluster.store import MemoryStore
from kgpu.hardware.mig import apply_layout
from kgpu.hardware.model import Machine
from kgpu.hardware.profiles import load_machine

NODE = "node-a"


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


def gpu_config(**sharing: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": sharing}


def make_claim(
    store: MemoryStore,
    name: str,
    devices: Sequence[tuple[str, str]],
    configs: Sequence[tuple[Sequence[str], Any]] = (),
    *,
    driver: str = "gpu.nvidia.com",
    pool: str = NODE,
    namespace: str = "default",
) -> dict[str, Any]:
    """An allocated ResourceClaim: ``devices`` are (request, device name) pairs, ``configs``
    (requests, opaque parameters) pairs from the claim."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": []}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": req, "driver": driver, "pool": pool, "device": dev}
                        for req, dev in devices
                    ],
                    "config": [
                        {
                            "source": "FromClaim",
                            "requests": list(reqs),
                            "opaque": {"driver": driver, "parameters": params},
                        }
                        for reqs, params in configs
                    ],
                }
            }
        },
    }
    return store.create(claim)


def ref_of(claim: dict[str, Any]) -> tuple[str, str, str]:
    meta = claim["metadata"]
    return (meta["namespace"], meta["uid"], meta["name"])
