"""A node for the agent's reliability tests, chaos run and benchmarks: a simulated
``dgx-h100`` split into four resources by time-slicing (no acceptance inputs needed):
``nvidia.com/gpu`` (GPUs 6-7, whole), ``nvidia.com/gpu.a`` (0-1), ``.b`` (2-3) and ``.c``
(4-5), two replicas each.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MACHINE = "dgx-h100"
NODE = "rig"
RESOURCES = ["nvidia.com/gpu", "nvidia.com/gpu.a", "nvidia.com/gpu.b", "nvidia.com/gpu.c"]
#: GPU index -> the resource its replicas are advertised under
GPU_RESOURCE = {0: "nvidia.com/gpu.a", 1: "nvidia.com/gpu.a", 2: "nvidia.com/gpu.b",
                3: "nvidia.com/gpu.b", 4: "nvidia.com/gpu.c", 5: "nvidia.com/gpu.c",
                6: "nvidia.com/gpu", 7: "nvidia.com/gpu"}  # fmt: skip

SPLIT = """\
version: v1
sharing:
  timeSlicing:
    resources:
    - {{name: nvidia.com/gpu, rename: nvidia.com/gpu.a, devices: [0, 1], replicas: {replicas}}}
    - {{name: nvidia.com/gpu, rename: nvidia.com/gpu.b, devices: [2, 3], replicas: 2}}
    - {{name: nvidia.com/gpu, rename: nvidia.com/gpu.c, devices: [4, 5], replicas: 2}}
"""


def split_config(replicas_a: int = 2) -> str:
    """The four-resource config; ``replicas_a`` changes ``nvidia.com/gpu.a`` only."""
    return SPLIT.format(replicas=replicas_a)


@contextmanager
def short_root(prefix: str = "kgr") -> Iterator[Path]:
    """A kubelet root under /tmp: unix socket paths are limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def gpu_uuids() -> list[str]:
    """The node's GPU UUIDs by index (simulated UUIDs depend on the node name)."""
    from kgpu.hardware.profiles import load_machine

    return [g.uuid for g in load_machine(MACHINE, hostname=NODE).gpus]


def replicas_of(devices: dict[str, str], uuid: str) -> dict[str, str]:
    """The entries of a kubelet device list (id -> health) that are GPU ``uuid`` or its
    replicas (``<uuid>::<n>``)."""
    return {i: h for i, h in devices.items() if i == uuid or i.startswith(uuid + "::")}
