"""Rows 1-8 of ../shared/acceptance/README.md: the guides' manifests, unchanged, in the
simulator, and what the guides saw on real clusters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kgpu.sim.scenario import load_scenario
from kgpu.sim.simulation import Simulation


def run(tmp_path: Path, scenario: dict[str, Any]) -> Simulation:
    """Write the scenario as a file (as a user would) and run it."""
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return Simulation(load_scenario(path), work_dir=tmp_path / "work").run()


def pods_by_phase(sim: Simulation) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for rec in sim.pods.values():
        out.setdefault(rec.phase, []).append(rec.name)
    return out


def node(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in report["nodes"] if n["name"] == name)


def warnings_for(report: dict[str, Any], pod: str) -> list[str]:
    return [
        e["message"]
        for e in report["events"]
        if e["reason"] == "FailedScheduling" and e["object"] == f"Pod/default/{pod}"
    ]


def test_row1_no_device_plugin_pod_stays_pending(tmp_path: Path, acceptance: Path) -> None:
    sim = run(
        tmp_path,
        {
            "nodes": [{"name": "cpu-node"}, {"name": "gpu-node", "machine": "rtx-2080ti"}],
            # the guide's cluster had neither the device plugin nor a DRA driver (with one,
            # its DeviceClass would serve nvidia.com/gpu: see test_sim_dra_extended.py)
            "devicePlugin": False,
            "draDriver": False,
            "apply": [str(acceptance / "seed-guides/gpu-operator-test-pod.yaml")],
        },
    )
    report = sim.report()
    assert pods_by_phase(sim) == {"Pending": ["gpu-operator-test"]}
    # the guide's words, then what kube-scheduler 1.35 appends: a node without the resource
    # could not take the pod even empty, so preemption does not try it
    assert warnings_for(report, "gpu-operator-test") == [
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    ]
    assert "nvidia.com/gpu" not in node(report, "gpu-node")["capacity"]


def test_row2_time_slicing_six_replicas(tmp_path: Path, acceptance: Path) -> None:
    sim = run(
        tmp_path,
        {
            "nodes": [{"name": "gpu-node", "machine": "rtx-2080ti"}],
            "configs": [str(acceptance / "seed-guides/time-slicing-config-2080ti.yaml")],
            "defaultConfig": "2080ti-12gb",
            "apply": [str(acceptance / "seed-guides/nvidia-plugin-test-2.yaml")],
        },
    )
    report = sim.report()
    n = node(report, "gpu-node")
    assert n["capacity"]["nvidia.com/gpu"] == "6"
    assert n["labels"]["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-2080-Ti-SHARED"
    assert n["allocated"]["nvidia.com/gpu"] == "4"
    running = [p for p in report["pods"] if p["phase"] == "Running"]
    assert len(running) == 2 and len(report["pods"]) == 2
    for pod in running:
        assert pod["name"].startswith("nvidia-plugin-test-2-")
        ids = pod["devices"]["dcgmproftester11"]
        assert len(ids) == 2 and all("::" in i for i in ids)


def test_row3_time_slicing_four_share_fifth_waits(tmp_path: Path, acceptance: Path) -> None:
    sim = run(
        tmp_path,
        {
            "nodes": [{"name": "gpu-node", "machine": "t4"}],
            "configs": [str(acceptance / "seed-guides/gpu-sharing-config-any.yaml")],
            "defaultConfig": "any",
            "apply": [str(acceptance / "vks-samples/time-slicing-verification.yaml")],
        },
    )
    phases = pods_by_phase(sim)
    assert len(phases["Running"]) == 4 and len(phases["Pending"]) == 1
    report = sim.report()
    assert warnings_for(report, phases["Pending"][0]) == [
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    ]
    # all four share the one physical GPU
    gpus = {
        p["devices"]["cuda-sample-vector-add"][0].split("::")[0]
        for p in report["pods"]
        if p["phase"] == "Running"
    }
    assert len(gpus) == 1


def test_row4_mps_four_clients_fifth_waits(tmp_path: Path, acceptance: Path) -> None:
    sim = run(
        tmp_path,
        {
            "nodes": [{"name": "gpu-node", "machine": "t4"}],
            "configs": [str(acceptance / "seed-guides/gpu-sharing-config-any-mps.yaml")],
            "defaultConfig": "any-mps",
            "apply": [str(acceptance / "vks-samples/mps-verification.yaml")],
        },
    )
    phases = pods_by_phase(sim)
    assert len(phases["Running"]) == 4 and len(phases["Pending"]) == 1
    assert all(name.startswith("nbody-sample-") for names in phases.values() for name in names)
    report = sim.report()
    assert warnings_for(report, phases["Pending"][0])
    (daemon,) = node(report, "gpu-node")["mps"]
    assert daemon["resource"] == "nvidia.com/gpu" and daemon["replicas"] == 4
    assert len(daemon["gpus"]) == 1
    assert sorted(daemon["clients"]) == sorted(f"default/{p}" for p in phases["Running"])
    env = next(p["env"] for p in report["pods"] if p["phase"] == "Running")["nbody-sample"]
    assert "CUDA_MPS_PIPE_DIRECTORY" in env


def vks_shared_cluster(acceptance: Path) -> dict[str, Any]:
    """The VKS guide's cluster after ``multiple-gpu-sharing.yaml``: a 2080 Ti time-sliced 4
    ways and a 4090 shared by MPS 8 ways, each chosen by its node's config label."""
    return {
        "nodes": [
            {
                "name": f"node-{gpu}",
                "machine": f"rtx-{gpu}",
                "labels": {"nvidia.com/device-plugin.config": f"rtx-{gpu}"},
            }
            for gpu in ("2080ti", "4090")
        ],
        "configs": [str(acceptance / "vks-samples/multiple-gpu-sharing.yaml")],
    }


def test_row5_per_node_configs(tmp_path: Path, acceptance: Path) -> None:
    sim = run(
        tmp_path,
        {
            **vks_shared_cluster(acceptance),
            "apply": [str(acceptance / "vks-samples/tensorflow-mnist-sample.yaml")],
            "steps": [
                {"scale": {"kind": "Deployment", "name": "tensorflow-mnist", "replicas": 13}}
            ],
        },
    )
    report = sim.report()
    a, b = node(report, "node-2080ti"), node(report, "node-4090")
    assert a["capacity"]["nvidia.com/gpu"] == "4" and a["allocated"]["nvidia.com/gpu"] == "4"
    assert b["capacity"]["nvidia.com/gpu"] == "8" and b["allocated"]["nvidia.com/gpu"] == "8"
    assert a["labels"]["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert b["labels"]["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert a["mps"] == [] and len(b["mps"][0]["clients"]) == 8
    phases = pods_by_phase(sim)
    assert len(phases["Running"]) == 12 and len(phases["Pending"]) == 1


def test_row6_vectoradd_lands_by_product_selector(tmp_path: Path, acceptance: Path) -> None:
    # The guide ran cuda-vectoradd before applying the sharing config: once the 2080 Ti is
    # time-sliced its product label becomes ...-SHARED and this nodeSelector matches no node.
    sim = run(
        tmp_path,
        {
            "nodes": [
                {"name": "node-2080ti", "machine": "rtx-2080ti"},
                {"name": "node-4090", "machine": "rtx-4090"},
            ],
            "apply": [str(acceptance / "vks-samples/cuda-vectoradd-test.yaml")],
        },
    )
    rec = sim.pods["default/cuda-vectoradd"]
    assert rec.phase == "Running" and rec.node == "node-2080ti"
    assert rec.env["vectoradd"]["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")


def test_row6_after_sharing_config_selector_matches_nothing(
    tmp_path: Path, acceptance: Path
) -> None:
    sim = run(
        tmp_path,
        {
            **vks_shared_cluster(acceptance),
            "apply": [str(acceptance / "vks-samples/cuda-vectoradd-test.yaml")],
        },
    )
    assert sim.pods["default/cuda-vectoradd"].phase == "Pending"
    assert warnings_for(sim.report(), "cuda-vectoradd") == [
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    ]


def test_row7_mig_half_balanced_on_a100_80gb(tmp_path: Path, acceptance: Path) -> None:
    sim = run(
        tmp_path,
        {
            "nodes": [
                {
                    "name": "p4de",
                    "machine": "p4de.24xlarge",
                    "labels": {"nvidia.com/mig.config": "p4de-half-balanced"},
                }
            ],
            "configs": [str(acceptance / "seed-guides/gpu-operator-values.yaml")],
        },
    )
    report = sim.report()
    n = node(report, "p4de")
    assert {k: v for k, v in n["capacity"].items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/mig-1g.10gb": "8",
        "nvidia.com/mig-2g.20gb": "4",
        "nvidia.com/mig-3g.40gb": "4",
        "nvidia.com/gpu": "4",
    }
    assert n["labels"]["nvidia.com/mig.strategy"] == "mixed"
    # the node's MIG manager split the GPUs on its simulated backend when the node joined
    assert n["labels"]["nvidia.com/mig.config.state"] == "success"
    assert [e["reason"] for e in report["events"] if e["reason"].startswith("MigConfig")] == [
        "MigConfigPending",
        "MigConfigApplied",
    ]


def test_row8_t4_and_a100_mig_replicas(tmp_path: Path, acceptance: Path) -> None:
    # The A100 40GB uses MIG (all-balanced: 2 x 1g.5gb, 1 x 2g.10gb, 1 x 3g.20gb) with the
    # mixed strategy, so each profile's resource is multiplied by its replicas.
    sim = run(
        tmp_path,
        {
            "nodes": [
                {
                    "name": "t4",
                    "machine": "t4",
                    "labels": {"nvidia.com/device-plugin.config": "tesla-t4"},
                },
                {
                    "name": "a100",
                    "machine": "a100-40gb",
                    "labels": {
                        "nvidia.com/device-plugin.config": "a100-40gb",
                        "nvidia.com/mig.config": "all-balanced",
                    },
                },
            ],
            "migStrategy": "mixed",
            "configs": [str(acceptance / "seed-guides/time-slicing-config-t4-a100.yaml")],
        },
    )
    report = sim.report()
    assert node(report, "t4")["capacity"]["nvidia.com/gpu"] == "4"
    cap = node(report, "a100")["capacity"]
    assert cap["nvidia.com/mig-1g.5gb"] == str(2 * 2)
    assert cap["nvidia.com/mig-2g.10gb"] == str(1 * 2)
    assert cap["nvidia.com/mig-3g.20gb"] == str(1 * 3)
    assert node(report, "a100")["labels"]["nvidia.com/mig.config.state"] == "success"
    assert "nvidia.com/mig.config.state" not in node(report, "t4")["labels"]  # no MIG there
