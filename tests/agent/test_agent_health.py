"""``/healthz`` (the chart's startup and liveness probes) and ``--no-device-plugin`` (DRA only).

The probes see what a kubelet sees over HTTP: 503 with a reason while the agent starts, 200
once it serves, 503 again when one of its loops is stuck (an NVML call that never returns), so
the liveness probe restarts it."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.hardware.backend import XidEvent
from kgpu.hardware.model import Machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.testing.agent_process import AgentProcess
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.fake_kubelet_dra import FakeDraKubelet
from kgpu.testing.views import make_machine


def probe(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_probe(port: int, code: int, timeout_s: float = 10.0) -> str:
    deadline = time.monotonic() + timeout_s
    got = probe(port)
    while got[0] != code and time.monotonic() < deadline:
        time.sleep(0.05)
        got = probe(port)
    assert got[0] == code, got
    return got[1]


class GatedBackend(SimulatedBackend):
    """A simulated node whose first snapshot waits for ``opened`` (NVML slow to start) and
    whose event wait can be made to hang (an NVML call that never returns)."""

    def __init__(self, machine: Machine) -> None:
        super().__init__(machine)
        self.opened = threading.Event()
        self.hang = threading.Event()
        self.released = threading.Event()

    def snapshot(self) -> Machine:
        self.opened.wait(10)
        return super().snapshot()

    def wait_events(self, timeout_s: float) -> list[XidEvent]:
        if self.hang.is_set():
            self.released.wait(30)
        return super().wait_events(timeout_s)


def test_healthz_says_starting_then_ok_then_names_the_stuck_loop(root: Path) -> None:
    backend = GatedBackend(make_machine(2))
    opts = AgentOptions(
        machine="test",
        kubelet_root=root,
        node_name="n",
        dra=False,
        health_address="127.0.0.1:0",
        health_stall_s=1.0,
    )
    agent = Agent(opts, backend=backend)
    with FakeKubelet(root) as kubelet:
        starting = threading.Thread(target=agent.start)
        starting.start()
        try:
            deadline = time.monotonic() + 5
            while agent.health_server is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert agent.health_server is not None
            port = agent.health_server.port
            code, body = probe(port)
            assert code == 503 and body.startswith("starting"), body
            backend.opened.set()
            starting.join(10)
            assert wait_probe(port, 200) == "ok\n"
            assert kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/gpu")) == 2)
            assert probe(port)[0] == 200
            backend.hang.set()  # NVML's event wait stops returning
            body = wait_probe(port, 503, timeout_s=5)
            assert "health loop has not run for" in body and "stuck" in body, body
            backend.released.set()
            assert wait_probe(port, 200) == "ok\n"
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz") as answer:
                assert answer.headers["Content-Type"].startswith("text/plain")
        finally:
            backend.opened.set()
            backend.released.set()
            agent.stop()
    with pytest.raises(OSError):  # the endpoint goes with the agent
        probe(port)


def test_a_taken_health_port_fails_the_start_naming_the_address(root: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        opts = AgentOptions(machine="test", kubelet_root=root, dra=False, health_address=address)
        agent = Agent(opts, backend=SimulatedBackend(make_machine(1)))
        with pytest.raises(OSError, match=f"--health-address: cannot serve on {address}"):
            agent.start()
        agent.stop()
        assert not agent._root_lock.held  # a second try can start
    finally:
        taken.close()


def test_bad_health_address_is_an_option_problem() -> None:
    problems = AgentOptions(health_address="8081").problems()
    assert [(p.path, "is not HOST:PORT" in p.message) for p in problems] == [
        ("--health-address", True)
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_dra_only_node_serves_no_device_plugin_and_is_healthy(root: Path) -> None:
    """``devicePlugin.enabled=false``: the chart passes ``--no-device-plugin``; the kubelet
    gets the DRA plugin only, and the probes pass."""
    port = _free_port()
    with FakeKubelet(root) as kubelet, FakeDraKubelet(root) as dra:
        agent = AgentProcess(
            root,
            ["--machine", "dgx-h100", "--dra", "--no-device-plugin",
             "--health-address", f"127.0.0.1:{port}"],
        )  # fmt: skip
        try:
            dra.wait_registered("gpu.nvidia.com")
            assert wait_probe(port, 200) == "ok\n"
            status = agent.status()
            assert "DevicePluginComponent" not in status["components"]
            assert "MpsComponent" not in status["components"]
            assert "DraComponent" in status["components"]
            assert status["health"] == "ok"
            assert kubelet.resources() == []
            assert not list((root / "device-plugins").glob("kgpu-*.sock"))
            assert agent.terminate() == 0
        finally:
            agent.kill()
