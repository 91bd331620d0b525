"""A snapshot the NVML backend recorded on a real H100 (driver 580.159.04), replayed through the
simulated backend as ``--machine tests/data/h100-nvml-snapshot.json`` would."""

from __future__ import annotations

from pathlib import Path

from kgpu.hardware import open_backend
from kgpu.hardware.mig import apply_layout, geometry_for

SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "h100-nvml-snapshot.json"


def test_recorded_h100_replays_as_a_simulated_machine() -> None:
    machine = open_backend(str(SNAPSHOT)).snapshot()
    assert machine.profile == "nvml"
    assert machine.driver_version.startswith("580.")
    (gpu,) = machine.gpus
    assert "H100" in gpu.product_name
    assert 80_000 <= gpu.memory_mib <= 82_000
    assert gpu.cc == "9.0" and gpu.architecture == "hopper" and gpu.brand == "Nvidia"
    assert gpu.mig_capable and not gpu.mig_enabled
    assert gpu.uuid.startswith("GPU-") and gpu.pci_bus_id.startswith("00000000:")


def test_recorded_h100_accepts_the_h100_mig_geometry() -> None:
    machine = open_backend(str(SNAPSHOT)).snapshot()
    geometry = geometry_for(machine.gpus[0])
    assert geometry is not None and "7g.80gb" in geometry.profiles
    split = apply_layout(machine, {0: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}})
    devices = split.gpus[0].mig_devices
    assert sorted(d.profile for d in devices) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    # Memory and SM counts as NVML reported them on that GPU.
    assert {d.profile: (d.memory_mib, d.multiprocessor_count) for d in devices} == {
        "1g.10gb": (9984, 16),
        "2g.20gb": (20096, 32),
        "3g.40gb": (40448, 60),
    }
