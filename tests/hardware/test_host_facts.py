"""The host facts GFD's labels and the DRA driver's attributes need beside NVML (issue 22):
read from sysfs under an injectable root, recorded in the snapshot, reproduced from it.

The H200 of 2026-11-28: PCI class 0x030200, no DMI product name (a VM), PCIe root pci0000:00,
addressing mode None, pass-through.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pynvml
import pytest

from kgpu.agent.nfd import TIMESTAMP_LABEL, FeaturesComponent
from kgpu.config.loader import ConfigSet, load_config_strings
from kgpu.dra.devices import PCIE_ROOT
from kgpu.dra.slices import resource_slices
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.serialize import machine_from_dict, machine_to_dict
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.node.labels import node_labels
from kgpu.node.view import build_node_view
from kgpu.testing.fake_nvml import FakeNvml


def lay_out_sysfs(root: Path, bus: str, pci_class: str, parents: str, dmi: str | None) -> None:
    """``/sys/bus/pci/devices/<bdf>`` -> ``../../../devices/<parents>/<bdf>``, as the kernel."""
    device = root / "sys/devices" / parents / bus
    device.mkdir(parents=True)
    (device / "class").write_text(pci_class + "\n")
    links = root / "sys/bus/pci/devices"
    links.mkdir(parents=True, exist_ok=True)
    os.symlink(f"../../../devices/{parents}/{bus}", links / bus)
    if dmi is not None:
        (root / "sys/class/dmi/id").mkdir(parents=True)
        (root / "sys/class/dmi/id/product_name").write_text(dmi + "\n")


def h200_node(
    tmp_path: Path, *, dmi: str | None = None, parents: str = "pci0000:00"
) -> NvmlBackend:
    sim = SimulatedBackend(load_machine("h200", hostname="n"))
    gpu = sim.snapshot().gpus[0]
    domain, _, rest = gpu.pci_bus_id.partition(":")
    lay_out_sysfs(tmp_path, f"{domain[-4:]}:{rest}".lower(), "0x030200", parents, dmi)
    return NvmlBackend(FakeNvml(sim), host_root=tmp_path)


def test_a_vm_without_dmi_is_labelled_as_gfd_labels_it(tmp_path: Path) -> None:
    machine = h200_node(tmp_path).snapshot()
    labels = node_labels(machine, [], "none")
    assert labels["nvidia.com/gpu.machine"] == "unknown"
    assert labels["nvidia.com/gpu.mode"] == "compute"
    assert "nvidia.com/vgpu.present" not in labels  # pass-through is not vGPU


def test_the_dmi_product_name_and_a_vgpu_guest(tmp_path: Path) -> None:
    backend = h200_node(tmp_path, dmi="PowerEdge XE9680")
    fake = backend._nvml
    assert isinstance(fake, FakeNvml)
    fake.virtualization_mode = int(pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU)
    labels = node_labels(backend.snapshot(), [], "none")
    assert labels["nvidia.com/gpu.machine"] == "PowerEdge-XE9680"
    assert labels["nvidia.com/vgpu.present"] == "true"


@pytest.mark.parametrize(
    ("pci_class", "mode"),
    # GFD's newGPUModeLabeler: the VGA class is graphics, the 3D controller compute
    [("0x030000", "graphics"), ("0x030200", "compute"), ("0x038000", "unknown")],
)
def test_gpu_mode_follows_the_pci_class(pci_class: str, mode: str) -> None:
    machine = load_machine("dgx-h100", hostname="n")
    machine.extra["pci_classes"] = {g.index: pci_class for g in machine.gpus}
    assert node_labels(machine, [], "none")["nvidia.com/gpu.mode"] == mode


def test_a_simulated_profile_claims_no_host_facts() -> None:
    labels = node_labels(load_machine("dgx-h100", hostname="n"), [], "none")
    assert not {"nvidia.com/gpu.machine", "nvidia.com/gpu.mode"} & set(labels)


def test_dra_attributes_read_the_pcie_root_from_sysfs_behind_a_switch(tmp_path: Path) -> None:
    # behind a PCIe switch the GPU's own bus says nothing about its root complex
    backend = h200_node(tmp_path, parents="pci0000:00/0000:00:01.0/0000:02:00.0")
    machine = backend.snapshot()
    (device,) = resource_slices(machine, "n")[0]["spec"]["devices"][:1]
    attrs = {k: next(iter(v.values())) for k, v in device["attributes"].items()}
    assert attrs[PCIE_ROOT] == "pci0000:00"
    assert attrs["architecture"] == "Hopper"  # go-nvlib's string, not kgpu's "hopper"
    assert attrs["addressingMode"] == "None"


def test_a_snapshot_reproduces_the_node(tmp_path: Path) -> None:
    backend = h200_node(tmp_path, parents="pci0000:00/0000:00:01.0")
    machine = backend.snapshot()
    again = machine_from_dict(json.loads(json.dumps(machine_to_dict(machine))))
    assert node_labels(again, [], "none") == node_labels(machine, [], "none")
    assert resource_slices(again, "n") == resource_slices(machine, "n")


def test_gfd_timestamp_moves_only_when_the_labels_change(tmp_path: Path) -> None:
    now = [1_700_000_000.0]
    component = FeaturesComponent(tmp_path, wall_clock=lambda: now[0])
    view = build_node_view(load_machine("dgx-h100", hostname="n"), ConfigSet(), {})
    component.on_view(view)
    assert component.labels()[TIMESTAMP_LABEL] == "1700000000"
    now[0] += 60
    component.on_view(view)  # the same labels: the same stamp, nothing rewritten
    assert component.labels()[TIMESTAMP_LABEL] == "1700000000"
    component.set_labels({"nvidia.com/mig.config.state": "success"})
    assert component.labels()[TIMESTAMP_LABEL] == "1700000060"
    assert f"{TIMESTAMP_LABEL}=1700000060" in (tmp_path / "kgpu-features").read_text()


def test_no_timestamp_leaves_the_label_out(tmp_path: Path) -> None:
    config = load_config_strings({"c.yaml": "version: v1\nflags:\n  gfd:\n    noTimestamp: true\n"})
    view = build_node_view(load_machine("dgx-h100", hostname="n"), config, {})
    component = FeaturesComponent(tmp_path)
    component.on_view(view)
    assert TIMESTAMP_LABEL not in component.labels()
