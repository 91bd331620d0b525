"""An in-process agent and the fake kubelet on real unix sockets, for reliability tests,
the chaos run and the agent benchmarks.

The node is a simulated ``dgx-h100`` split into four resources by time-slicing (no acceptance
inputs needed): ``nvidia.com/gpu`` (GPUs 6-7), ``nvidia.com/gpu.a`` (0-1), ``.b`` (2-3) and
``.c`` (4-5), two replicas each. :meth:`AgentRig.unhealthy_after_xid` measures what the health
figures are about: an XID injected into the backend until the fake kubelet's ListAndWatch
stream shows every replica of that GPU Unhealthy.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.testing.fake_kubelet import FakeKubelet

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


class AgentRig:
    """One kubelet root with a fake kubelet and (once started) an in-process agent."""

    def __init__(self, root: Path, **options: Any) -> None:
        self.root = root
        self.config = root / "split.yaml"
        self.config.write_text(split_config())
        self.fault_dir = root / "faults"
        self.fault_dir.mkdir(exist_ok=True)
        self.kubelet = FakeKubelet(root, hang_limit_s=10.0)
        self.backend = SimulatedBackend(load_machine(MACHINE, hostname=NODE))
        self.options = AgentOptions(
            machine=MACHINE,
            config_files=(self.config,),
            node_name=NODE,
            kubelet_root=root,
            dra=False,
            fault_dir=self.fault_dir,
            status_file=root / "status.json",
            **options,
        )
        self.agent: Agent | None = None

    def start(self) -> AgentRig:
        self.kubelet.start()
        self.agent = Agent(self.options, backend=self.backend)
        self.agent.start()
        return self

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None
        self.kubelet.stop()

    def __enter__(self) -> AgentRig:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what the kubelet sees ------------------------------------------------------------------

    def serving(self, timeout_s: float = 10.0, resources: list[str] = RESOURCES) -> bool:
        """Every resource registered, streaming and listing only Healthy devices."""
        kubelet = self.kubelet
        return kubelet.wait_for(
            lambda: (
                kubelet.resources() == resources
                and all(
                    kubelet.devices(r) and set(kubelet.devices(r).values()) == {"Healthy"}
                    for r in resources
                )
            ),
            timeout_s,
        )

    def replicas(self, gpu: int) -> dict[str, str]:
        uuid = self.backend.machine.gpus[gpu].uuid
        devices = self.kubelet.devices(GPU_RESOURCE[gpu])
        return {i: h for i, h in devices.items() if i == uuid or i.startswith(uuid + "::")}

    def unhealthy_after_xid(self, gpu: int, timeout_s: float = 10.0) -> float:
        """Seconds from an XID 79 on ``gpu`` until the kubelet lists its replicas Unhealthy
        (``inf`` when it did not within ``timeout_s``)."""
        started = time.perf_counter()
        self.backend.inject_xid(gpu, 79)
        seen = self.kubelet.wait_for(
            lambda: bool(self.replicas(gpu)) and set(self.replicas(gpu).values()) == {"Unhealthy"},
            timeout_s,
        )
        return time.perf_counter() - started if seen else float("inf")
