"""What the guides saw on real clusters, reproduced from their files unchanged (README rows 2,
4, 5, 7, 8), plus the upstream rejections users hit.

The node view never applies a MIG layout: a MIG row is the view of the GPUs as the MIG manager
leaves them (:func:`kgpu.drivers.migpreview.machine_after_mig` runs the manager's plan on a
simulated copy), and of the GPUs before, which only report the layout as pending."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgpu.config import load_config_files
from kgpu.config.loader import EMPTY
from kgpu.drivers.migpreview import machine_after_mig, preview_mig
from kgpu.errors import FieldError
from kgpu.hardware.profiles import load_machine
from kgpu.node.model import Sharing
from kgpu.node.view import build_node_view


def test_row2_2080ti_time_slicing_six_replicas(acceptance: Path) -> None:
    configs = load_config_files([acceptance / "seed-guides/time-slicing-config-2080ti.yaml"])
    view = build_node_view(load_machine("rtx-2080ti"), configs, {}, config_name="2080ti-12gb")
    assert view.counts() == {"nvidia.com/gpu": 6}
    assert view.labels["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-2080-Ti-SHARED"
    assert view.labels["nvidia.com/gpu.replicas"] == "6"
    assert view.labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    gpu = view.machine.gpus[0]
    ids = [d.id for d in view.resource("nvidia.com/gpu").devices]
    assert ids == [f"{gpu.uuid}::{n}" for n in range(6)]
    assert {d.visible_id for d in view.resource("nvidia.com/gpu").devices} == {gpu.uuid}
    assert view.gpus[0].sharing is Sharing.TIME_SLICING and view.gpus[0].replicas == 6


def test_row4_any_mps_four_clients_with_limits(acceptance: Path) -> None:
    configs = load_config_files([acceptance / "seed-guides/gpu-sharing-config-any-mps.yaml"])
    machine = load_machine("t4")
    view = build_node_view(machine, configs, {})
    res = view.resource("nvidia.com/gpu")
    assert res.count == 4 and res.sharing is Sharing.MPS
    assert res.fail_requests_greater_than_one  # upstream forces it for MPS
    mps = res.devices[0].mps
    assert mps is not None
    assert mps.active_thread_percentage == 25
    assert mps.pinned_memory_limit_mib == machine.gpus[0].memory_mib // 4
    # One control daemon per GPU: the pipe lives under the GPU's index (upstream: per resource).
    assert mps.pipe_directory == "/run/nvidia/mps/nvidia.com/gpu/0/pipe"
    assert mps.log_directory == "/run/nvidia/mps/nvidia.com/gpu/0/log"
    assert mps.shm_directory == "/run/nvidia/mps/shm"
    assert view.labels["nvidia.com/mps.capable"] == "true"


def test_row5_label_selects_time_slicing_or_mps_per_node(acceptance: Path) -> None:
    configs = load_config_files([acceptance / "vks-samples/multiple-gpu-sharing.yaml"])
    ti = build_node_view(
        load_machine("rtx-2080ti"), configs, {"nvidia.com/device-plugin.config": "rtx-2080ti"}
    )
    ada = build_node_view(
        load_machine("rtx-4090"), configs, {"nvidia.com/device-plugin.config": "rtx-4090"}
    )
    assert ti.counts() == {"nvidia.com/gpu": 4}
    assert ti.resource("nvidia.com/gpu").sharing is Sharing.TIME_SLICING
    assert ada.counts() == {"nvidia.com/gpu": 8}
    assert ada.resource("nvidia.com/gpu").sharing is Sharing.MPS
    assert ada.labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert ti.config_name == "rtx-2080ti" and ada.config_name == "rtx-4090"


def test_row7_p4de_half_balanced_mixed(acceptance: Path) -> None:
    configs = load_config_files([acceptance / "seed-guides/gpu-operator-values.yaml"])
    labels = {"nvidia.com/mig.config": "p4de-half-balanced"}
    before = build_node_view(load_machine("p4de.24xlarge"), configs, labels)
    # the GPUs are whole until the MIG manager splits them: the view says so, applies nothing
    assert before.counts() == {"nvidia.com/gpu": 8}
    assert "GPU 0: 1g.10gb x 2 + 2g.20gb x 1 + 3g.40gb x 1 wanted" in before.mig_pending
    assert "nvidia.com/mig.config.state" not in before.labels
    view = build_node_view(machine_after_mig(before.machine, configs, labels), configs, labels)
    assert view.mig_pending == ""
    assert view.mig_strategy == "mixed"
    assert view.counts() == {
        "nvidia.com/mig-1g.10gb": 8,
        "nvidia.com/mig-2g.20gb": 4,
        "nvidia.com/mig-3g.40gb": 4,
        "nvidia.com/gpu": 4,
    }
    assert [g.index for g in view.gpus if g.mig_devices] == [0, 1, 2, 3]
    assert sorted(view.gpus[0].mig_devices) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert view.labels["nvidia.com/mig.strategy"] == "mixed"
    assert view.labels["nvidia.com/mig-1g.10gb.count"] == "8"
    assert view.labels["nvidia.com/mig-3g.40gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"
    assert "nvidia.com/mig.config.state" not in view.labels  # the MIG manager's label
    mig_dev = view.resource("nvidia.com/mig-3g.40gb").devices[0]
    assert mig_dev.id == mig_dev.mig_uuid and mig_dev.gpu_index in (0, 1, 2, 3)


def test_row7_without_label_uses_the_values_default_all_disabled(acceptance: Path) -> None:
    configs = load_config_files([acceptance / "seed-guides/gpu-operator-values.yaml"])
    view = build_node_view(load_machine("p4de.24xlarge"), configs, {})
    assert view.mig_config_name == "all-disabled"
    assert view.counts() == {"nvidia.com/gpu": 8}


def test_all_disabled_on_gpus_without_mig_leaves_the_machine_and_labels_no_mig_state() -> None:
    machine = load_machine("t4")
    view = build_node_view(machine, EMPTY, {"nvidia.com/mig.config": "all-disabled"})
    assert view.mig_config_name == "all-disabled"
    assert view.machine == machine
    assert view.counts() == {"nvidia.com/gpu": len(machine.gpus)}
    assert "nvidia.com/mig.config.state" not in view.labels
    assert view.labels["nvidia.com/mig.capable"] == "false"


def test_row8_t4_and_a100_mig_profiles_times_replicas(acceptance: Path) -> None:
    configs = load_config_files([acceptance / "seed-guides/time-slicing-config-t4-a100.yaml"])
    t4 = build_node_view(load_machine("t4"), configs, {}, config_name="tesla-t4")
    assert t4.counts() == {"nvidia.com/gpu": 4}
    labels = {
        "nvidia.com/device-plugin.config": "a100-40gb",
        "nvidia.com/mig.config": "all-balanced",
    }
    a100 = build_node_view(
        machine_after_mig(load_machine("a100-40gb"), configs, labels),
        configs,
        labels,
        mig_strategy="mixed",
    )
    # all-balanced on an A100 40GB: 2 x 1g.5gb + 1 x 2g.10gb + 1 x 3g.20gb, each times its replicas
    assert a100.counts() == {
        "nvidia.com/mig-1g.5gb": 2 * 2,
        "nvidia.com/mig-2g.10gb": 1 * 2,
        "nvidia.com/mig-3g.20gb": 1 * 3,
    }
    assert a100.labels["nvidia.com/mig-3g.20gb.product"].endswith("-SHARED")
    assert any("mig-7g.40gb is not advertised" in w for w in a100.warnings)


def test_impossible_mig_layout_is_reported_by_the_view_and_refused_by_the_manager() -> None:
    from kgpu.config import load_config_strings

    configs = load_config_strings(
        {
            "m.yaml": "version: v1\nmig-configs:\n  greedy:\n    - devices: all\n"
            "      mig-enabled: true\n"
            "      mig-devices: {'3g.40gb': 3}\n"
        }
    )
    a100 = load_machine("a100-80gb")
    view = build_node_view(a100, configs, {"nvidia.com/mig.config": "greedy"})
    assert view.machine == a100 and view.counts() == {"nvidia.com/gpu": len(a100.gpus)}
    assert "mig config 'greedy' cannot be applied" in view.mig_pending
    assert "3g.40gb" in view.mig_pending
    with pytest.raises(FieldError) as info:
        preview_mig(a100, configs.mig_configs["greedy"])
    message = str(info.value)
    assert message.startswith("m.yaml: mig-configs.greedy: cannot apply mig config 'greedy'")
    assert "3g.40gb" in message
    wrong_product = load_config_strings(
        {
            "m.yaml": "version: v1\nmig-configs:\n  odd:\n    - devices: all\n"
            "      mig-enabled: true\n"
            "      mig-devices: {'1g.5gb': 1}\n"
        }
    )
    with pytest.raises(FieldError, match=r"1g\.5gb does not exist"):
        machine_after_mig(a100, wrong_product, {"nvidia.com/mig.config": "odd"})
    t4 = build_node_view(load_machine("t4"), configs, {"nvidia.com/mig.config": "greedy"})
    assert "not MIG capable" in t4.mig_pending
    with pytest.raises(FieldError, match="not MIG capable"):
        machine_after_mig(load_machine("t4"), configs, {"nvidia.com/mig.config": "greedy"})


def test_mps_rejected_under_mixed_strategy_from_helm_values(acceptance: Path) -> None:
    configs = load_config_files(
        [
            acceptance / "seed-guides/gpu-operator-values.yaml",
            acceptance / "seed-guides/gpu-sharing-config-any-mps.yaml",
        ]
    )
    with pytest.raises(FieldError, match="not supported with migStrategy mixed"):
        build_node_view(load_machine("a100-80gb"), configs, {}, config_name="any-mps")


def test_mps_replicas_above_client_limit_rejected() -> None:
    from kgpu.config import load_config_strings

    configs = load_config_strings(
        {"mps.yaml": "sharing: {mps: {resources: [{name: gpu, replicas: 49}]}}\n"}
    )
    with pytest.raises(FieldError, match=r"replicas: must be <= 48 on GPU 0"):
        build_node_view(load_machine("t4"), configs, {})


def test_mps_on_mig_devices_under_single_rejected() -> None:
    from kgpu.config import load_config_strings

    configs = load_config_strings(
        {
            "mps.yaml": "flags: {migStrategy: single}\n"
            "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}\n"
        }
    )
    # GFD refuses MPS on any node with a MIG-enabled GPU, before the plugin looks at devices
    labels = {"nvidia.com/mig.config": "all-1g.10gb"}
    machine = machine_after_mig(load_machine("a100-80gb"), configs, labels)
    with pytest.raises(FieldError, match="MPS sharing is not supported for mig devices"):
        build_node_view(machine, configs, labels)


def test_single_strategy_needs_one_profile() -> None:
    from kgpu.config import load_config_strings

    single = load_config_strings({"s.yaml": "flags: {migStrategy: single}\n"})
    ones = {"nvidia.com/mig.config": "all-1g.10gb"}
    view = build_node_view(machine_after_mig(load_machine("a100-80gb"), single, ones), single, ones)
    assert view.counts() == {"nvidia.com/gpu": 7}
    assert view.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert view.labels["nvidia.com/gpu.count"] == "7"
    assert view.labels["nvidia.com/gpu.slices.gi"] == "1"
    # several profiles: the plugin refuses to serve (labels still written, MIG-INVALID)
    mixed = {"nvidia.com/mig.config": "all-balanced"}
    balanced = build_node_view(
        machine_after_mig(load_machine("a100-80gb"), single, mixed), single, mixed
    )
    assert balanced.counts() == {}
    assert "more than one MIG device type present on node" in balanced.refused[0].reason
