"""MIG geometry: which GPU-instance profiles a product offers and where NVML can place them.

A layout (``{"1g.10gb": 2, "3g.40gb": 1}``) is valid exactly when every instance can be given
one of its profile's NVML placements without two instances sharing a memory slice, no profile
exceeds its instance count, and at most one instance owns the media engines (``+me``). That is
the check NVML performs when mig-parted creates the instances, so a layout accepted here is one a
real GPU would accept.

The tables come from ``profiles/mig.yaml``, with each profile's engine counts (copy, decoder,
encoder, JPEG, OFA) where a published table gives them, so a simulated MIG device carries the
numbers NVML would report for it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kgpu.errors import FieldError, FieldProblem
from kgpu.hardware.model import Gpu, Machine, MigDevice, MigEngines
from kgpu.hardware.profiles import read_data, stable_uuid


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile (with its full-size compute instance)."""

    name: str
    compute_slices: int
    memory_slices: int  # placement size, in memory slices
    memory_mib: int
    placements: tuple[int, ...]  # valid start memory slices
    max_count: int
    multiprocessor_count: int = 0  # when NVML's count is known; else slices x per-slice SMs
    engines: MigEngines | None = None  # when a published table gives them

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")


@dataclass(frozen=True)
class MigGeometry:
    """The MIG geometry of one product."""

    product: str
    compute_slices: int
    memory_slices: int
    profiles: dict[str, MigProfile]
    multiprocessors_per_slice: int = 0

    def profile(self, name: str) -> MigProfile:
        """The profile called ``name``, or a :class:`FieldError` listing the valid ones."""
        try:
            return self.profiles[name]
        except KeyError:
            raise FieldError(
                FieldProblem(
                    f"profile {name} does not exist on {self.product}; "
                    f"valid: {', '.join(self.profiles)}"
                )
            ) from None


def _engines(raw: list[int] | None) -> MigEngines | None:
    """``eng: [copy, decoder, encoder, jpeg, ofa]`` of a profile in ``mig.yaml``."""
    if raw is None:
        return None
    copy, decoder, encoder, jpeg, ofa = (int(n) for n in raw)
    return MigEngines(copy=copy, decoder=decoder, encoder=encoder, jpeg=jpeg, ofa=ofa)


def geometry_from_table(product: str, raw: Mapping[str, Any]) -> MigGeometry:
    """A geometry from ``profiles/mig.yaml``'s shape, which is also the shape the NVML backend
    records a real GPU's measured profiles in (``Machine.extra["mig_geometry"][index]``)."""
    profiles = {
        name: MigProfile(
            name=name,
            compute_slices=int(p["compute"]),
            memory_slices=int(p["size"]),
            memory_mib=int(p["memory_mib"]),
            placements=tuple(int(s) for s in p["starts"]),
            max_count=int(p["max"]),
            multiprocessor_count=int(p.get("sms", 0)),
            engines=_engines(p.get("eng")),
        )
        for name, p in raw["profiles"].items()
    }
    return MigGeometry(
        product=product,
        compute_slices=int(raw["compute_slices"]),
        memory_slices=int(raw["memory_slices"]),
        profiles=profiles,
        multiprocessors_per_slice=int(raw.get("multiprocessors_per_slice", 0)),
    )


@functools.cache
def _geometries() -> dict[str, MigGeometry]:
    """Geometry per NVML product name (several names can share one table)."""
    out: dict[str, MigGeometry] = {}
    for raw in read_data("mig.yaml")["geometries"].values():
        for product in raw["products"]:
            out[product] = geometry_from_table(product, raw)
    return out


def geometry_differences(built_in: MigGeometry, measured: MigGeometry) -> list[str]:
    """Where the built-in table says otherwise than a GPU's NVML did, one line per field
    (``3g.71gb memory_mib: table 71296, NVML 71424``); profiles one side lacks are named. A
    measured profile without placements (NVML did not answer them) is not compared on them."""
    out: list[str] = []
    for name in sorted(set(built_in.profiles) | set(measured.profiles)):
        a, b = built_in.profiles.get(name), measured.profiles.get(name)
        if a is None or b is None:
            out.append(f"{name}: {'only NVML' if a is None else 'only the table'} has it")
            continue
        pairs: list[tuple[str, object, object]] = [
            ("compute_slices", a.compute_slices, b.compute_slices),
            ("memory_mib", a.memory_mib, b.memory_mib),
            ("max_count", a.max_count, b.max_count),
            ("multiprocessor_count", a.multiprocessor_count, b.multiprocessor_count),
            ("engines", a.engines, b.engines),
        ]
        if b.placements:
            pairs += [
                ("memory_slices", a.memory_slices, b.memory_slices),
                ("placements", a.placements, b.placements),
            ]
        out += [f"{name} {f}: table {x}, NVML {y}" for f, x, y in pairs if x != y]
    return out


def geometry_for_product(product_name: str) -> MigGeometry | None:
    """The MIG geometry of the product NVML calls ``product_name``, if kgpu knows it."""
    return _geometries().get(product_name)


def known_profile_names() -> frozenset[str]:
    """Every MIG profile name some product kgpu knows offers (to flag typos in configs)."""
    return frozenset(name for g in _geometries().values() for name in g.profiles)


def geometry_for(gpu: Gpu) -> MigGeometry | None:
    """The MIG geometry of ``gpu``; None when it is not MIG capable or its product is unknown."""
    if not gpu.mig_capable:
        return None
    return geometry_for_product(gpu.product_name)


def _describe(counts: Mapping[str, int]) -> str:
    return " + ".join(f"{name} x {n}" for name, n in counts.items() if n)


def _check_counts(geometry: MigGeometry, counts: Mapping[str, int]) -> list[MigProfile]:
    """Everything about a layout that does not need a search; return the instances to place."""
    wanted: list[MigProfile] = []
    for name, n in counts.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise FieldError(FieldProblem(f"count for {name} must be a non-negative integer"))
        profile = geometry.profile(name)
        if n > profile.max_count:
            raise FieldError(
                FieldProblem(
                    f"{name} x {n} asks for too many: at most {profile.max_count} "
                    f"{name} instance{'s' if profile.max_count != 1 else ''} "
                    f"fit on {geometry.product}"
                )
            )
        wanted.extend([profile] * n)
    what = _describe(counts)
    memory = sum(p.memory_slices for p in wanted)
    if memory > geometry.memory_slices:
        raise FieldError(
            FieldProblem(f"{what} needs {memory} of {geometry.memory_slices} memory slices")
        )
    compute = sum(p.compute_slices for p in wanted)
    if compute > geometry.compute_slices:
        raise FieldError(
            FieldProblem(f"{what} needs {compute} of {geometry.compute_slices} compute slices")
        )
    media = [p.name for p in wanted if p.media_extensions]
    if len(media) > 1:
        raise FieldError(
            FieldProblem(
                f"{what} asks for {len(media)} media-extension (+me) instances; "
                "a GPU has one set of media engines, so at most one +me instance fits"
            )
        )
    return wanted


def place(geometry: MigGeometry, counts: Mapping[str, int]) -> list[tuple[str, int]]:
    """Place every requested instance, or explain why the layout cannot exist.

    Returns ``(profile, start)`` pairs (start in memory slices), largest instances first and
    each at the lowest start that still lets the rest fit, so the same layout always lands in
    the same place.
    """
    wanted = _check_counts(geometry, counts)
    # Largest first: they have the fewest placements, so the search prunes early.
    wanted.sort(key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    chosen: list[int] = []

    def search(i: int, used: int) -> bool:
        if i == len(wanted):
            return True
        profile = wanted[i]
        # Identical instances are interchangeable: only try starts after the previous one's.
        floor = chosen[i - 1] if i and wanted[i - 1].name == profile.name else -1
        span = (1 << profile.memory_slices) - 1
        for start in profile.placements:
            if start <= floor:
                continue
            mask = span << start
            if used & mask:
                continue
            chosen.append(start)
            if search(i + 1, used | mask):
                return True
            chosen.pop()
        return False

    if not search(0, 0):
        starts = "; ".join(
            f"{p.name} starts at {', '.join(str(s) for s in p.placements)} "
            f"and spans {p.memory_slices}"
            for p in sorted(set(wanted), key=lambda p: p.name)
        )
        raise FieldError(
            FieldProblem(
                f"{_describe(counts)} does not fit on {geometry.product}: the instances would "
                f"overlap in every arrangement NVML allows ({starts})"
            )
        )
    return [(p.name, start) for p, start in zip(wanted, chosen, strict=True)]


def gi_id_for(geometry: MigGeometry, size: int, start: int) -> int:
    """The GPU-instance id NVML gives an instance of ``size`` memory slices at ``start``.

    NVML numbers instances by placement slot, biggest slots first (the whole GPU is 0, its
    halves 1-2, quarters 3-6, eighths 7-14 on an 8-slice GPU), so ids depend only on where an
    instance sits.
    """
    offset = 0
    slot = geometry.memory_slices
    while slot > size and slot > 1:
        offset += geometry.memory_slices // slot
        slot //= 2
    return offset + start // max(size, 1)


def mig_device(gpu: Gpu, geometry: MigGeometry, name: str, start: int, index: int) -> MigDevice:
    """The MIG device (one full compute instance) that profile ``name`` placed at ``start``
    on ``gpu`` is, as NVML would report it once created; ``index`` is its position on the GPU."""
    profile = geometry.profiles[name]
    gi_id = gi_id_for(geometry, profile.memory_slices, start)
    return MigDevice(
        parent_index=gpu.index,
        parent_uuid=gpu.uuid,
        index=index,
        uuid=stable_uuid("MIG", gpu.uuid, gi_id),
        profile=name,
        gi_id=gi_id,
        ci_id=0,
        placement_start=start,
        placement_size=profile.memory_slices,
        memory_mib=profile.memory_mib,
        compute_slices=profile.compute_slices,
        multiprocessor_count=profile.multiprocessor_count
        or profile.compute_slices * geometry.multiprocessors_per_slice,
        engines=profile.engines,
    )


def mig_devices_for(
    gpu: Gpu, geometry: MigGeometry, counts: Mapping[str, int]
) -> tuple[MigDevice, ...]:
    """The MIG devices ``gpu`` has once ``counts`` is applied (one full compute instance each)."""
    placed = sorted(place(geometry, counts), key=lambda item: (item[1], item[0]))
    return tuple(
        mig_device(gpu, geometry, name, start, index) for index, (name, start) in enumerate(placed)
    )


def apply_layout(machine: Machine, layout: Mapping[int, Mapping[str, int] | None]) -> Machine:
    """``machine`` with MIG reconfigured as mig-parted would leave it.

    For each GPU index in ``layout``: None disables MIG; a mapping enables MIG with exactly those
    instances. GPUs not listed keep their state.
    """
    known = {gpu.index for gpu in machine.gpus}
    for index in layout:
        if index not in known:
            raise FieldError(
                FieldProblem(
                    f"GPU {index} does not exist on {machine.profile} "
                    f"(it has GPUs {', '.join(str(i) for i in sorted(known))})"
                )
            )
    gpus = []
    for gpu in machine.gpus:
        if gpu.index not in layout:
            gpus.append(gpu)
            continue
        counts = layout[gpu.index]
        if counts is None:
            gpus.append(replace(gpu, mig_enabled=False, mig_devices=()))
            continue
        geometry = geometry_for(gpu)
        if geometry is None:
            why = "is not MIG capable" if not gpu.mig_capable else "has no known MIG geometry"
            raise FieldError(FieldProblem(f"GPU {gpu.index} ({gpu.product_name}) {why}"))
        try:
            devices = mig_devices_for(gpu, geometry, counts)
        except FieldError as exc:
            raise FieldError(
                [
                    FieldProblem(f"GPU {gpu.index}: {p.message}", p.path, p.file, p.entry)
                    for p in exc.problems
                ]
            ) from None
        gpus.append(replace(gpu, mig_enabled=True, mig_devices=devices))
    return machine.with_gpus(tuple(gpus))
