"""Machine profiles: real product facts, unique UUIDs per node, fabric cliques."""

from __future__ import annotations

import re

import pytest

from kgpu.errors import FieldError
from kgpu.hardware.profiles import describe_profiles, load_machine, profile_names

UUID_RE = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
BUS_RE = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")

# What `nvidia-smi --query-gpu=name,memory.total,compute_cap` prints on each machine.
EXPECTED = {
    "rtx-2080ti": (1, "NVIDIA GeForce RTX 2080 Ti", 11264, (7, 5), "turing", False),
    "rtx-4090": (1, "NVIDIA GeForce RTX 4090", 24564, (8, 9), "ada-lovelace", False),
    "t4": (1, "Tesla T4", 15360, (7, 5), "turing", False),
    "a40": (1, "NVIDIA A40", 46068, (8, 6), "ampere", False),
    "a30": (1, "NVIDIA A30", 24576, (8, 0), "ampere", True),
    "a100-40gb": (1, "NVIDIA A100-SXM4-40GB", 40960, (8, 0), "ampere", True),
    "a100-80gb": (1, "NVIDIA A100-SXM4-80GB", 81920, (8, 0), "ampere", True),
    "p4de.24xlarge": (8, "NVIDIA A100-SXM4-80GB", 81920, (8, 0), "ampere", True),
    "dgx-h100": (8, "NVIDIA H100 80GB HBM3", 81559, (9, 0), "hopper", True),
    "h100-80gb": (1, "NVIDIA H100 80GB HBM3", 81559, (9, 0), "hopper", True),
    "h200": (1, "NVIDIA H200", 143771, (9, 0), "hopper", True),
    "gb200": (4, "NVIDIA GB200", 189471, (10, 0), "blackwell", True),
}
CLIQUE = "7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.3"


def test_every_required_profile_exists() -> None:
    assert set(EXPECTED) <= set(profile_names())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_reports_real_product_facts(name: str) -> None:
    count, product, memory, cc, arch, mig = EXPECTED[name]
    machine = load_machine(name)
    assert machine.profile == name
    assert len(machine.gpus) == count
    assert [g.index for g in machine.gpus] == list(range(count))
    assert re.match(r"^\d{3}\.\d+(\.\d+)?$", machine.driver_version)
    assert machine.cuda_version == "12.8"
    for gpu in machine.gpus:
        assert (gpu.product_name, gpu.memory_mib, gpu.compute_capability) == (product, memory, cc)
        assert gpu.architecture == arch
        assert gpu.mig_capable is mig and not gpu.mig_enabled and gpu.mig_devices == ()
        assert UUID_RE.match(gpu.uuid)
        assert BUS_RE.match(gpu.pci_bus_id)
        assert gpu.multiprocessor_count > 0 and gpu.power_limit_w > 0
    assert len({g.pci_bus_id for g in machine.gpus}) == count


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_uuids_unique_across_nodes_and_stable(name: str) -> None:
    seen: set[str] = set()
    for host in ("node-a", "node-b", "node-c", ""):
        uuids = [g.uuid for g in load_machine(name, hostname=host).gpus]
        assert not seen & set(uuids)
        seen |= set(uuids)
    assert load_machine(name, hostname="node-a") == load_machine(name, hostname="node-a")


def test_nvswitch_machines_connect_every_pair() -> None:
    machine = load_machine("p4de.24xlarge")
    assert all(g.has_nvswitch for g in machine.gpus)
    assert machine.nvlink_connected(0, 7) == 12
    assert [g.numa_node for g in machine.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    h100 = load_machine("dgx-h100")
    assert h100.nvlink_connected(2, 5) == 18
    assert load_machine("t4").gpus[0].nvlinks == ()


def test_gb200_clique_sets_fabric_on_every_gpu() -> None:
    plain = load_machine("gb200", hostname="gb-0")
    assert all(g.fabric is None for g in plain.gpus)
    machine = load_machine("gb200", hostname="gb-0", clique=CLIQUE)
    assert {g.fabric.clique for g in machine.gpus if g.fabric} == {CLIQUE}
    assert all(g.fabric and g.fabric.state == "completed" for g in machine.gpus)


def test_clique_on_a_product_without_fabric_is_rejected() -> None:
    with pytest.raises(FieldError, match="no multi-node NVLink fabric"):
        load_machine("dgx-h100", clique=CLIQUE)


@pytest.mark.parametrize(
    "bad",
    ["nodot", "rack a.1", "-rack.1", "7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.x", "x" * 70 + ".1"],
)
def test_malformed_clique_is_rejected(bad: str) -> None:
    with pytest.raises(FieldError, match="clique"):
        load_machine("gb200", clique=bad)


def test_scenario_style_clique_names_are_accepted() -> None:
    """The simulator's scenario schema names racks freely (``clique: cluster-abc.0``)."""
    machine = load_machine("gb200", hostname="gb-0", clique="cluster-abc.0")
    assert {g.fabric.clique for g in machine.gpus if g.fabric} == {"cluster-abc.0"}


def test_unknown_profile_lists_known_ones() -> None:
    with pytest.raises(FieldError) as info:
        load_machine("rtx-9090")
    assert "rtx-9090" in str(info.value) and "dgx-h100" in str(info.value)


def test_describe_profiles_matches_loaded_machines() -> None:
    rows = {row["name"]: row for row in describe_profiles()}
    assert set(rows) == set(profile_names())
    for name, row in rows.items():
        machine = load_machine(name)
        assert row["gpus"] == len(machine.gpus)
        assert row["product"] == machine.gpus[0].product_name
        assert row["migCapable"] == machine.gpus[0].mig_capable
    assert rows["p4de.24xlarge"]["interconnect"] == "NVSwitch"
    assert rows["gb200"]["fabric"] is True
