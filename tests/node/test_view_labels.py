"""GFD-compatible labels: names and values users select on."""

from __future__ import annotations

import pytest

from kgpu.config import load_config_strings
from kgpu.drivers.migpreview import machine_after_mig
from kgpu.hardware.profiles import load_machine
from kgpu.node.labels import (
    arch_family,
    is_valid_label_key,
    is_valid_label_value,
    sanitize_value,
)
from kgpu.node.view import build_node_view


def test_whole_gpu_labels_match_gfd() -> None:
    view = build_node_view(load_machine("rtx-2080ti"), load_config_strings({}), {})
    labels = view.labels
    machine = view.machine
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-2080-Ti"
    assert labels["nvidia.com/gpu.count"] == "1"
    assert labels["nvidia.com/gpu.replicas"] == "1"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.memory"] == str(machine.gpus[0].memory_mib)
    assert labels["nvidia.com/gpu.family"] == "turing"
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == (
        "7",
        "5",
    )
    major, minor, rev = machine.driver_version.split(".")
    assert labels["nvidia.com/cuda.driver.major"] == major
    assert labels["nvidia.com/cuda.driver.minor"] == minor
    assert labels["nvidia.com/cuda.driver.rev"] == rev
    assert labels["nvidia.com/cuda.runtime.major"] == str(machine.cuda_driver_version[0])
    assert labels["nvidia.com/mig.capable"] == "false"
    assert labels["nvidia.com/mps.capable"] == "false"
    assert "nvidia.com/mig.strategy" not in labels  # GFD sets it only for single/mixed


def test_renamed_shared_resource_keeps_plain_product_name() -> None:
    text = "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 4}]}}"
    view = build_node_view(load_machine("t4"), load_config_strings({"c.yaml": text}), {})
    assert view.counts() == {"nvidia.com/gpu.shared": 4}
    assert view.labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert view.labels["nvidia.com/gpu.replicas"] == "4"


def test_single_strategy_with_mixed_mig_modes_is_labelled_invalid() -> None:
    text = (
        "version: v1\nmig-configs:\n  half:\n"
        "    - {devices: [0], mig-enabled: true, mig-devices: {'1g.10gb': 7}}\n"
        "    - {devices: [1, 2, 3, 4, 5, 6, 7], mig-enabled: false}\n"
    )
    configs = load_config_strings({"m.yaml": text, "f.yaml": "flags: {migStrategy: single}\n"})
    labels = {"nvidia.com/mig.config": "half"}
    view = build_node_view(
        machine_after_mig(load_machine("p4de.24xlarge"), configs, labels), configs, labels
    )
    assert view.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-INVALID"
    assert view.labels["nvidia.com/gpu.count"] == "0"
    # upstream's plugin refuses a node with MIG-enabled and -disabled GPUs under single
    assert view.counts() == {}
    assert view.refused[0].reason == (
        "all devices on the node must be configured with the same migEnabled value"
    )
    assert any("MIG-INVALID" in w for w in view.warnings)


def test_clique_label_for_fabric_attached_gpus() -> None:
    clique = "5b2c1e4a-0c55-4a58-9a0b-1f7e2c3d4e5f.7"
    view = build_node_view(load_machine("gb200", clique=clique), load_config_strings({}), {})
    assert view.labels["nvidia.com/gpu.clique"] == clique
    assert view.labels["nvidia.com/gpu.family"] == "blackwell"
    plain = build_node_view(load_machine("dgx-h100"), load_config_strings({}), {})
    assert "nvidia.com/gpu.clique" not in plain.labels


def test_mig_mixed_labels_carry_slices_and_memory() -> None:
    configs = load_config_strings({"f.yaml": "flags: {migStrategy: mixed}\n"})
    labels = {"nvidia.com/mig.config": "all-1g.10gb.me"}
    view = build_node_view(
        machine_after_mig(load_machine("a100-80gb"), configs, labels), configs, labels
    )
    # "+" is not allowed in label keys or resource names: written as "."
    assert view.counts() == {"nvidia.com/mig-1g.10gb.me": 1}
    mig = view.machine.gpus[0].mig_devices[0]
    assert view.labels["nvidia.com/mig-1g.10gb.me.count"] == "1"
    assert view.labels["nvidia.com/mig-1g.10gb.me.memory"] == str(mig.memory_mib)
    assert view.labels["nvidia.com/mig-1g.10gb.me.slices.gi"] == "1"
    assert view.labels["nvidia.com/mig-1g.10gb.me.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gbme"
    assert "nvidia.com/mig.config.state" not in view.labels  # the MIG manager writes it


def test_sanitize_and_family_helpers() -> None:
    assert sanitize_value("NVIDIA  GeForce RTX (TM) 2080 Ti!") == "NVIDIA-GeForce-RTX-TM-2080-Ti"
    assert len(sanitize_value("x" * 200)) == 63
    assert arch_family(8, 9) == "ada-lovelace" and arch_family(7, 0) == "volta"
    assert arch_family(9, 0) == "hopper" and arch_family(8, 0) == "ampere"


def test_recorded_real_h100_snapshot_plans_and_labels() -> None:
    """The NVML snapshot recorded on a real H100 goes through the same view as simulated ones;
    a desired MIG layout is reported, never applied."""
    from pathlib import Path

    from kgpu.hardware.serialize import load_snapshot

    snapshot = Path(__file__).resolve().parents[1] / "data" / "h100-nvml-snapshot.json"
    machine = load_snapshot(snapshot)
    assert machine.real
    configs = load_config_strings({"f.yaml": "flags: {migStrategy: mixed}\n"})
    view = build_node_view(machine, configs, {"nvidia.com/mig.config": "all-balanced"})
    assert view.counts() == {"nvidia.com/gpu": 1}
    assert "GPU 0: 1g.10gb x 2 + 2g.20gb x 1 + 3g.40gb x 1 wanted, MIG disabled present" in (
        view.mig_pending
    )
    assert "nvidia.com/mig.config.state" not in view.labels
    plain = build_node_view(machine, load_config_strings({}), {})
    assert plain.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert plain.labels["nvidia.com/gpu.family"] == "hopper"
    assert plain.labels["nvidia.com/cuda.driver.major"] == machine.driver_version.split(".")[0]


@pytest.mark.parametrize("key", ["nvidia.com\n/gpu", "nvidia.com/gpu\n", "gpu\n"])
def test_a_trailing_newline_never_passes_as_a_label_key(key: str) -> None:
    """``$`` matches before a final newline; the API server's rule is the whole string."""
    assert not is_valid_label_key(key)
    assert not is_valid_label_value("value\n")
