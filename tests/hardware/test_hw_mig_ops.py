"""MIG operations: what a GPU refuses, on the simulated backend and through NVML.

Every test runs twice: on :class:`SimulatedBackend` directly, and on :class:`NvmlBackend` over
:class:`kgpu.testing.fake_nvml.FakeNvml` -- the NVML calls mig-parted makes, answered with
pynvml's return codes -- so the backend the MIG manager uses on a real node is exercised call
by call, and both must refuse alike.
"""

from __future__ import annotations

from collections.abc import Iterator

import pynvml
import pytest

from kgpu.hardware.backend import MigBackend, MigMode, MigOpError, MigRefusal
from kgpu.hardware.mig import _geometries, apply_layout, geometry_for, place
from kgpu.hardware.model import Machine
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.nvml_mig import profile_name
from kgpu.hardware.profiles import load_machine, products
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.testing.fake_nvml import FakeNvml

Node = tuple[SimulatedBackend, MigBackend, Machine]


@pytest.fixture(params=["simulated", "nvml"])
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    machine = load_machine("p4de.24xlarge", hostname="ops")
    sim = SimulatedBackend(machine)
    if request.param == "simulated":
        yield sim, sim, machine
        return
    backend = NvmlBackend(FakeNvml(sim))
    yield sim, backend, machine
    backend.close()


def refusal(call: object) -> MigOpError:
    assert callable(call)
    with pytest.raises(MigOpError) as info:
        call()
    return info.value


def build(ops: MigBackend, gpu: int, layout: dict[str, int], machine: Machine) -> None:
    geometry = geometry_for(machine.gpus[gpu])
    assert geometry is not None
    for profile, start in place(geometry, layout):
        gi = ops.create_gpu_instance(gpu, profile, start)
        assert (gi.profile, gi.start) == (profile, start)
        ci = ops.create_compute_instance(gpu, gi.gi_id)
        assert ci.gi_id == gi.gi_id


def test_a_layout_built_by_placement_is_what_the_view_would_have_applied(node: Node) -> None:
    sim, ops, machine = node
    assert ops.mig_mode(0) == MigMode(False, False)
    assert ops.set_mig_mode(0, True) == MigMode(True, True)
    layout = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    build(ops, 0, layout, machine)
    expected = apply_layout(machine, {0: layout}).gpus[0]
    assert sim.snapshot().gpus[0] == expected
    if isinstance(ops, NvmlBackend):  # and NVML reads back the same MIG devices
        read = ops.snapshot().gpus[0]
        assert [(m.uuid, m.profile, m.gi_id, m.placement_start) for m in read.mig_devices] == [
            (m.uuid, m.profile, m.gi_id, m.placement_start) for m in expected.mig_devices
        ]
    assert [(gi.profile, gi.start, gi.size) for gi in ops.gpu_instances(0)] == [
        ("2g.20gb", 0, 2),
        ("1g.10gb", 2, 1),
        ("1g.10gb", 3, 1),
        ("3g.40gb", 4, 4),
    ]


def test_an_overlapping_placement_is_refused_as_insufficient_resources(node: Node) -> None:
    _, ops, _ = node
    ops.set_mig_mode(0, True)
    ops.create_gpu_instance(0, "3g.40gb", 0)
    err = refusal(lambda: ops.create_gpu_instance(0, "2g.20gb", 2))
    assert err.refusal is MigRefusal.INSUFFICIENT_RESOURCES
    assert "GPU 0" in str(err)
    # the free half still takes it
    assert ops.create_gpu_instance(0, "2g.20gb", 4).start == 4


def test_what_a_profile_cannot_do_is_refused(node: Node) -> None:
    _, ops, _ = node
    off = refusal(lambda: ops.create_gpu_instance(0, "1g.10gb", 0))
    assert off.refusal is MigRefusal.NOT_SUPPORTED  # MIG mode is off
    ops.set_mig_mode(0, True)
    unknown = refusal(lambda: ops.create_gpu_instance(0, "1g.5gb", 0))
    assert unknown.refusal is MigRefusal.NOT_SUPPORTED and "1g.5gb" in str(unknown)
    bad_start = refusal(lambda: ops.create_gpu_instance(0, "3g.40gb", 2))
    assert bad_start.refusal is MigRefusal.INVALID_ARGUMENT
    assert "0, 4" in str(bad_start)  # where it can start
    ops.create_gpu_instance(0, "1g.10gb+me", 0)
    media = refusal(lambda: ops.create_gpu_instance(0, "1g.10gb+me", 1))
    assert media.refusal is MigRefusal.INSUFFICIENT_RESOURCES


def test_a_busy_gpu_refuses_to_lose_its_mig_devices(node: Node) -> None:
    sim, ops, machine = node
    ops.set_mig_mode(1, True)
    build(ops, 1, {"3g.40gb": 2}, machine)
    mig = sim.snapshot().gpus[1].mig_devices[0]
    sim.set_processes(mig.uuid, [4242])
    assert ops.gpu_processes(1) == (4242,)
    busy = refusal(lambda: ops.destroy_compute_instance(1, mig.gi_id, mig.ci_id))
    assert busy.refusal is MigRefusal.IN_USE
    with_ci = refusal(lambda: ops.destroy_gpu_instance(1, mig.gi_id))
    assert with_ci.refusal is MigRefusal.IN_USE  # compute instances first
    mode = refusal(lambda: ops.set_mig_mode(1, False))
    assert mode.refusal is MigRefusal.IN_USE  # GPU instances still exist
    sim.set_processes(mig.uuid, [])
    assert ops.gpu_processes(1) == ()
    ops.destroy_compute_instance(1, mig.gi_id, mig.ci_id)
    assert ops.compute_instances(1, mig.gi_id) == ()
    ops.destroy_gpu_instance(1, mig.gi_id)
    assert [gi.start for gi in ops.gpu_instances(1)] == [4]
    gone = refusal(lambda: ops.destroy_gpu_instance(1, mig.gi_id))
    assert gone.refusal is MigRefusal.NOT_FOUND


def test_a_mode_change_that_needs_a_reset_stays_pending_until_one(node: Node) -> None:
    sim, ops, _ = node
    sim.set_needs_reset(2)
    mode = ops.set_mig_mode(2, True)
    assert (mode.current, mode.pending, mode.why) == (False, True, MigRefusal.RESET_REQUIRED)
    assert ops.mig_mode(2).change_pending
    assert not sim.snapshot().gpus[2].mig_enabled
    sim.reset_gpus([2])
    assert ops.mig_mode(2) == MigMode(True, True)
    assert sim.snapshot().gpus[2].mig_enabled


def test_a_busy_gpu_keeps_its_mode_change_pending_until_it_is_idle(node: Node) -> None:
    sim, ops, _ = node
    sim.set_processes(3, [7])
    mode = ops.set_mig_mode(3, True)
    assert (mode.current, mode.pending, mode.why) == (False, True, MigRefusal.IN_USE)
    sim.set_processes(3, [])
    assert ops.set_mig_mode(3, True) == MigMode(True, True)  # idle now: the driver resets it


def test_a_reset_loses_every_instance(node: Node) -> None:
    sim, ops, machine = node
    ops.set_mig_mode(0, True)
    build(ops, 0, {"7g.80gb": 1}, machine)
    sim.reset_gpus()
    assert ops.mig_mode(0).current and ops.gpu_instances(0) == ()
    assert sim.snapshot().gpus[0].mig_devices == ()


def test_gpu_instances_without_compute_instances_are_listed() -> None:
    sim = SimulatedBackend(load_machine("a100-80gb"))
    sim.set_mig_mode(0, True)
    gi = sim.create_gpu_instance(0, "4g.40gb", 0)
    assert sim.gpu_instances(0) == (gi,) and sim.compute_instances(0, gi.gi_id) == ()
    assert sim.snapshot().gpus[0].mig_devices == ()  # not a MIG device without one
    sim.create_compute_instance(0, gi.gi_id)
    full = refusal(lambda: sim.create_compute_instance(0, gi.gi_id))
    assert full.refusal is MigRefusal.INSUFFICIENT_RESOURCES


def test_a_gpu_without_mig_refuses_and_a_lost_one_says_so() -> None:
    sim = SimulatedBackend(load_machine("rtx-2080ti"))
    assert refusal(lambda: sim.mig_mode(0)).refusal is MigRefusal.NOT_SUPPORTED
    nvml = NvmlBackend(FakeNvml(sim))
    assert refusal(lambda: nvml.set_mig_mode(0, True)).refusal is MigRefusal.NOT_SUPPORTED
    sim.set_nvml_failure(0, True)
    assert refusal(lambda: sim.gpu_processes(0)).refusal is MigRefusal.GPU_LOST


def test_nvml_errors_say_what_they_mean() -> None:
    sim = SimulatedBackend(load_machine("a100-80gb"))
    fake = FakeNvml(sim)
    nvml = NvmlBackend(fake)
    fake.fail["nvmlDeviceSetMigMode"] = pynvml.NVML_ERROR_NO_PERMISSION
    err = refusal(lambda: nvml.set_mig_mode(0, True))
    assert err.refusal is MigRefusal.NO_PERMISSION
    assert "CAP_SYS_ADMIN" in str(err) and "NVML_ERROR_NO_PERMISSION" in str(err)
    del fake.fail["nvmlDeviceSetMigMode"]
    nvml.set_mig_mode(0, True)
    nvml.create_gpu_instance(0, "3g.40gb", 0)
    overlap = refusal(lambda: nvml.create_gpu_instance(0, "4g.40gb", 0))
    assert "NVML_ERROR_INSUFFICIENT_RESOURCES" in str(overlap)
    assert "create 4g.40gb at memory slice 0" in str(overlap)
    assert fake.calls.count("nvmlDeviceCreateGpuInstanceWithPlacement") == 2


def test_profile_names_from_nvml_profile_info_match_nvidia_smi_for_every_product() -> None:
    """NVML gives a profile's slices and memory; kgpu names it as nvidia-smi and mig-parted do
    (the names in kgpu's geometry tables, read from real GPUs and NVIDIA's docs)."""
    checked = 0
    for product in products().values():
        geometry = _geometries().get(product.name)
        if geometry is None:
            continue
        total = product.memory_mib * 1024 * 1024
        for p in geometry.profiles.values():
            suffix = "+me" if p.media_extensions else ""
            assert profile_name(p.compute_slices, p.memory_mib, total, suffix) == p.name, (
                product.name
            )
            checked += 1
    assert checked >= 30
