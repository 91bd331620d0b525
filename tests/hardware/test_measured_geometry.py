"""MIG geometry as NVML measures it (issue 22): a real H200 said 16,384 / 33,280 / 71,424 /
143,360 MiB where kgpu's table said 17,664 / 35,456 / 71,296 / 142,592. The table is checked
against every recording kgpu has, and a real node's snapshot records what its NVML says."""

from __future__ import annotations

import json
from pathlib import Path

from kgpu.hardware.mig import (
    apply_layout,
    geometry_differences,
    geometry_for_product,
    geometry_from_table,
)
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.testing.fake_nvml import FakeNvml

DATA = Path(__file__).resolve().parents[1] / "data"


def recorded_h200() -> dict[str, object]:
    """tests/data/h200-gi-profiles.json (NVML's GPU-instance profile info on the H200) in
    mig.yaml's shape; NVML gave no placements there."""
    raw = json.loads((DATA / "h200-gi-profiles.json").read_text())
    names = {0: "1g.18gb", 1: "2g.35gb", 2: "3g.71gb", 3: "4g.71gb", 4: "7g.141gb"}
    names |= {7: "1g.18gb+me", 9: "1g.35gb"}
    profiles = {
        names[int(index)]: {
            "compute": p["slices"],
            "memory_mib": p["mem_mib"],
            "size": 0,
            "starts": [],
            "max": p["count"],
            "sms": p["sm"],
            "eng": [p["copy"], p["dec"], p["enc"], p["jpg"], p["ofa"]],
        }
        for index, p in raw["gi_profiles"].items()
    }
    return {"compute_slices": 7, "memory_slices": 8, "profiles": profiles}


def test_the_built_in_h200_geometry_is_what_a_real_h200_measured() -> None:
    built_in = geometry_for_product("NVIDIA H200")
    assert built_in is not None
    measured = geometry_from_table("NVIDIA H200", recorded_h200())
    assert geometry_differences(built_in, measured) == []
    memory = {p.name: p.memory_mib for p in built_in.profiles.values()}
    assert (memory["1g.18gb"], memory["2g.35gb"], memory["3g.71gb"], memory["7g.141gb"]) == (
        16384,
        33280,
        71424,
        143360,
    )


def test_differences_are_named_field_by_field() -> None:
    built_in = geometry_for_product("NVIDIA H200")
    assert built_in is not None
    older = recorded_h200()
    older["profiles"]["3g.71gb"]["memory_mib"] = 71296  # type: ignore[index]
    assert geometry_differences(built_in, geometry_from_table("x", older)) == [
        "3g.71gb memory_mib: table 71424, NVML 71296"
    ]


def test_a_real_nodes_snapshot_records_the_geometry_nvml_reports() -> None:
    machine = load_machine("dgx-h100", hostname="n")
    machine = apply_layout(machine, {0: {"1g.10gb": 7}})
    backend = NvmlBackend(FakeNvml(SimulatedBackend(machine)))
    snapshot = backend.snapshot()
    recorded = snapshot.extra["mig_geometry"][0]
    measured = geometry_from_table(snapshot.gpus[0].product_name, recorded)
    built_in = geometry_for_product(snapshot.gpus[0].product_name)
    assert built_in is not None
    assert geometry_differences(built_in, measured) == []
    assert measured.profiles["3g.40gb"].placements == (0, 4)
    assert 1 not in snapshot.extra["mig_geometry"]  # MIG off there: the fake's NVML says nothing
