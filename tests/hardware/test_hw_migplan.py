"""The MIG plan: which GPUs change and in what steps (pure, no backend)."""

from __future__ import annotations

import pytest

from kgpu.errors import FieldError
from kgpu.hardware.backend import ComputeInstance, GpuInstance, MigMode
from kgpu.hardware.migplan import GpuMigState, StepKind, plan_gpu, plan_mig

A100 = "NVIDIA A100-SXM4-80GB"


def state(
    index: int = 0,
    *,
    mode: tuple[bool, bool] = (False, False),
    instances: tuple[tuple[str, int, int, int], ...] | list[tuple[str, int, int, int]] = (),
    product: str = A100,
    capable: bool = True,
    narrow: dict[int, int] | None = None,  # gi_id -> compute slices of its compute instance
    bare: tuple[int, ...] = (),
) -> GpuMigState:
    """A GPU with GPU instances (profile, start, size, gi_id), each with a full compute instance
    unless listed in ``bare`` (none) or ``narrow`` (a narrower one)."""
    gis = tuple(GpuInstance(index, gi, p, start, size) for p, start, size, gi in instances)
    slices = {"1g": 1, "2g": 2, "3g": 3, "4g": 4, "7g": 7}
    cis = tuple(
        ComputeInstance(index, gi.gi_id, 0, (narrow or {}).get(gi.gi_id, slices[gi.profile[:2]]))
        for gi in gis
        if gi.gi_id not in bare
    )
    return GpuMigState(
        index, f"GPU-{index}", product, capable, MigMode(*mode), instances=gis, compute=cis
    )


def steps(gpu: GpuMigState, want: dict[str, int] | None) -> list[str]:
    change = plan_gpu(gpu, want)
    return [] if change is None else [s.describe() for s in change.steps]


def test_a_gpu_that_matches_is_left_alone_wherever_its_instances_sit() -> None:
    # mig-parted's assert compares counts per profile, not placements
    here = state(mode=(True, True), instances=[("3g.40gb", 4, 4, 2), ("3g.40gb", 0, 4, 1)])
    assert plan_gpu(here, {"3g.40gb": 2}) is None
    assert plan_gpu(state(), None) is None  # MIG off and asked off
    # zero counts are no instances
    assert plan_gpu(state(mode=(True, True)), {"1g.10gb": 0}) is None


def test_a_changed_gpu_is_cleared_then_built_largest_first() -> None:
    here = state(mode=(True, True), instances=[("7g.80gb", 0, 8, 0)])
    assert steps(here, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}) == [
        "destroy compute instance 0 of GPU instance 0 (7g.80gb)",
        "destroy GPU instance 0 (7g.80gb at memory slice 0)",
        "create 3g.40gb at memory slice 4",
        "create 2g.20gb at memory slice 0",
        "create 1g.10gb at memory slice 2",
        "create 1g.10gb at memory slice 3",
    ]


def test_mode_changes_come_between_clearing_and_building() -> None:
    assert steps(state(), {"7g.80gb": 1}) == [
        "enable MIG mode",
        "create 7g.80gb at memory slice 0",
    ]
    on = state(mode=(True, True), instances=[("4g.40gb", 0, 4, 1)])
    assert steps(on, None) == [
        "destroy compute instance 0 of GPU instance 1 (4g.40gb)",
        "destroy GPU instance 1 (4g.40gb at memory slice 0)",
        "disable MIG mode",
    ]
    # a change left pending by an earlier attempt is asked for again
    pending = state(mode=(False, True))
    assert steps(pending, {"7g.80gb": 1})[0] == "enable MIG mode"
    # only a stale pending change: cancelling it is the whole plan
    stale = state(mode=(True, False), instances=[("7g.80gb", 0, 8, 0)])
    change = plan_gpu(stale, {"7g.80gb": 1})
    assert change is not None and [s.kind for s in change.steps] == [StepKind.SET_MODE]


def test_instances_nobody_can_use_or_narrower_compute_instances_are_differences() -> None:
    bare = state(
        mode=(True, True), instances=[("3g.40gb", 0, 4, 1), ("3g.40gb", 4, 4, 2)], bare=(2,)
    )
    assert bare.devices() == (("3g.40gb", 1),)
    assert plan_gpu(bare, {"3g.40gb": 1}) is not None  # the bare instance goes
    narrow = state(mode=(True, True), instances=[("3g.40gb", 0, 4, 1)], narrow={1: 1})
    assert narrow.devices() == (("1c.3g.40gb", 1),)
    assert plan_gpu(narrow, {"3g.40gb": 1}) is not None


def test_gpus_without_mig_are_skipped_when_mig_is_to_be_off_and_refused_otherwise() -> None:
    t4 = state(product="Tesla T4", capable=False)
    assert plan_gpu(t4, None) is None
    with pytest.raises(FieldError, match="GPU 0: Tesla T4 is not MIG capable"):
        plan_gpu(t4, {"1g.10gb": 1})


def test_a_layout_that_cannot_exist_names_every_gpu_and_plans_nothing() -> None:
    gpus = [state(0), state(1), state(2)]
    with pytest.raises(FieldError) as info:
        plan_mig(gpus, {0: {"1g.10gb": 8}, 1: {"7g.80gb": 1}, 2: {"3g.40gb": 3}})
    text = str(info.value)
    assert "GPU 0: 1g.10gb x 8 asks for too many" in text
    assert "GPU 2: 3g.40gb x 3" in text and "GPU 1" not in text


def test_the_plan_lists_changes_unchanged_and_unreadable_gpus() -> None:
    lost = GpuMigState(3, "GPU-3", A100, True, error="cannot read its MIG state: GPU lost")
    gpus = [state(0), state(1, mode=(True, True), instances=[("7g.80gb", 0, 8, 0)]), state(2), lost]
    plan = plan_mig(gpus, {0: {"7g.80gb": 1}, 1: {"7g.80gb": 1}, 3: None}, "cfg")
    assert [c.index for c in plan.changes] == [0]
    assert plan.unchanged == (1, 2) and plan.unreadable == (lost,)
    assert not plan.done
    assert plan.changes[0].current is None and plan.changes[0].desired == (("7g.80gb", 1),)
    assert plan_mig(gpus[1:3], {1: {"7g.80gb": 1}}).done
