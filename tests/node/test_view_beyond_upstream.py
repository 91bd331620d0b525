"""What kgpu does beyond upstream: per-GPU strategies, honoured devices and renames; ids."""

from __future__ import annotations

from kgpu.config import load_config_strings
from kgpu.drivers.migpreview import machine_after_mig
from kgpu.hardware.profiles import load_machine
from kgpu.node.model import Sharing
from kgpu.node.view import build_node_view

SPLIT = """
version: v1
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      rename: nvidia.com/gpu.ts
      devices: [0, 1, 2, 3]
      replicas: 4
  mps:
    resources:
    - name: nvidia.com/gpu
      rename: nvidia.com/gpu.mps
      devices: [4, 5]
      replicas: 2
"""


def test_time_slicing_on_some_gpus_mps_on_others_whole_on_the_rest() -> None:
    view = build_node_view(load_machine("dgx-h100"), load_config_strings({"split.yaml": SPLIT}), {})
    assert view.counts() == {
        "nvidia.com/gpu": 2,  # GPUs 6 and 7, not selected by either strategy
        "nvidia.com/gpu.mps": 4,
        "nvidia.com/gpu.ts": 16,
    }
    plans = {g.index: g for g in view.gpus}
    assert plans[0].sharing is Sharing.TIME_SLICING and plans[0].replicas == 4
    assert plans[0].resources == ("nvidia.com/gpu.ts",)
    assert plans[4].sharing is Sharing.MPS and plans[4].replicas == 2
    assert plans[7].sharing is Sharing.NONE and plans[7].resources == ("nvidia.com/gpu",)
    mps = view.resource("nvidia.com/gpu.mps").devices[0].mps
    assert mps is not None and mps.active_thread_percentage == 50
    # Each MPS GPU has its own daemon, so its own pipe directory.
    pipes = {
        d.gpu_index: d.mps.pipe_directory
        for d in view.resource("nvidia.com/gpu.mps").devices
        if d.mps
    }
    assert pipes == {
        4: "/run/nvidia/mps/nvidia.com/gpu.mps/4/pipe",
        5: "/run/nvidia/mps/nvidia.com/gpu.mps/5/pipe",
    }
    # Upstream ignores both; the plan says so.
    assert any("devices: [0, 1, 2, 3] is honoured by kgpu" in w for w in view.warnings)
    assert any("rename to nvidia.com/gpu.ts is honoured by kgpu" in w for w in view.warnings)
    # Renamed resources: GFD keeps the product name without -SHARED.
    assert not view.labels["nvidia.com/gpu.product"].endswith("-SHARED")


def test_devices_count_uuid_and_mig_index_select_what_they_name() -> None:
    machine = load_machine("dgx-h100")
    uuid5 = machine.gpus[5].uuid
    text = (
        "sharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
        f"    - {{name: gpu, devices: 2, replicas: 3}}\n"
        f"    - {{name: gpu, devices: ['{uuid5}'], replicas: 5}}\n"
    )
    view = build_node_view(machine, load_config_strings({"c.yaml": text}), {})
    shared = view.resource("nvidia.com/gpu.shared")
    per_gpu: dict[int, int] = {}
    for dev in shared.devices:
        per_gpu[dev.gpu_index] = per_gpu.get(dev.gpu_index, 0) + 1
    assert per_gpu == {0: 3, 1: 3, 5: 5}
    assert view.resource("nvidia.com/gpu").count == 5

    mig_text = (
        "flags: {migStrategy: mixed}\nsharing:\n  timeSlicing:\n    resources:\n"
        "    - {name: nvidia.com/mig-1g.10gb, devices: ['0:1'], replicas: 2}\n"
    )
    mig_configs = load_config_strings({"m.yaml": mig_text})
    ones = {"nvidia.com/mig.config": "all-1g.10gb"}
    mig_view = build_node_view(
        machine_after_mig(load_machine("a100-80gb"), mig_configs, ones), mig_configs, ones
    )
    res = mig_view.resource("nvidia.com/mig-1g.10gb")
    assert res.count == 6 + 2  # six whole MIG devices, one split in two
    shared_ids = [d.id for d in res.devices if d.replica is not None]
    assert len(shared_ids) == 2 and all(i.endswith(("::0", "::1")) for i in shared_ids)


def test_index_id_strategy_changes_visible_ids_not_device_ids() -> None:
    text = "flags: {plugin: {deviceIDStrategy: index}}\n"
    view = build_node_view(load_machine("dgx-h100"), load_config_strings({"i.yaml": text}), {})
    devices = view.resource("nvidia.com/gpu").devices
    assert [d.visible_id for d in devices] == [str(i) for i in range(8)]
    assert all(d.id.startswith("GPU-") for d in devices)
    assert view.device_id_strategy == "index"


def test_none_strategy_advertises_mig_enabled_gpus_whole_with_a_warning() -> None:
    configs = load_config_strings({})
    labels = {"nvidia.com/mig.config": "all-1g.10gb"}
    view = build_node_view(
        machine_after_mig(load_machine("a100-80gb"), configs, labels), configs, labels
    )
    assert view.counts() == {"nvidia.com/gpu": 1}
    assert any("migStrategy is none" in w for w in view.warnings)


def test_views_are_cached_but_labels_are_private_copies() -> None:
    configs = load_config_strings(
        {"c.yaml": "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}"}
    )
    machine = load_machine("t4")
    a = build_node_view(machine, configs, {})
    a.labels["mine"] = "x"
    b = build_node_view(machine, configs, {})
    assert "mine" not in b.labels
    assert a.resources is b.resources  # the same cached computation
