"""MPS limits that a client cannot escape: the GPU's compute mode while its daemon serves, and the
per-client limits sent through the daemon's control pipe (issue 27, device-plugin side).

The daemon is faked (``nvidia-cuda-mps-control`` calls are intercepted); the GPUs are a
simulated machine behind the fake ``pynvml``, so the NVML backend's compute-mode calls are the
ones a real node gets. Lent GPUs are read-only, so none of this was run on hardware.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.config import load_config_strings
from kgpu.drivers import mps
from kgpu.drivers.mps import MpsManager, withhold_failed
from kgpu.hardware.backend import BackendError, ComputeMode
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.node.model import NodeView
from kgpu.node.view import build_node_view
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.fake_nvml import FakeNvml
from kgpu.testing.views import make_machine

CONFIG = """
version: v1
flags: {mpsRoot: ROOT}
sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, rename: nvidia.com/gpu.ts, devices: [0], replicas: 3}
  mps:
    resources:
    - {name: nvidia.com/gpu, devices: [1, 3], replicas: 4}
"""


class FakeDaemon:
    """``nvidia-cuda-mps-control`` over the simulated GPUs: ``-d`` starts an MPS server that
    holds its GPU, ``quit`` ends it; every call is logged in ``log`` next to the NVML calls."""

    def __init__(self, sim: SimulatedBackend, nvml: FakeNvml) -> None:
        self.sim, self.nvml = sim, nvml
        self.log: list[tuple[str, str]] = []  # (GPU UUID or "nvml", what)

    def __call__(self, args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        if args[0] == "mount":  # the shm tmpfs: an unprivileged test cannot mount
            raise subprocess.CalledProcessError(32, args)
        env = kw["env"]
        assert isinstance(env, dict)
        uuid = env["CUDA_VISIBLE_DEVICES"]
        command = "-d" if args[1:] == ["-d"] else str(kw.get("input") or "")
        self.log.extend(("nvml", c) for c in self.nvml.calls if "ComputeMode" in c)
        self.nvml.calls.clear()
        self.log.append((uuid, command))
        if command == "-d":
            self.sim.set_mps_server(uuid, 4242)
        elif command == "quit":
            self.sim.set_mps_server(uuid, None)
        return subprocess.CompletedProcess(args, 0, "", "")


def _setup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> tuple[SimulatedBackend, FakeDaemon, MpsManager]:
    sim = SimulatedBackend(load_machine("p4de.24xlarge"))
    nvml = FakeNvml(sim)
    daemon = FakeDaemon(sim, nvml)
    monkeypatch.setattr(mps.subprocess, "run", daemon)
    manager = MpsManager(use_binary=True, backend=NvmlBackend(nvml))
    manager.binary = "/usr/bin/nvidia-cuda-mps-control"
    return sim, daemon, manager


def _view(sim: SimulatedBackend, tmp_path: Path, text: str = CONFIG) -> NodeView:
    configs = load_config_strings({"c.yaml": text.replace("ROOT", str(tmp_path))})
    return build_node_view(sim.snapshot(), configs, {})


def test_a_client_that_bypasses_mps_is_refused_while_the_daemon_serves(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sim, daemon, manager = _setup(monkeypatch, tmp_path)
    sim.set_compute_mode(3, ComputeMode.PROHIBITED)  # what the node's provisioning left
    gpu1, gpu3 = (sim.snapshot().gpus[i].uuid for i in (1, 3))
    # Before kgpu: a process that dropped CUDA_MPS_PIPE_DIRECTORY gets its own context.
    sim.set_mps_server(1, 4242)
    sim.open_context(1, through_mps=False)
    sim.set_mps_server(1, None)

    manager.sync(_view(sim, tmp_path))

    assert sim.compute_mode(1) == sim.compute_mode(3) == ComputeMode.EXCLUSIVE_PROCESS
    assert sim.compute_mode(0) == ComputeMode.DEFAULT  # time-sliced: not touched
    gpu1_calls = [what for who, what in daemon.log if who in ("nvml", gpu1)][:5]
    limit = sim.snapshot().gpus[1].memory_mib // 4
    assert gpu1_calls == [
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceSetComputeMode",  # before the daemon starts, as NVIDIA's setup does
        "-d",
        f"set_default_device_pinned_mem_limit 0 {limit}M",  # the config's split, per client
        "set_default_active_thread_percentage 25",
    ]
    with pytest.raises(BackendError, match="busy or unavailable"):
        sim.open_context(1, through_mps=False)
    sim.open_context(1, through_mps=True)  # the MPS client it was given still works
    sim.open_context(0, through_mps=False)
    status = {d["gpuUuid"]: d for d in manager.status()}
    assert status[gpu1]["computeMode"] == "Exclusive_Process"
    assert status[gpu1]["previousComputeMode"] == "Default"
    assert status[gpu3]["previousComputeMode"] == "Prohibited"

    # A reload that no longer shares GPU 3 with MPS gives it back the mode it had.
    manager.sync(_view(sim, tmp_path, CONFIG.replace("devices: [1, 3]", "devices: [1]")))
    assert sim.compute_mode(3) == ComputeMode.PROHIBITED
    assert sim.compute_mode(1) == ComputeMode.EXCLUSIVE_PROCESS
    # The agent stopping quits the daemon, then restores the mode: direct use works again.
    manager.stop_all()
    assert daemon.log[-1] == (gpu1, "quit")
    assert sim.compute_mode(1) == ComputeMode.DEFAULT
    sim.open_context(1, through_mps=False)


def test_a_gpu_whose_compute_mode_cannot_be_set_gets_no_daemon_and_offers_no_replicas(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sim, daemon, manager = _setup(monkeypatch, tmp_path)
    sim.refuse_compute_mode = "not root"
    events: list[tuple[str, str, str]] = []
    manager.on_event = lambda *event: events.append(event)
    view = _view(sim, tmp_path)
    manager.sync(view)
    assert [what for who, what in daemon.log if who != "nvml"] == []  # no daemon started
    assert [d["state"] for d in manager.status()] == ["failed", "failed"]
    error = str(manager.status()[0]["error"])
    assert "Exclusive_Process" in error and "NVML_ERROR_NO_PERMISSION" in error
    assert sim.compute_mode(1) == ComputeMode.DEFAULT
    served = withhold_failed(view, manager.failed())
    mps_devices = [d for d in served.resource("nvidia.com/gpu").devices if d.mps is not None]
    assert len(mps_devices) == 8 and not any(d.healthy for d in mps_devices)
    assert all(d.healthy for d in served.resource("nvidia.com/gpu.ts").devices)
    assert [(kind, reason) for kind, reason, _ in events] == [("Warning", "MpsNotEnforced")] * 2
    assert (
        "GPU 1 (" in events[0][2] and "4 replicas of nvidia.com/gpu are Unhealthy" in events[0][2]
    )


def test_a_mode_that_cannot_be_restored_is_a_warning_with_the_command_to_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sim, _, manager = _setup(monkeypatch, tmp_path)
    events: list[tuple[str, str, str]] = []
    manager.on_event = lambda *event: events.append(event)
    manager.sync(_view(sim, tmp_path))
    sim.refuse_compute_mode = "GPU is lost"
    manager.stop_all()
    assert sim.compute_mode(1) == ComputeMode.EXCLUSIVE_PROCESS
    assert [reason for _, reason, _ in events] == ["ComputeModeNotRestored"] * 2
    assert "nvidia-smi -i 1 -c DEFAULT" in events[0][2]


def test_the_agent_does_not_advertise_mps_replicas_it_cannot_enforce(root: Path) -> None:
    """End to end through the agent and a fake kubelet: ListAndWatch reports the replicas of
    an MPS GPU whose compute mode could not be set as Unhealthy (never allocated)."""
    sim = SimulatedBackend(make_machine(2))
    sim.refuse_compute_mode = "no permission"
    config = root / "config.yaml"
    config.write_text(
        f"version: v1\nflags: {{mpsRoot: {root}/mps}}\nsharing:\n  mps:\n    resources:\n"
        "    - {name: nvidia.com/gpu, devices: [1], replicas: 2}\n"
    )
    opts = AgentOptions(
        machine="test", kubelet_root=root, dra=False, node_name="n", config_files=(config,)
    )
    agent = Agent(opts, backend=sim)
    with FakeKubelet(root) as kubelet:
        agent.start()
        try:
            assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 3)
            devices = kubelet.devices("nvidia.com/gpu")
            assert sorted(devices.values()) == ["Healthy", "Unhealthy", "Unhealthy"]
            assert agent.mps is not None
            assert [d["state"] for d in agent.mps.status()] == ["failed"]
        finally:
            agent.stop()
