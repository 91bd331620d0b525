"""``--mig-manager`` in the agent, on real GPUs (NVML: the fake one over a simulated p4de, which
refuses what real GPUs refuse): without the flag nothing changes a GPU and the difference is
reported; with it the GPUs being reconfigured are withheld from the kubelet while a pod holds
one, the layout is applied once it is free, and the new MIG devices are served. Without an API
server the state label reaches NFD through the features file."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet.podresources import ContainerResources, PodResources
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.fake_nvml import FakeNvml
from kgpu.testing.fake_podresources import FakePodResourcesServer
from kgpu.testing.poll import eventually

MIG = """\
version: v1
mig-configs:
  half:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
"""
#: generous bounds: a loaded CI machine stretches the manager's drain polls and backoff
SLOW = 30.0


def real_node(root: Path, **options: object) -> tuple[Agent, SimulatedBackend, FakeNvml]:
    (root / "mig.yaml").write_text(MIG)
    sim = SimulatedBackend(load_machine("p4de.24xlarge", hostname="n"))
    fake = FakeNvml(sim)
    opts = AgentOptions(
        machine="nvml",
        config_files=(root / "mig.yaml",),
        labels={"nvidia.com/mig.config": "half"},
        mig_strategy="mixed",
        kubelet_root=root,
        node_name="n",
        dra=False,
        status_file=root / "status.json",
        **options,  # type: ignore[arg-type]
    )
    return Agent(opts, backend=NvmlBackend(fake)), sim, fake


def test_without_the_flag_no_gpu_changes_and_the_difference_is_reported(root: Path) -> None:
    agent, sim, fake = real_node(root)
    with FakeKubelet(root) as kubelet:
        agent.start()
        try:
            assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 8)
            time.sleep(0.5)
            assert not fake.mutating_calls()
            assert all(not g.mig_enabled for g in sim.snapshot().gpus)
            status = agent.status()
            assert "mig config 'half' is not what this node's GPUs have" in status["migPending"]
            assert status["migManager"] is None
            assert "nvidia.com/mig.config.state" not in agent.view().labels
        finally:
            agent.stop()


def test_the_manager_withholds_drains_applies_and_serves_the_new_devices(root: Path) -> None:
    features = root / "features.d"
    agent, sim, _fake = real_node(root, mig_manager=True, nfd_features_dir=features)
    gpu0 = sim.snapshot().gpus[0]
    holder = PodResources(
        "ml", "trainer", (ContainerResources("main", (("nvidia.com/gpu", (gpu0.uuid,)),)),)
    )
    with FakeKubelet(root) as kubelet, FakePodResourcesServer(root, [holder]) as pods:
        agent.start()
        try:
            # pending: GPUs 0 and 1 are withheld (the kubelet's capacity drops at once) while
            # the trainer holds GPU 0; nothing has changed on them yet
            assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 6)
            assert eventually(
                lambda: (agent.status()["migManager"] or {}).get("stage") == "draining",
                SLOW,
            )
            status = agent.status()
            assert status["migManager"]["state"] == "pending"
            assert "held by pod ml/trainer" in status["migManager"]["reason"]
            assert gpu0.uuid not in kubelet.devices("nvidia.com/gpu")
            assert not sim.snapshot().gpus[0].mig_enabled
            text = (features / "kgpu-features").read_text()
            assert "nvidia.com/mig.config.state=pending\n" in text
            pods.set_pods([])  # the trainer is done
            assert eventually(lambda: len(kubelet.devices("nvidia.com/mig-3g.40gb")) == 4, SLOW)
            assert eventually(lambda: agent.status()["migManager"]["state"] == "success", SLOW)
            assert len(kubelet.devices("nvidia.com/gpu")) == 6
            assert [len(g.mig_devices) for g in sim.snapshot().gpus[:3]] == [2, 2, 0]
            status = agent.status()
            assert status["migManager"]["state"] == "success"
            assert status["migManager"]["withheld"] == []
            assert status["migPending"] == ""
            assert "nvidia.com/mig.config.state=success\n" in (
                (features / "kgpu-features").read_text()
            )
            # the advertised MIG devices are NVML's, with NVML's UUIDs
            nvml_migs = {m.uuid for g in sim.snapshot().gpus for m in g.mig_devices}
            assert set(kubelet.devices("nvidia.com/mig-3g.40gb")) == nvml_migs
        finally:
            agent.stop()


def test_the_status_file_says_what_is_refused_and_what_mig_layout_is_pending(root: Path) -> None:
    """``refused`` and ``migPending`` reach ``kgpu agent --status`` (the status file)."""
    agent, sim, _fake = real_node(root)
    with FakeKubelet(root):
        agent.start()
        try:
            status = json.loads((root / "status.json").read_text())
            assert "mig config 'half' is not what this node's GPUs have" in status["migPending"]
            assert status["refused"] == {}
        finally:
            agent.stop()
    # GPU 0 with two MIG profiles under migStrategy single: upstream's plugin refuses the node
    sim.set_mig_mode(0, True)
    for profile, start in (("1g.10gb", 0), ("3g.40gb", 4)):
        gi = sim.create_gpu_instance(0, profile, start)
        sim.create_compute_instance(0, gi.gi_id)
    opts = AgentOptions(
        machine="nvml",
        mig_strategy="single",
        kubelet_root=root,
        node_name="n",
        dra=False,
        status_file=root / "status.json",
    )
    agent = Agent(opts, backend=NvmlBackend(FakeNvml(sim)))
    with FakeKubelet(root) as kubelet:
        agent.start()
        try:
            status = json.loads((root / "status.json").read_text())
            assert (
                "more than one MIG device type present on node"
                in (status["refused"]["nvidia.com/gpu"])
            )
            assert status["migPending"] == ""
            assert kubelet.resources() == []
        finally:
            agent.stop()
