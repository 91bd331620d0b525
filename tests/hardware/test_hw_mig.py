"""MIG geometry: layouts NVML accepts are placed; impossible ones are refused with a reason."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgpu.errors import FieldError
from kgpu.hardware.mig import MigGeometry, MigProfile, apply_layout, geometry_for, place
from kgpu.hardware.profiles import load_machine


def geometry(profile: str) -> MigGeometry:
    geo = geometry_for(load_machine(profile).gpus[0])
    assert geo is not None
    return geo


GEOMETRIES = {
    name: geometry(name) for name in ("a100-40gb", "a100-80gb", "a30", "dgx-h100", "h200", "gb200")
}


def test_profile_names_per_product() -> None:
    assert list(GEOMETRIES["a100-40gb"].profiles) == [
        "1g.5gb",
        "1g.5gb+me",
        "1g.10gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
    ]
    expected_80 = ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert list(GEOMETRIES["a100-80gb"].profiles) == expected_80
    assert list(GEOMETRIES["dgx-h100"].profiles) == expected_80
    assert "7g.141gb" in GEOMETRIES["h200"].profiles and "1g.18gb" in GEOMETRIES["h200"].profiles
    assert list(GEOMETRIES["a30"].profiles) == [
        "1g.6gb",
        "1g.6gb+me",
        "2g.12gb",
        "2g.12gb+me",
        "4g.24gb",
    ]
    assert "7g.186gb" in GEOMETRIES["gb200"].profiles
    assert geometry_for(load_machine("t4").gpus[0]) is None


def test_a100_placements_as_nvml_reports_them() -> None:
    geo = GEOMETRIES["a100-40gb"]
    assert (geo.compute_slices, geo.memory_slices) == (7, 8)
    assert geo.profiles["1g.5gb"].placements == (0, 1, 2, 3, 4, 5, 6)
    assert geo.profiles["2g.10gb"].placements == (0, 2, 4)
    assert geo.profiles["3g.20gb"].placements == (0, 4)
    assert geo.profiles["3g.20gb"].memory_slices == 4
    assert geo.profiles["7g.40gb"].memory_slices == 8


@pytest.mark.parametrize(
    ("machine", "counts"),
    [
        ("a100-80gb", {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
        ("a100-80gb", {"1g.10gb": 7}),
        ("a100-80gb", {"4g.40gb": 1, "3g.40gb": 1}),
        ("a100-80gb", {"1g.10gb+me": 1, "1g.10gb": 6}),
        ("a100-80gb", {"1g.20gb": 4}),
        ("a100-40gb", {"2g.10gb": 3, "1g.5gb": 1}),
        ("a100-40gb", {"7g.40gb": 1}),
        ("a30", {"2g.12gb": 1, "1g.6gb": 2}),
        ("dgx-h100", {"3g.40gb": 2}),
        ("h200", {"1g.18gb": 3, "3g.71gb": 1}),
        ("gb200", {"2g.47gb": 1, "1g.23gb": 2, "3g.93gb": 1}),
    ],
)
def test_valid_layouts_are_placed(machine: str, counts: dict[str, int]) -> None:
    geo = GEOMETRIES[machine]
    placed = place(geo, counts)
    assert sorted(name for name, _ in placed) == sorted(
        n for n, c in counts.items() for _ in range(c)
    )
    assert_disjoint(geo, placed)


@pytest.mark.parametrize(
    ("machine", "counts", "reason"),
    [
        ("a100-40gb", {"3g.20gb": 3}, "at most 2"),
        ("a100-40gb", {"3g.20gb": 2, "1g.5gb": 1}, "needs 9 of 8 memory slices"),
        ("a100-40gb", {"1g.10gb": 1}, None),  # valid: sanity for the next rows
        ("a100-40gb", {"1g.10gb": 3, "3g.20gb": 1}, "needs 10 of 8 memory slices"),
        ("a100-40gb", {"1g.20gb": 1}, "profile 1g.20gb does not exist on NVIDIA A100-SXM4-40GB"),
        ("a100-80gb", {"1g.5gb": 1}, "valid: 1g.10gb, 1g.10gb+me"),
        ("a100-80gb", {"1g.10gb+me": 2}, "at most 1"),
        ("a30", {"1g.6gb+me": 1, "2g.12gb+me": 1}, "at most one +me"),
        ("a100-80gb", {"7g.80gb": 1, "1g.10gb": 1}, "memory slices"),
        ("a100-80gb", {"1g.10gb": 7, "1g.20gb": 1}, "memory slices"),
        ("a100-80gb", {"1g.20gb": 3, "3g.40gb": 1}, "memory slices"),
        ("a100-80gb", {"4g.40gb": 1, "2g.20gb": 2}, "needs 8 of 7 compute slices"),
        ("a100-80gb", {"1g.10gb": -1}, "non-negative"),
    ],
)
def test_impossible_layouts_say_why(
    machine: str, counts: dict[str, int], reason: str | None
) -> None:
    geo = GEOMETRIES[machine]
    if reason is None:
        place(geo, counts)
        return
    with pytest.raises(FieldError) as info:
        place(geo, counts)
    assert reason in str(info.value)


def test_overlap_is_reported_when_slice_counts_alone_allow_a_layout() -> None:
    # NVIDIA's own tables are packable whenever the slice counts fit; a geometry whose
    # placements collide exercises the search's own refusal.
    fixed = MigProfile("2g.fixed", 2, 2, 1000, (2,), 2)
    geo = MigGeometry("Test GPU", compute_slices=8, memory_slices=8, profiles={"2g.fixed": fixed})
    with pytest.raises(FieldError, match="overlap in every arrangement"):
        place(geo, {"2g.fixed": 2})


def assert_disjoint(geo: MigGeometry, placed: list[tuple[str, int]]) -> None:
    used = [0] * geo.memory_slices
    compute = 0
    media = 0
    for name, start in placed:
        profile = geo.profiles[name]
        assert start in profile.placements
        assert start + profile.memory_slices <= geo.memory_slices
        for s in range(start, start + profile.memory_slices):
            used[s] += 1
        compute += profile.compute_slices
        media += profile.media_extensions
    assert max(used, default=0) <= 1
    assert compute <= geo.compute_slices
    assert media <= 1


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(GEOMETRIES)).flatmap(
        lambda name: st.tuples(
            st.just(name),
            st.dictionaries(st.sampled_from(sorted(GEOMETRIES[name].profiles)), st.integers(0, 8)),
        )
    )
)
def test_accepted_layouts_never_overlap(case: tuple[str, dict[str, int]]) -> None:
    name, counts = case
    geo = GEOMETRIES[name]
    try:
        placed = place(geo, counts)
    except FieldError as exc:
        assert str(exc)  # refused, with a reason
        return
    assert len(placed) == sum(counts.values())
    assert_disjoint(geo, placed)


def test_apply_layout_p4de_half_balanced() -> None:
    machine = load_machine("p4de.24xlarge", hostname="p4de-0")
    split = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    layout: dict[int, dict[str, int] | None] = {i: split for i in range(4)}
    layout.update({i: None for i in range(4, 8)})
    result = apply_layout(machine, layout)
    for gpu in result.gpus[:4]:
        assert gpu.mig_enabled
        assert sorted(d.profile for d in gpu.mig_devices) == [
            "1g.10gb",
            "1g.10gb",
            "2g.20gb",
            "3g.40gb",
        ]
        assert len({d.gi_id for d in gpu.mig_devices}) == 4
        assert all(d.parent_uuid == gpu.uuid and d.uuid.startswith("MIG-") for d in gpu.mig_devices)
        assert [d.index for d in gpu.mig_devices] == [0, 1, 2, 3]
        sizes = {d.profile: d.memory_mib for d in gpu.mig_devices}
        assert sizes == {"1g.10gb": 9728, "2g.20gb": 19968, "3g.40gb": 40192}
    for gpu in result.gpus[4:]:
        assert not gpu.mig_enabled and gpu.mig_devices == ()
    all_uuids = [d.uuid for g in result.gpus for d in g.mig_devices]
    assert len(set(all_uuids)) == 16
    assert result.by_uuid(all_uuids[0]).uuid == all_uuids[0]
    # Applying again gives the same UUIDs (nodes restart; device ids must not change).
    assert apply_layout(machine, layout) == result


def test_apply_layout_leaves_unlisted_gpus_and_can_disable() -> None:
    machine = apply_layout(load_machine("dgx-h100"), {1: {"7g.80gb": 1}})
    assert machine.gpus[1].mig_enabled and machine.gpus[0] == load_machine("dgx-h100").gpus[0]
    assert machine.gpus[1].mig_devices[0].gi_id == 0
    off = apply_layout(machine, {1: None})
    assert off.gpus[1] == load_machine("dgx-h100").gpus[1]
    empty = apply_layout(machine, {2: {}})
    assert empty.gpus[2].mig_enabled and empty.gpus[2].mig_devices == ()


def test_apply_layout_errors_name_the_gpu() -> None:
    with pytest.raises(FieldError, match=r"GPU 0 \(NVIDIA GeForce RTX 4090\) is not MIG capable"):
        apply_layout(load_machine("rtx-4090"), {0: {"1g.10gb": 1}})
    with pytest.raises(FieldError, match=r"GPU 3: 3g\.40gb x 3"):
        apply_layout(load_machine("p4de.24xlarge"), {3: {"3g.40gb": 3}})
    with pytest.raises(FieldError, match="GPU 9 does not exist"):
        apply_layout(load_machine("p4de.24xlarge"), {9: None})


def test_one_mig_device_is_built_like_a_whole_layout() -> None:
    """The DRA plugin materialises single placements with ``mig_device``; they must equal what
    applying a layout creates (SM count included: it was left 0 once)."""
    from kgpu.hardware.mig import geometry_for, mig_device, mig_devices_for
    from kgpu.hardware.profiles import load_machine

    gpu = load_machine("dgx-h100", hostname="n").gpus[3]
    geometry = geometry_for(gpu)
    assert geometry is not None
    (whole,) = mig_devices_for(gpu, geometry, {"3g.40gb": 1})
    one = mig_device(gpu, geometry, "3g.40gb", whole.placement_start, index=0)
    assert one == whole and one.multiprocessor_count > 0
