"""The agent's small pieces: label inputs, NFD file, machine merging, MPS plans, components."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from kgpu.agent import components
from kgpu.agent.daemon import Agent, AgentOptions, merge_machines
from kgpu.agent.inputs import parse_label_args, read_labels_file
from kgpu.agent.mps import MpsManager, plans
from kgpu.agent.nfd import FEATURES_FILE, write_features
from kgpu.errors import FieldError
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.node.model import NodeView, Sharing
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.views import make_machine, make_view, replicas


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


def test_nfd_features_file_is_rewritten_only_on_change(tmp_path: Path) -> None:
    assert write_features(tmp_path, {"b": "2", "a": "1"})
    assert (tmp_path / FEATURES_FILE).read_text() == "a=1\nb=2\n"
    assert not write_features(tmp_path, {"a": "1", "b": "2"})
    assert write_features(tmp_path, {"a": "1"})
    assert [p.name for p in tmp_path.iterdir()] == [FEATURES_FILE]  # no temp files left


def test_a_gpu_missing_from_a_new_snapshot_stays_listed() -> None:
    old = make_machine(3)
    new = old.with_gpus(tuple(g for g in old.gpus if g.index != 1))
    merged = merge_machines(old, new)
    assert [g.index for g in merged.gpus] == [0, 1, 2]


def test_mps_plan_per_resource_with_per_gpu_limits() -> None:
    machine = make_machine(2, memory_mib=40960)
    view = make_view(machine, [replicas(machine, 4, sharing=Sharing.MPS)])
    (plan,) = plans(view).values()
    assert plan.active_thread_percentage == 25
    assert plan.pinned_limits == ((0, "10240M"), (1, "10240M"))
    manager = MpsManager(use_binary=False)
    manager.sync(view)
    assert manager.status()[0]["state"] == "modelled"
    manager.sync(make_view(machine, [replicas(machine, 2)]))  # no longer MPS
    assert manager.status() == []


def test_missing_component_module_warns_and_continues(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(components, "METRICS_MODULE", "kgpu.not_there.component")
    with caplog.at_level(logging.WARNING):
        got = components.load_metrics(
            "127.0.0.1:9400", SimulatedBackend(make_machine(1)), Path("/x"), "n"
        )
    assert got is None
    assert "not installed" in caplog.text


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
    assert isinstance(recorder, components.Component)
    with FakeKubelet(root) as kubelet:
        agent.start()
        agent.components.append(recorder)
        try:
            assert kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/gpu")) == 2)
            backend.inject_xid(1, 79)
            assert kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/gpu")) == 1)
            assert (
                recorder.views and recorder.views[-1].resource("nvidia.com/gpu").healthy_count == 1
            )
        finally:
            agent.stop()
    assert recorder.stopped
    assert not list((root / "device-plugins").glob("kgpu-*.sock"))
