"""Extended resources backed by DRA (DeviceClass.extendedResourceName) in ``kgpu sim``: the seed
guide's ``nvidia.com/gpu: 1`` pod on a DRA-only GB200 node, as kube-scheduler 1.35+ runs it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.sim.scenario import load_scenario, scenario_from_dict
from kgpu.sim.simulation import Simulation

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dra" / "extended-resource-gb200.yaml"
API = "resource.k8s.io/v1"


def claims(sim: Simulation) -> list[dict[str, Any]]:
    return list(sim.store.list(API, "ResourceClaim"))


def test_seed_pod_runs_on_a_dra_only_gb200_node(tmp_path: Path) -> None:
    sim = Simulation(load_scenario(EXAMPLE), work_dir=tmp_path)
    sim.start()
    pod = sim.pods["default/gpu-operator-test"]
    assert pod.phase == "Running" and pod.node == "gb200-0"
    node = sim.node("gb200-0")
    assert "nvidia.com/gpu" not in node.allocatable  # no device plugin advertises it
    (claim,) = claims(sim)
    meta = claim["metadata"]
    assert meta["name"].startswith("gpu-operator-test-extended-resources-")
    assert meta["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert meta["ownerReferences"][0]["uid"] == pod.obj["metadata"]["uid"]
    assert claim["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-0",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 1,
            },
        }
    ]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-0"]
    stored = sim.store.get("v1", "Pod", "gpu-operator-test", "default")
    assert stored["status"]["extendedResourceClaimStatus"] == {
        "requestMappings": [
            {
                "containerName": "cuda-vector-add",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-0-request-0",
            }
        ],
        "resourceClaimName": meta["name"],
    }
    # the kubelet prepared the claim and gave its device to the container
    cdi = pod.devices["cuda-vector-add"]
    assert cdi == [f"k8s.gpu.nvidia.com/claim={meta['uid']}-gpu-0"]
    assert pod.env["cuda-vector-add"]["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    # four more GPUs do not fit beside it: the DRA plugin says so, not NodeResourcesFit
    waiting = sim.pods["default/four-gpus"]
    assert waiting.phase == "Pending"
    assert waiting.last_message == (
        "0/1 nodes are available: 1 cannot allocate all claims. "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    )


def test_the_claim_goes_with_its_pod(tmp_path: Path) -> None:
    sim = Simulation(load_scenario(EXAMPLE), work_dir=tmp_path).run()
    assert sim.pods["default/gpu-operator-test"].phase == "Succeeded"
    (claim,) = claims(sim)  # the finished pod's claim was deleted
    assert claim["metadata"]["name"].startswith("four-gpus-extended-resources-")
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 4
    assert len(sim.pods["default/four-gpus"].devices["train"]) == 4


def scenario(**extra: Any) -> dict[str, Any]:
    return {
        "nodes": [{"name": "cpu-node"}, {"name": "gpu-node", "machine": "rtx-2080ti"}],
        "apply": [str(EXAMPLE.parent / "manifests" / "gpu-operator-test-pod.yaml")],
        **extra,
    }


def test_a_node_with_the_device_plugin_serves_the_resource_itself(tmp_path: Path) -> None:
    sim = Simulation(scenario_from_dict(scenario()), work_dir=tmp_path).run()
    pod = sim.pods["default/gpu-operator-test"]
    assert pod.phase == "Running" and pod.node == "gpu-node"
    assert claims(sim) == []  # the device plugin's nvidia.com/gpu, no DRA claim
    assert pod.devices["cuda-vector-add"][0].startswith("GPU-")


def test_without_a_dra_driver_the_pod_waits_as_in_the_guide(tmp_path: Path) -> None:
    sim = Simulation(
        scenario_from_dict(scenario(devicePlugin=False, draDriver=False)), work_dir=tmp_path
    ).run()
    assert sim.pods["default/gpu-operator-test"].last_message == (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )


def test_cpu_node_is_left_to_the_dra_plugin(tmp_path: Path) -> None:
    """With the driver's DeviceClass installed, a node that does not advertise nvidia.com/gpu
    is the DRA plugin's to judge (upstream's ShouldDelegateResourceToDRA)."""
    sim = Simulation(scenario_from_dict(scenario(devicePlugin=False)), work_dir=tmp_path)
    sim.start()
    pod = sim.pods["default/gpu-operator-test"]
    assert pod.phase == "Running" and pod.node == "gpu-node"
    sim.step({"apply": [str(EXAMPLE.parent / "manifests" / "four-gpus.yaml")]})
    assert sim.pods["default/four-gpus"].last_message == (
        "0/2 nodes are available: 2 cannot allocate all claims. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )


@pytest.mark.parametrize(
    "name",
    [
        "extended-resource-gb200.yaml",
        "device-taints.yaml",
        "binding-conditions.yaml",
        "prioritized-list.yaml",
    ],
)
def test_dra_examples_validate(name: str) -> None:
    result = CliRunner().invoke(app, ["validate", str(EXAMPLE.parent / name)])
    assert result.exit_code == 0, result.output
    assert "kgpu sim scenario" in result.output
