"""MPS in the simulator: one modelled control daemon per MPS-shared GPU, its clients the pods
holding replicas of that GPU, time-slicing on other GPUs of the same node untouched."""

from __future__ import annotations

from pathlib import Path

import yaml

from kgpu.hardware.profiles import load_machine
from kgpu.sim.scenario import load_scenario
from kgpu.sim.simulation import Simulation
from kgpu.testing.manifests import deployment

SPLIT = """
version: v1
sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, rename: nvidia.com/gpu.ts, devices: [0, 1], replicas: 4}
  mps:
    resources:
    - {name: nvidia.com/gpu, rename: nvidia.com/gpu.mps, devices: [4, 5], replicas: 2}
"""


NBODY = "nvcr.io/nvidia/k8s/cuda-sample:nbody"


def test_two_mps_gpus_two_daemons_each_with_its_own_clients(tmp_path: Path) -> None:
    (tmp_path / "split.yaml").write_text(SPLIT)
    (tmp_path / "apps.yaml").write_text(
        yaml.safe_dump_all(
            [
                deployment("mps-app", 5, {"nvidia.com/gpu.mps": 1}, container="cuda", image=NBODY),
                deployment("ts-app", 2, {"nvidia.com/gpu.ts": 1}, container="cuda", image=NBODY),
            ]
        )
    )
    scenario = {
        "nodes": [{"name": "dgx", "machine": "dgx-h100"}],
        "configs": [str(tmp_path / "split.yaml")],
        "apply": [str(tmp_path / "apps.yaml")],
    }
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    sim = Simulation(load_scenario(tmp_path / "scenario.yaml"), work_dir=tmp_path / "w").run()
    report = sim.report()
    (node,) = report["nodes"]
    machine = load_machine("dgx-h100", hostname="dgx")
    daemons = node["mps"]
    assert [(d["resource"], d["gpu"], d["gpus"]) for d in daemons] == [
        ("nvidia.com/gpu.mps", i, [machine.gpus[i].uuid]) for i in (4, 5)
    ]
    for d in daemons:
        assert d["replicas"] == 2 and d["activeThreadPercentage"] == 50
        assert d["pinnedMemoryLimitMiB"] == machine.gpus[d["gpu"]].memory_mib // 2
        assert d["pipeDirectory"] == f"/run/nvidia/mps/nvidia.com/gpu.mps/{d['gpu']}/pipe"

    running = [p for p in report["pods"] if p["phase"] == "Running"]
    mps_pods = [p for p in running if p["name"].startswith("mps-app")]
    assert len(mps_pods) == 4  # 2 GPUs x 2 replicas; the fifth waits
    assert sum(p["phase"] == "Pending" for p in report["pods"]) == 1
    for d in daemons:
        on_gpu = sorted(
            f"{p['namespace']}/{p['name']}"
            for p in mps_pods
            if p["env"]["cuda"]["NVIDIA_VISIBLE_DEVICES"] == d["gpus"][0]
        )
        assert d["clients"] == on_gpu and len(on_gpu) == 2
    for p in mps_pods:
        assert p["env"]["cuda"]["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu.mps/pipe"
    ts_pods = [p for p in running if p["name"].startswith("ts-app")]
    assert len(ts_pods) == 2
    assert all("CUDA_MPS_PIPE_DIRECTORY" not in p["env"]["cuda"] for p in ts_pods)
