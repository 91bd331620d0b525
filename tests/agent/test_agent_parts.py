"""The agent's small pieces: label inputs, NFD file, machine merging, MPS plans, components."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from kgpu.agent import components
from kgpu.agent.daemon import Agent, AgentOptions, merge_machines
from kgpu.agent.inputs import read_labels_file
from kgpu.agent.nfd import FEATURES_FILE, write_features
from kgpu.config import load_config_strings
from kgpu.drivers import mps
from kgpu.drivers.component import Component
from kgpu.drivers.mps import MpsManager, plans
from kgpu.errors import FieldError
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.node.label_syntax import parse_label_args
from kgpu.node.model import NodeView
from kgpu.node.view import build_node_view
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.views import make_machine


def test_labels_file_formats(tmp_path: Path) -> None:
    f = tmp_path / "labels"
    f.write_text("# node labels\na=1\nnvidia.com/device-plugin.config = tesla-t4\n")
    assert read_labels_file(f) == {"a": "1", "nvidia.com/device-plugin.config": "tesla-t4"}
    f.write_text('{"a": "2"}')
    assert read_labels_file(f) == {"a": "2"}
    f.write_text("a: 3\nb: x\n")
    assert read_labels_file(f) == {"a": "3", "b": "x"}
    assert read_labels_file(tmp_path / "missing") == {}
    f.write_text("a=1\nnonsense\n")
    with pytest.raises(FieldError, match="line 2"):
        read_labels_file(f)
    with pytest.raises(FieldError, match="--label"):
        parse_label_args(["ok=1", "broken"])
    with pytest.raises(FieldError, match=r"--label\[1\].*not a valid label key"):
        parse_label_args(["ok=1", "bad key!=x"])
    with pytest.raises(FieldError, match=r"--label\[0\].*not a valid label value"):
        parse_label_args(["nvidia.com/device-plugin.config=has space"])
    assert parse_label_args(["nvidia.com/mig.config=all-balanced"]) == {
        "nvidia.com/mig.config": "all-balanced"
    }


def test_nfd_features_file_is_rewritten_only_on_change(tmp_path: Path) -> None:
    assert write_features(tmp_path, {"b": "2", "a": "1"})
    assert (tmp_path / FEATURES_FILE).read_text() == "a=1\nb=2\n"
    assert not write_features(tmp_path, {"a": "1", "b": "2"})
    assert write_features(tmp_path, {"a": "1"})
    assert [p.name for p in tmp_path.iterdir()] == [FEATURES_FILE]  # no temp files left
    assert (tmp_path / FEATURES_FILE).stat().st_mode & 0o777 == 0o644  # NFD may not be root


def test_status_writers_on_several_threads_never_tear_the_file(tmp_path: Path) -> None:
    # The health, probe and watch threads all rewrite the status file.
    status = tmp_path / "status.json"
    agent = Agent(
        AgentOptions(machine="a100-80gb", kubelet_root=tmp_path, status_file=status),
        backend=SimulatedBackend(load_machine("a100-80gb")),
    )
    writers = [
        threading.Thread(target=lambda: [agent._write_status() for _ in range(50)])
        for _ in range(4)
    ]
    for thread in writers:
        thread.start()
    while any(t.is_alive() for t in writers):
        if status.exists():
            assert json.loads(status.read_text())["state"] == "running"
    for thread in writers:
        thread.join()
    assert json.loads(status.read_text())["state"] == "running"
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]  # no temporaries left


def test_a_gpu_missing_from_a_new_snapshot_stays_listed() -> None:
    old = make_machine(3)
    new = old.with_gpus(tuple(g for g in old.gpus if g.index != 1))
    merged = merge_machines(old, new)
    assert [g.index for g in merged.gpus] == [0, 1, 2]


MPS_ON_SOME_GPUS = """
version: v1
sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, rename: nvidia.com/gpu.ts, devices: [0], replicas: 3}
  mps:
    resources:
    - {name: nvidia.com/gpu, devices: [1, 3], replicas: 4}
"""


def test_mps_plan_one_daemon_per_mps_gpu() -> None:
    machine = load_machine("p4de.24xlarge")
    view = build_node_view(machine, load_config_strings({"c.yaml": MPS_ON_SOME_GPUS}), {})
    got = sorted(plans(view).values(), key=lambda p: p.gpu_index)
    assert [(p.resource, p.gpu_index, p.gpu_uuid) for p in got] == [
        ("nvidia.com/gpu", 1, machine.gpus[1].uuid),
        ("nvidia.com/gpu", 3, machine.gpus[3].uuid),
    ]
    for plan in got:
        assert plan.replicas == 4 and plan.active_thread_percentage == 25
        assert plan.pinned_memory_limit_mib == machine.gpus[plan.gpu_index].memory_mib // 4
        assert plan.pipe_directory == f"/run/nvidia/mps/nvidia.com/gpu/{plan.gpu_index}/pipe"
    manager = MpsManager(use_binary=False)
    manager.sync(view)
    status = manager.status()
    assert [(d["gpu"], d["state"], d["maxClients"]) for d in status] == [
        (1, "modelled", 4),
        (3, "modelled", 4),
    ]
    # A reload that moves MPS off GPU 3 stops only that GPU's daemon.
    kept = manager.daemons[("nvidia.com/gpu", machine.gpus[1].uuid)]
    fewer = MPS_ON_SOME_GPUS.replace("devices: [1, 3]", "devices: [1]")
    manager.sync(build_node_view(machine, load_config_strings({"c.yaml": fewer}), {}))
    assert [d["gpu"] for d in manager.status()] == [1]
    assert manager.daemons[("nvidia.com/gpu", machine.gpus[1].uuid)] is kept
    manager.sync(build_node_view(machine, load_config_strings({}), {}))  # no longer MPS
    assert manager.status() == []


class _FakeControl:
    """Stands in for ``nvidia-cuda-mps-control``: answers on its control pipe as the real
    binary does (``-d`` starts, ``get_server_list`` / ``get_client_list PID`` print PIDs one a
    line) and records every call with the environment it got."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str, dict[str, str]]] = []

    def __call__(self, args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        env = kw.get("env")
        assert isinstance(env, dict)
        command = str(kw.get("input") or "")
        self.calls.append((args, command, env))
        out = ""
        if command == "get_server_list":
            out = "4242\n"
        elif command == "get_client_list 4242":
            out = "101\n102\n" if env["CUDA_VISIBLE_DEVICES"].endswith(self.busy) else ""
        return subprocess.CompletedProcess(args, 0, out, "")

    busy = ""


def test_real_daemons_get_their_gpu_only_and_report_clients(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    machine = load_machine("p4de.24xlarge")
    text = MPS_ON_SOME_GPUS.replace("version: v1", f"version: v1\nflags: {{mpsRoot: {tmp_path}}}")
    view = build_node_view(machine, load_config_strings({"c.yaml": text}), {})
    fake = _FakeControl()
    fake.busy = machine.gpus[3].uuid
    monkeypatch.setattr(mps.subprocess, "run", fake)
    mounts: list[list[str]] = []  # mount(8) of the shared shm tmpfs, recorded
    manager = MpsManager(use_binary=True, run=mounts.append)
    manager.binary = "/usr/bin/nvidia-cuda-mps-control"
    manager.sync(view)
    assert {m[-1] for m in mounts} == {f"{tmp_path}/shm"}
    starts = [
        (env["CUDA_VISIBLE_DEVICES"], env["CUDA_MPS_PIPE_DIRECTORY"])
        for a, _, env in fake.calls
        if a[1:] == ["-d"]
    ]
    assert starts == [
        (machine.gpus[1].uuid, f"{tmp_path}/nvidia.com/gpu/1/pipe"),
        (machine.gpus[3].uuid, f"{tmp_path}/nvidia.com/gpu/3/pipe"),
    ]
    assert (tmp_path / "nvidia.com/gpu/3/pipe").is_dir() and (tmp_path / "shm").is_dir()
    limit = machine.gpus[1].memory_mib // 4
    sent = [
        c for a, c, env in fake.calls if c and env["CUDA_VISIBLE_DEVICES"] == machine.gpus[1].uuid
    ]
    assert sent == [
        f"set_default_device_pinned_mem_limit 0 {limit}M",
        "set_default_active_thread_percentage 25",
    ]
    assert [d["state"] for d in manager.status()] == ["running", "running"]
    assert manager.refresh_clients()
    assert [d["clients"] for d in manager.status()] == [[], [101, 102]]
    assert not manager.refresh_clients()  # unchanged
    manager.stop_all()
    assert [c for _, c, _ in fake.calls].count("quit") == 2


class Recorder:
    def __init__(self) -> None:
        self.views: list[NodeView] = []
        self.started = self.stopped = False

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True

    def on_view(self, view: NodeView) -> None:
        self.views.append(view)


def test_in_process_agent_feeds_components_and_serves(root: Path) -> None:
    """The Agent class without a subprocess: components see health changes."""
    machine = make_machine(2)
    backend = SimulatedBackend(machine)
    opts = AgentOptions(machine="test", kubelet_root=root, dra=False, node_name="n")
    agent = Agent(opts, backend=backend)
    recorder = Recorder()
    assert isinstance(recorder, Component)
    with FakeKubelet(root) as kubelet:
        agent.start()
        agent.components.append(recorder)
        try:
            assert kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/gpu")) == 2)
            backend.inject_xid(1, 79)
            assert kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/gpu")) == 1)
            # Components hear of the view right after the servers' streams do.
            assert kubelet.wait_for(
                lambda: (
                    bool(recorder.views)
                    and recorder.views[-1].resource("nvidia.com/gpu").healthy_count == 1
                )
            )
        finally:
            agent.stop()
    assert recorder.stopped
    assert not list((root / "device-plugins").glob("kgpu-*.sock"))


def test_dra_component_of_a_fabric_node_serves_compute_domains_too() -> None:
    """On a GB200 tray in a clique, the agent's DRA component serves both drivers; elsewhere
    only gpu.nvidia.com (unix socket paths are short, so the kubelet root is under /tmp)."""
    import shutil
    import tempfile

    from kgpu.hardware.profiles import load_machine

    for clique, expected in (
        ("rack-a.0", {"gpu.nvidia.com", "compute-domain.nvidia.com"}),
        (None, {"gpu.nvidia.com"}),
    ):
        root = Path(tempfile.mkdtemp(prefix="kgpu-"))
        try:
            backend = SimulatedBackend(load_machine("gb200", hostname="tray-0", clique=clique))
            got = components.load_dra(root / "k", root / "cdi", "tray-0", backend)
            got.start()
            try:
                assert set(got.servers) == expected  # type: ignore[attr-defined]
            finally:
                got.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


def test_agent_clique_puts_a_profile_in_an_nvlink_fabric(tmp_path: Path) -> None:
    from kgpu.agent.daemon import Agent, AgentOptions

    opts = AgentOptions(
        machine="gb200", node_name="tray-0", clique="rack-a.0", kubelet_root=tmp_path
    )
    machine = Agent(opts).backend.snapshot()
    assert {g.fabric.clique for g in machine.gpus if g.fabric} == {"rack-a.0"}


def test_a_daemon_that_refuses_its_limits_is_quit_not_left_running(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    machine = load_machine("p4de.24xlarge")
    text = MPS_ON_SOME_GPUS.replace("version: v1", f"version: v1\nflags: {{mpsRoot: {tmp_path}}}")
    view = build_node_view(machine, load_config_strings({"c.yaml": text}), {})
    fake = _FakeControl()

    def refusing(args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        done = fake(args, **kw)
        if str(kw.get("input") or "").startswith("set_default_active_thread_percentage"):
            raise subprocess.CalledProcessError(1, args)
        return done

    monkeypatch.setattr(mps.subprocess, "run", refusing)
    manager = MpsManager(use_binary=True, run=lambda command: None)
    manager.binary = "/usr/bin/nvidia-cuda-mps-control"
    manager.sync(view)
    assert [d["state"] for d in manager.status()] == ["failed", "failed"]
    assert [c for _, c, _ in fake.calls].count("quit") == 2
    manager.stop_all()
    assert [c for _, c, _ in fake.calls].count("quit") == 2  # not asked twice


def test_registration_backoff_doubles_to_its_cap_with_jitter_below() -> None:
    import random

    from kgpu.kubelet.deviceplugin.registration import Backoff

    backoff = Backoff(initial_s=0.1, maximum_s=1.0, jitter=0.5)
    rng = random.Random(3)
    delays = [backoff.next_delay(rng) for _ in range(8)]
    for n, delay in enumerate(delays):
        base = min(1.0, 0.1 * 2**n)
        assert base / 2 <= delay <= base
    assert len({round(d, 6) for d in delays[4:]}) > 1  # capped ones still differ: jitter
    backoff.reset()
    assert backoff.next_delay(rng) <= 0.1


def test_options_are_checked_where_they_live_not_in_the_cli(tmp_path: Path) -> None:
    from kgpu.agent.options import AgentOptions
    from kgpu.errors import FieldError

    opts = AgentOptions(
        machine="nvml",
        fault_dir=tmp_path,
        health_probe_interval_s=0,
        hostname_label="HOST",
        kubeconfig=tmp_path / "missing",
    )
    assert sorted(p.path for p in opts.problems()) == [
        "--fault-dir",
        "--health-probe-interval",
        "--hostname-label",
        "--kubeconfig",
    ]
    with pytest.raises(FieldError) as err:
        AgentOptions.parse(labels=["nokey"], ignore_xids="48,x", machine="dgx-h100")
    assert [p.path for p in err.value.problems] == ["--label[0]", "--ignore-xids"]
    assert AgentOptions.parse(labels=["a=b"], ignore_xids="48").ignore_xids == frozenset({48})
