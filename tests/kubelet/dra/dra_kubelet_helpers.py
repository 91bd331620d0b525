"""Helpers shared by the kubelet DRA plugin tests (a uniquely named module: the suite's test
folders are not packages, so ``conftest`` would be ambiguous to import from)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kgpu.store import MemoryStore

NODE = "node-a"


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
