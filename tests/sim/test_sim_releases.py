"""The simulated cluster follows the release its scenario names (kgpu.releases): a GPU pod on a
node without a device plugin gets its ``nvidia.com/gpu`` through the DRA driver's DeviceClass
only where ``DRAExtendedResource`` is on (1.36+ by default, or ``featureGates``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kgpu.errors import FieldError
from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation

GPU_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "gpu-test"},
    "spec": {
        "restartPolicy": "OnFailure",
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
    },
}


def run(**extra: Any) -> Simulation:
    scenario = scenario_from_dict(
        {
            "nodes": [{"name": "cpu-node"}, {"name": "gpu-node", "machine": "rtx-2080ti"}],
            "devicePlugin": False,  # GPUs present, no device plugin: only DRA could serve them
            **extra,
        }
    )
    sim = Simulation(scenario)
    sim.start()
    sim.apply(GPU_POD)
    sim.settle()
    return sim


@pytest.mark.parametrize(
    ("version", "placed"),
    [("1.33", False), ("1.34", False), ("1.35", False), ("1.36", True), ("1.37", True)],
)
def test_extended_resource_through_dra_only_where_the_release_has_it(
    version: str, placed: bool
) -> None:
    sim = run(kubernetesVersion=version)
    record = sim.pods["default/gpu-test"]
    if placed:
        assert record.node == "gpu-node"
    else:
        assert record.node == ""
        assert record.last_message.startswith(
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
        )


def test_feature_gates_turn_an_alpha_gate_on_for_the_scenario() -> None:
    sim = run(kubernetesVersion="1.35", featureGates={"DRAExtendedResource": True})
    assert sim.pods["default/gpu-test"].node == "gpu-node"


def test_feature_gates_turn_a_beta_gate_off() -> None:
    sim = run(kubernetesVersion="1.36", featureGates={"DRAExtendedResource": False})
    assert sim.pods["default/gpu-test"].node == ""


@pytest.mark.parametrize(
    ("gates", "problem"),
    [
        (
            {"DRAExtendedResource": True},
            "featureGates.DRAExtendedResource: DRAExtendedResource: "
            "Kubernetes 1.33 has no such feature gate (it exists from 1.34)",
        ),
        ({"NoSuchGate": True}, "featureGates.NoSuchGate: unknown feature gate 'NoSuchGate'"),
        (
            {"DRAPrioritizedList": "yes"},
            "featureGates.DRAPrioritizedList: DRAPrioritizedList: must be true or false",
        ),
        (["DRAPrioritizedList=true"], "featureGates: must be a map"),
    ],
)
def test_bad_feature_gates_name_the_field(gates: object, problem: str) -> None:
    with pytest.raises(FieldError) as err:
        scenario_from_dict({"nodes": [], "kubernetesVersion": "1.33", "featureGates": gates})
    assert problem in str(err.value)


def test_the_default_release_is_the_newest_and_older_ones_warn() -> None:
    assert str(scenario_from_dict({"nodes": []}).kubernetes_version) == "1.37"
    old = Simulation(scenario_from_dict({"nodes": [], "kubernetesVersion": "1.33"}))
    assert any("outside kgpu's supported window 1.34-1.37" in w for w in old.warnings)
    new = Simulation(scenario_from_dict({"nodes": [], "kubernetesVersion": "1.36"}))
    assert not any("supported window" in w for w in new.warnings)


def _quickstart_start(**changes: Any) -> Simulation:
    import yaml

    from kgpu.sim import quickstart

    base = Path(quickstart.__file__).parent
    data = {**yaml.safe_load((base / "quickstart.yaml").read_text()), **changes}
    sim = Simulation(scenario_from_dict(data, base=base))
    sim.start()  # the seed guide's first outcome is the state before any step
    return sim


@pytest.mark.parametrize(
    ("changes", "pending"),
    [
        ({}, True),  # as shipped: 1.37 without a DRA driver
        ({"draDriver": True, "kubernetesVersion": "1.35"}, True),  # no DRAExtendedResource
        ({"draDriver": True}, False),  # 1.37: the driver's DeviceClass serves nvidia.com/gpu
    ],
)
def test_the_quickstart_needs_no_dra_driver_only_from_1_36(
    changes: dict[str, Any], pending: bool
) -> None:
    record = _quickstart_start(**changes).pods["default/gpu-operator-test"]
    assert (record.node == "") is pending
    if pending:
        assert record.last_message.startswith(
            "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
        )


def test_the_json_report_names_the_release_and_its_gates() -> None:
    report = run(kubernetesVersion="1.35", featureGates={"DRAExtendedResource": True}).report()
    assert report["kubernetes"]["version"] == "1.35"
    gates = report["kubernetes"]["featureGates"]
    assert gates["DRAExtendedResource"] is True  # the scenario's override
    assert gates["DRAPartitionableDevices"] is False  # 1.35's default (alpha)
