"""Where kgpu followed NVIDIA's device plugin and GFD closely enough to be wrong, now as upstream
has it (issue 16), and real GPUs' MIG state as the node has it (issue 14): one test per
behaviour, through what a user runs (``kgpu plan``, ``kgpu validate``, the node view, the
agent's status)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.cli import app
from kgpu.config import load_config_strings
from kgpu.config.plugin import parse_plugin_config
from kgpu.drivers.migpreview import machine_after_mig
from kgpu.errors import FieldError
from kgpu.hardware.model import MigEngines
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.serialize import load_snapshot
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.node.allocate import container_allocation, preferred_allocation
from kgpu.node.view import build_node_view

runner = CliRunner()
DATA = Path(__file__).resolve().parents[1] / "data"
SNAPSHOT_7X1G = DATA / "h100-nvml-snapshot-7x1g.10gb.json"
TIME_SLICED = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n"


def _plan(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["plan", *args])
    return result.exit_code, result.output


def _gfd(value: Any) -> Any:
    return parse_plugin_config({"flags": {"gfd": {"sleepInterval": value}}}).config.flags.gfd


# -- flags.gfd.sleepInterval --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "nanoseconds"),
    [
        (60, 60),  # a number is nanoseconds, as Go's time.Duration
        (1.9, 1),  # float64 to Duration truncates toward zero
        ("60s", 60_000_000_000),
        ("1m30s", 90_000_000_000),
        ("1.5h", 5_400_000_000_000),
        ("-2ms", -2_000_000),
        ("300µs", 300_000),
        ("infinite", 2**63 - 1),
    ],
)
def test_sleep_interval_reads_numbers_durations_and_infinite(value: Any, nanoseconds: int) -> None:
    assert _gfd(value).sleep_interval == nanoseconds


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("60", 'time: missing unit in duration "60"'),
        ("5 s", 'time: unknown unit " s" in duration "5 s"'),
        ("soon", 'time: invalid duration "soon"'),
        (True, "True is not a duration"),
    ],
)
def test_a_bad_sleep_interval_says_what_go_would(value: Any, why: str) -> None:
    with pytest.raises(FieldError) as info:
        _gfd(value)
    assert f"flags.gfd.sleepInterval: {why}" in str(info.value)


# -- imex.channelIDs ------------------------------------------------------------------------


def test_imex_channel_ids_other_than_zero_are_refused_with_upstreams_reason(
    tmp_path: Path,
) -> None:
    path = tmp_path / "imex.yaml"
    path.write_text("version: v1\nimex: {channelIDs: [0, 1]}\n")
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert (
        "imex.channelIDs: invalid IMEX config: channelIDs must be [] or [0]; found [0 1]"
        in result.output
    )
    path.write_text("version: v1\nimex: {channelIDs: [0], required: true}\n")
    assert runner.invoke(app, ["validate", str(path)]).exit_code == 0


# -- MIG-enabled GPUs under migStrategy none ---------------------------------------------------


def test_mig_enabled_gpus_under_strategy_none_are_labelled_unshared() -> None:
    configs = load_config_strings({"ts.yaml": TIME_SLICED})
    labels = {"nvidia.com/mig.config": "all-1g.10gb"}
    view = build_node_view(
        machine_after_mig(load_machine("a100-80gb"), configs, labels),
        configs,
        labels,
        mig_strategy="none",
    )
    # upstream's plugin still advertises (and time-slices) the MIG-enabled GPU whole...
    assert view.counts() == {"nvidia.com/gpu": 4}
    # ...while GFD labels it without sharing
    assert view.labels["nvidia.com/gpu.replicas"] == "0"
    assert view.labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert view.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"


# -- migStrategy single on an invalid node: labels and refusal --------------------------------


@pytest.mark.parametrize("mig_config", ["all-balanced", "p4de-half-balanced"])
def test_single_strategy_on_an_invalid_node_labels_it_and_serves_nothing(
    mig_config: str, acceptance: Path
) -> None:
    """Several profiles on the GPUs (and, for p4de-half-balanced, MIG-disabled GPUs beside
    them: upstream checks the profiles first)."""
    reason = "more than one MIG device type present on node"
    values = str(acceptance / "seed-guides/gpu-operator-values.yaml")
    code, out = _plan(
        "-m", "p4de.24xlarge", "-c", values, "--mig-strategy", "single",
        "-l", f"nvidia.com/mig.config={mig_config}", "-o", "json",
    )  # fmt: skip
    assert code == 0
    # the GPUs are whole now (nothing to refuse); after the MIG manager applies the layout
    plan = json.loads(out)
    assert plan["resources"] == {"nvidia.com/gpu": 8} and "refused" not in plan
    plan = plan["migManager"]["after"]
    assert plan["resources"] == {}
    assert plan["refused"][0]["resource"] == "nvidia.com/gpu"
    assert reason in plan["refused"][0]["reason"]
    labels = plan["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-INVALID"
    assert labels["nvidia.com/gpu.count"] == labels["nvidia.com/gpu.replicas"] == "0"
    assert labels["nvidia.com/gpu.memory"] == "0"
    # upstream's value for a node no GPU of which is shareable here: empty, not "none"
    assert labels["nvidia.com/gpu.sharing-strategy"] == ""
    assert any("refuses this node" in w for w in plan["warnings"])


def test_the_agent_serves_nothing_for_a_refused_resource_and_says_why(tmp_path: Path) -> None:
    config = tmp_path / "single.yaml"
    config.write_text("version: v1\nflags: {migStrategy: single}\n")
    labels = {"nvidia.com/mig.config": "all-balanced"}
    machine = machine_after_mig(load_machine("a100-80gb"), load_config_strings({}), labels)
    agent = Agent(
        AgentOptions(
            machine="a100-80gb",
            kubelet_root=tmp_path,
            config_files=(config,),
            labels=labels,
            dra=False,
        ),
        backend=SimulatedBackend(machine),  # as the MIG manager left it
    )
    assert agent.reload("test")
    status = agent.status()
    assert status["resources"] == {}
    assert "more than one MIG device type" in status["refused"]["nvidia.com/gpu"]


# -- MPS --------------------------------------------------------------------------------------


def test_mps_on_a_node_with_a_mig_enabled_gpu_fails_as_gfd_does() -> None:
    configs = load_config_strings(
        {"mps.yaml": "sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n"}
    )
    labels = {"nvidia.com/mig.config": "all-1g.10gb"}
    machine = machine_after_mig(load_machine("a100-80gb"), configs, labels)
    with pytest.raises(FieldError) as info:
        build_node_view(machine, configs, labels)
    assert "sharing.mps: MPS sharing is not supported for mig devices: GPU 0 has MIG enabled" in (
        str(info.value)
    )


def test_an_mps_entry_for_a_resource_the_node_lacks_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "mps.yaml"
    path.write_text("sharing: {mps: {resources: [{name: nvidia.com/mig-1g.10gb, replicas: 2}]}}\n")
    assert runner.invoke(app, ["validate", str(path)]).exit_code == 0
    code, out = _plan("-m", "t4", "-c", str(path), "-o", "json")
    assert code == 0
    plan = json.loads(out)
    assert plan["resources"] == {"nvidia.com/gpu": 1}
    labels = plan["labels"]
    assert labels["nvidia.com/gpu.replicas"] == "1"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels["nvidia.com/mps.capable"] == "true"  # GFD reads the config's strategy
    assert any("nvidia.com/mig-1g.10gb is not advertised" in w for w in plan["warnings"])


# -- MIG device attributes --------------------------------------------------------------------


def test_mig_labels_carry_engines_multiprocessors_and_ci_slices() -> None:
    configs = load_config_strings({"f.yaml": "flags: {migStrategy: mixed}\n"})
    labels = {"nvidia.com/mig.config": "all-balanced"}
    view = build_node_view(
        machine_after_mig(load_machine("dgx-h100"), configs, labels), configs, labels
    )
    labels = view.labels
    # H100's published table: a 3g.40gb instance has 3 copy engines, 3 decoders, 3 JPEG, no OFA
    assert labels["nvidia.com/mig-3g.40gb.engines.copy"] == "3"
    assert labels["nvidia.com/mig-3g.40gb.engines.decoder"] == "3"
    assert labels["nvidia.com/mig-3g.40gb.engines.encoder"] == "0"
    assert labels["nvidia.com/mig-3g.40gb.engines.jpeg"] == "3"
    assert labels["nvidia.com/mig-3g.40gb.engines.ofa"] == "0"
    assert labels["nvidia.com/mig-3g.40gb.multiprocessors"] == "60"
    assert labels["nvidia.com/mig-3g.40gb.slices.gi"] == "3"
    assert labels["nvidia.com/mig-3g.40gb.slices.ci"] == "3"


def test_nvml_reads_mig_engines_from_device_attributes_or_the_profile() -> None:
    """GFD labels NVML's device attributes; without them the GPU-instance profile answers."""
    with_attrs = SimpleNamespace(
        sharedCopyEngineCount=2, sharedDecoderCount=1, sharedEncoderCount=0,
        sharedJpegCount=1, sharedOfaCount=0,
    )  # fmt: skip
    backend = NvmlBackend.__new__(NvmlBackend)
    assert backend._mig_engines(None, with_attrs, None) == MigEngines(2, 1, 0, 1, 0)

    class Nvml:
        NVMLError = RuntimeError
        NVML_GPU_INSTANCE_PROFILE_COUNT = 3

        def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: int) -> Any:
            return SimpleNamespace(
                id=[19, 15, 14][profile], copyEngineCount=profile + 1, decoderCount=1,
                encoderCount=0, jpegCount=1, ofaCount=profile,
            )  # fmt: skip

    backend._nvml = Nvml()
    info = SimpleNamespace(profileId=14)
    assert backend._mig_engines("gpu", SimpleNamespace(), info) == MigEngines(3, 1, 0, 1, 2)
    assert backend._mig_engines("gpu", None, None) is None


# -- sharedDevicesAllocationPolicy, node feature environments ---------------------------------


def test_shared_devices_allocation_policy_packs_replicas() -> None:
    text = (
        "flags: {plugin: {sharedDevicesAllocationPolicy: packed}}\n"
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4}]}}\n"
    )
    view = build_node_view(load_machine("dgx-h100"), load_config_strings({"p.yaml": text}), {})
    ids = [d.id for d in view.resource("nvidia.com/gpu").devices]
    got = preferred_allocation(view, "nvidia.com/gpu", ids, [], 3)
    assert len({view.device(i).gpu_index for i in got}) == 1
    with pytest.raises(FieldError, match="sharedDevicesAllocationPolicy"):
        parse_plugin_config({"flags": {"plugin": {"sharedDevicesAllocationPolicy": "greedy"}}})


def test_gds_mofed_and_gdrcopy_flags_set_upstreams_environment() -> None:
    text = "flags: {gdsEnabled: true, mofedEnabled: true, gdrcopyEnabled: false}\n"
    view = build_node_view(load_machine("t4"), load_config_strings({"f.yaml": text}), {})
    gpu = view.resource("nvidia.com/gpu").devices[0].id
    envs = container_allocation(view, "nvidia.com/gpu", [gpu]).envs
    assert envs["NVIDIA_GDS"] == envs["NVIDIA_MOFED"] == "enabled"
    assert "NVIDIA_GDRCOPY" not in envs


# -- real GPUs: MIG as the node has it (issue 14) ---------------------------------------------


def test_real_mig_devices_are_advertised_and_a_different_layout_is_only_reported() -> None:
    machine = load_snapshot(SNAPSHOT_7X1G)
    assert machine.real
    real = [m.uuid for m in machine.gpus[0].mig_devices]
    for strategy in ("mixed", "single"):
        view = build_node_view(
            machine,
            load_config_strings({}),
            {"nvidia.com/mig.config": "all-3g.40gb"},
            mig_strategy=strategy,
        )
        resource = "nvidia.com/mig-1g.10gb" if strategy == "mixed" else "nvidia.com/gpu"
        assert [d.id for d in view.resource(resource).devices] == real
        assert "GPU 0: 3g.40gb x 2 wanted, 1g.10gb x 7 present" in view.mig_pending
        assert view.mig_pending in view.warnings
        assert "nvidia.com/mig.config.state" not in view.labels
        assert view.machine == machine  # never applied


def test_plan_on_a_recorded_mig_snapshot_plans_the_seven_devices_with_a_warning() -> None:
    code, out = _plan(
        "-m", str(SNAPSHOT_7X1G), "-l", "nvidia.com/mig.config=all-3g.40gb",
        "--mig-strategy", "mixed", "-o", "json",
    )  # fmt: skip
    assert code == 0
    plan = json.loads(out)
    assert plan["resources"] == {"nvidia.com/mig-1g.10gb": 7}
    assert "all-3g.40gb" in plan["migPending"]
    assert any("until the MIG manager applies the layout" in w for w in plan["warnings"])
    # what the MIG manager would make of the recorded GPU, on a simulated copy of it
    manager = plan["migManager"]
    assert [(row["gpu"], row["from"], row["to"]) for row in manager["plan"]] == [
        (0, "7 x 1g.10gb", "2 x 3g.40gb")
    ]
    assert manager["after"]["resources"] == {"nvidia.com/mig-3g.40gb": 2}
    code, table = _plan("-m", str(SNAPSHOT_7X1G), "-l", "nvidia.com/mig.config=all-3g.40gb")
    table = " ".join(table.split())  # the header wraps at the terminal's width
    assert code == 0 and "mig config all-3g.40gb (the MIG manager has not applied it" in table
    assert "MIG manager plan: all-3g.40gb (the GPUs do not have it yet)" in table
    assert "Resources after the MIG manager applies all-3g.40gb" in table


def test_a_matching_layout_is_quiet_and_simulated_gpus_are_not_applied_either() -> None:
    machine = load_snapshot(SNAPSHOT_7X1G)
    view = build_node_view(
        machine, load_config_strings({}), {"nvidia.com/mig.config": "all-1g.10gb"},
        mig_strategy="mixed",
    )  # fmt: skip
    assert view.mig_pending == "" and view.counts() == {"nvidia.com/mig-1g.10gb": 7}
    # a simulated machine is no different: the MIG manager, not the view, changes its GPUs
    dgx = load_machine("dgx-h100")
    simulated = build_node_view(
        dgx, load_config_strings({}),
        {"nvidia.com/mig.config": "all-3g.40gb"}, mig_strategy="mixed",
    )  # fmt: skip
    assert simulated.machine == dgx and simulated.counts() == {"nvidia.com/gpu": 8}
    assert "GPU 7: 3g.40gb x 2 wanted, MIG disabled present" in simulated.mig_pending
    assert "nvidia.com/mig.config.state" not in simulated.labels
