"""An in-process agent and the fake kubelet on real unix sockets, on the four-resource node
of :mod:`kgpu.testing.split_node` (a test helper: the ``testing`` package may not import the
agent; ``bench/agent.py`` imports this file too).

:meth:`AgentRig.unhealthy_after_xid` measures what the health figures are about: an XID
injected into the backend until the fake kubelet's ListAndWatch stream shows every replica of
that GPU Unhealthy.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.split_node import (
    GPU_RESOURCE,
    MACHINE,
    NODE,
    RESOURCES,
    replicas_of,
    split_config,
)


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
        return replicas_of(self.kubelet.devices(GPU_RESOURCE[gpu]), uuid)

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
