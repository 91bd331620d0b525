"""Simulated backend: what the health watcher and the agent rely on, plus JSON snapshots."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kgpu.errors import FieldError
from kgpu.hardware import open_backend
from kgpu.hardware.backend import BackendError
from kgpu.hardware.mig import apply_layout
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.serialize import (
    dump_snapshot,
    load_snapshot,
    machine_from_dict,
    machine_to_dict,
)
from kgpu.hardware.simulated import SimulatedBackend


def test_wait_events_wakes_as_soon_as_an_xid_is_injected() -> None:
    backend = SimulatedBackend(load_machine("dgx-h100", hostname="n0"))
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.extend(backend.wait_events(30.0)))
    waiter.start()
    time.sleep(0.05)
    event = backend.inject_xid(2, 79)
    waiter.join(timeout=5)
    assert not waiter.is_alive(), "wait_events did not wake on injection"
    assert got == [event]
    assert event.gpu_uuid == backend.snapshot().gpus[2].uuid and event.xid == 79
    assert backend.wait_events(0.01) == []  # delivered once
    assert backend.xid_history() == [event]


def test_xid_on_a_mig_device_carries_its_instance_ids() -> None:
    machine = apply_layout(load_machine("a100-80gb"), {0: {"3g.40gb": 2}})
    backend = SimulatedBackend(machine)
    mig = machine.gpus[0].mig_devices[1]
    event = backend.inject_xid(mig.uuid, 48)
    assert (event.gpu_uuid, event.gi_id, event.ci_id) == (machine.gpus[0].uuid, mig.gi_id, 0)
    explicit = backend.inject_xid(0, 94, gi_id=2, ci_id=0)
    assert (explicit.gi_id, explicit.ci_id) == (2, 0)
    assert backend.wait_events(0) == [event, explicit]


def test_nvml_failure_hides_the_gpu_until_cleared() -> None:
    backend = SimulatedBackend(load_machine("p4de.24xlarge", hostname="n1"))
    lost = backend.snapshot().gpus[5]
    assert backend.probe(lost.uuid)
    backend.set_nvml_failure(lost.uuid, True)
    assert not backend.probe(lost.uuid)
    assert [g.index for g in backend.snapshot().gpus] == [0, 1, 2, 3, 4, 6, 7]
    assert backend.machine.gpus[5] == lost
    backend.set_nvml_failure(5, False)
    assert backend.probe(lost.uuid) and len(backend.snapshot().gpus) == 8


def test_unknown_gpu_is_a_backend_error() -> None:
    backend = SimulatedBackend(load_machine("t4"))
    assert not backend.probe("GPU-00000000-0000-0000-0000-000000000000")
    with pytest.raises(BackendError, match="no GPU with index 3"):
        backend.inject_xid(3, 79)
    with pytest.raises(BackendError, match="no GPU or MIG device"):
        backend.set_nvml_failure("GPU-nope", True)


def test_replace_machine_and_close() -> None:
    machine = load_machine("a100-40gb", hostname="n2")
    backend = SimulatedBackend(machine)
    reconfigured = apply_layout(machine, {0: {"1g.5gb": 7}})
    backend.replace_machine(reconfigured)
    assert len(backend.snapshot().gpus[0].mig_devices) == 7
    waiter = threading.Thread(target=backend.wait_events, args=(30.0,))
    waiter.start()
    backend.close()
    waiter.join(timeout=5)
    assert not waiter.is_alive()
    assert not backend.probe(machine.gpus[0].uuid)
    with pytest.raises(BackendError):
        backend.snapshot()


def test_snapshot_round_trips_through_json(tmp_path: Path) -> None:
    machine = apply_layout(
        load_machine("gb200", hostname="gb-7", clique="7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.2"),
        {1: {"1g.23gb": 3, "4g.93gb": 1}},
    )
    assert machine_from_dict(json.loads(json.dumps(machine_to_dict(machine)))) == machine
    path = tmp_path / "gb.json"
    dump_snapshot(machine, path)
    assert load_snapshot(path) == machine
    backend = open_backend(str(path))
    assert backend.snapshot() == machine
    renamed = open_backend(str(path), hostname="other").snapshot()
    assert renamed.hostname == "other" and renamed.gpus == machine.gpus


def test_bad_snapshots_are_field_errors(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(FieldError, match="cannot read"):
        load_snapshot(missing)
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(FieldError, match="not valid JSON"):
        load_snapshot(broken)
    partial = tmp_path / "partial.json"
    partial.write_text(
        json.dumps(
            {"driver_version": "570", "cuda_driver_version": [12, 8], "gpus": [{"index": 0}]}
        )
    )
    with pytest.raises(FieldError, match=r"gpus\[0\]"):
        load_snapshot(partial)


def test_open_backend_spellings() -> None:
    sim = open_backend("rtx-2080ti", hostname="desk")
    assert sim.snapshot().gpus[0].product_name == "NVIDIA GeForce RTX 2080 Ti"
    assert sim.snapshot().hostname == "desk"
    with pytest.raises(FieldError, match="unknown machine profile"):
        open_backend("rtx-9090")
