"""The MIG plan (pure): from what the GPUs have to what a mig-parted layout asks, in steps.

The input is each GPU's MIG state as the backend reports it (:class:`GpuMigState`: mode, GPU
instances, compute instances) and a layout (GPU index -> profile counts, None for MIG off, as
:func:`kgpu.config.migparted.layout_for` selects it). A GPU is left alone when it already
matches -- the same test ``nvidia-mig-parted assert`` makes: its mode, and the count of MIG
devices (compute instances) per profile, placements aside. Every other GPU is cleared and built
again, as mig-parted does, in the order NVML needs:

1. destroy its compute instances, then its GPU instances (``destroy-compute-instance``,
   ``destroy-gpu-instance``);
2. set the MIG mode when the current or pending mode differs (``set-mig-mode``);
3. create each MIG device -- a GPU instance at the placement :func:`kgpu.hardware.mig.place`
   chose (largest first, lowest start that lets the rest fit), then its full-size compute
   instance (``create-mig-device``, "create 3g.40gb at memory slice 4").

mig-parted tries profile orders until NVML accepts one and lets NVML pick placements; kgpu
plans placements, so the plan says where every instance will sit and the same layout always
lands in the same place (and gets the UUIDs the simulator gives it). A layout that cannot exist
on a GPU (too many instances, overlaps in every arrangement, a profile the product does not
offer, MIG on a GPU without MIG) is a :class:`~kgpu.errors.FieldError`: nothing is planned.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from kgpu.errors import FieldError, FieldProblem
from kgpu.hardware.backend import ComputeInstance, GpuInstance, MigMode
from kgpu.hardware.mig import geometry_for_product, place

Counts = tuple[tuple[str, int], ...]  # sorted (profile, count) pairs: hashable, comparable
MIG_OFF = MigMode(False, False)
_SLICES = re.compile(r"^(\d+)g\.")


def counts(layout: Mapping[str, int] | None) -> Counts | None:
    """A layout as sorted pairs without zero counts (None stays None: MIG off)."""
    if layout is None:
        return None
    return tuple(sorted((name, n) for name, n in layout.items() if n))


def describe_counts(layout: Counts | None) -> str:
    if layout is None:
        return "MIG disabled"
    if not layout:
        return "MIG enabled, no MIG devices"
    return ", ".join(f"{n} x {name}" for name, n in layout)


@dataclass(frozen=True)
class GpuMigState:
    """One GPU's MIG state as read from the backend; ``error`` when it could not be read."""

    index: int
    uuid: str
    product: str
    capable: bool
    mode: MigMode = MIG_OFF
    instances: tuple[GpuInstance, ...] = ()
    compute: tuple[ComputeInstance, ...] = ()
    error: str = ""

    def devices(self) -> Counts | None:
        """Its MIG devices per profile as mig-parted counts them (one per compute instance; a
        compute instance narrower than its GPU instance is ``<n>c.<profile>``); None when MIG is
        off."""
        if not self.mode.current:
            return None
        by_id = {gi.gi_id: gi for gi in self.instances}
        out: dict[str, int] = {}
        for ci in self.compute:
            gi = by_id.get(ci.gi_id)
            if gi is None:
                continue
            match = _SLICES.match(gi.profile)
            whole = int(match.group(1)) if match else ci.compute_slices
            name = (
                gi.profile if ci.compute_slices >= whole else f"{ci.compute_slices}c.{gi.profile}"
            )
            out[name] = out.get(name, 0) + 1
        return counts(out)

    def bare_instances(self) -> tuple[GpuInstance, ...]:
        """GPU instances with no compute instance: memory nobody can use."""
        used = {ci.gi_id for ci in self.compute}
        return tuple(gi for gi in self.instances if gi.gi_id not in used)


class StepKind(StrEnum):
    DESTROY_CI = "destroy-compute-instance"
    DESTROY_GI = "destroy-gpu-instance"
    SET_MODE = "set-mig-mode"
    CREATE = "create-mig-device"


@dataclass(frozen=True)
class MigStep:
    """One operation on one GPU."""

    gpu: int
    kind: StepKind
    profile: str = ""
    start: int = -1  # memory slice (create)
    size: int = 0
    gi_id: int = -1  # destroy
    ci_id: int = -1
    enabled: bool = False  # set-mig-mode

    def describe(self) -> str:
        if self.kind is StepKind.DESTROY_CI:
            return (
                f"destroy compute instance {self.ci_id} of GPU instance {self.gi_id} "
                f"({self.profile})"
            )
        if self.kind is StepKind.DESTROY_GI:
            return (
                f"destroy GPU instance {self.gi_id} ({self.profile} at memory slice {self.start})"
            )
        if self.kind is StepKind.SET_MODE:
            return f"{'enable' if self.enabled else 'disable'} MIG mode"
        return f"create {self.profile} at memory slice {self.start}"


@dataclass(frozen=True)
class GpuChange:
    """What one GPU gets: from ``current`` to ``desired`` through ``steps``."""

    index: int
    uuid: str
    current: Counts | None
    desired: Counts | None
    steps: tuple[MigStep, ...]

    @property
    def mode_step(self) -> MigStep | None:
        return next((s for s in self.steps if s.kind is StepKind.SET_MODE), None)


@dataclass(frozen=True)
class MigPlan:
    """The changes a layout needs; GPUs it leaves alone are ``unchanged``, GPUs whose state
    could not be read are ``unreadable`` (their state carries the error)."""

    config: str
    changes: tuple[GpuChange, ...] = ()
    unchanged: tuple[int, ...] = ()
    unreadable: tuple[GpuMigState, ...] = ()

    @property
    def done(self) -> bool:
        """Nothing to change and nothing unknown: the layout is what the GPUs have."""
        return not self.changes and not self.unreadable

    @property
    def steps(self) -> tuple[MigStep, ...]:
        return tuple(step for change in self.changes for step in change.steps)


def _problem(index: int, message: str) -> FieldError:
    return FieldError(FieldProblem(f"GPU {index}: {message}"))


def _placements(state: GpuMigState, want: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """(profile, start, size) for every instance of ``want`` on this GPU, or FieldError."""
    geometry = geometry_for_product(state.product)
    if geometry is None:
        raise _problem(state.index, f"{state.product} has no MIG geometry kgpu knows")
    try:
        placed = place(geometry, want)
    except FieldError as exc:
        raise FieldError(
            [FieldProblem(f"GPU {state.index}: {p.message}") for p in exc.problems]
        ) from None
    return [(name, start, geometry.profiles[name].memory_slices) for name, start in placed]


def _clear(state: GpuMigState) -> list[MigStep]:
    by_id = {gi.gi_id: gi for gi in state.instances}
    steps = [
        MigStep(
            state.index,
            StepKind.DESTROY_CI,
            profile=by_id[ci.gi_id].profile if ci.gi_id in by_id else "",
            gi_id=ci.gi_id,
            ci_id=ci.ci_id,
        )
        for ci in state.compute
    ]
    steps += [
        MigStep(
            state.index,
            StepKind.DESTROY_GI,
            profile=gi.profile,
            start=gi.start,
            size=gi.size,
            gi_id=gi.gi_id,
        )
        for gi in state.instances
    ]
    return steps


def plan_gpu(state: GpuMigState, want: Mapping[str, int] | None) -> GpuChange | None:
    """The change one GPU needs for ``want`` (None: MIG off), or None when it matches."""
    desired = counts(want)
    if not state.capable:
        if desired is None:
            return None  # mig-parted skips GPUs without MIG when MIG is to be off
        raise _problem(state.index, f"{state.product} is not MIG capable")
    placements = _placements(state, want) if want is not None else []
    enabled = desired is not None
    current = state.devices()
    mode_ok = state.mode.current == enabled
    devices_ok = current == desired and not state.bare_instances()
    if mode_ok and devices_ok and state.mode.pending == enabled:
        return None
    mode = MigStep(state.index, StepKind.SET_MODE, enabled=enabled)
    if mode_ok and devices_ok:  # only a stale pending change to cancel
        return GpuChange(state.index, state.uuid, current, desired, (mode,))
    steps = _clear(state) if state.mode.current else []
    if not mode_ok or state.mode.pending != enabled:
        steps.append(mode)
    steps += [
        MigStep(state.index, StepKind.CREATE, profile=name, start=start, size=size)
        for name, start, size in placements
    ]
    return GpuChange(state.index, state.uuid, current, desired, tuple(steps))


def plan_mig(
    states: Sequence[GpuMigState],
    layout: Mapping[int, Mapping[str, int] | None],
    config: str = "",
) -> MigPlan:
    """The plan that takes ``states`` to ``layout``; GPUs the layout does not name are left
    alone. FieldError (every bad GPU listed) when the layout cannot exist on these GPUs."""
    changes: list[GpuChange] = []
    unchanged: list[int] = []
    unreadable: list[GpuMigState] = []
    problems: list[FieldProblem] = []
    for state in states:
        if state.index not in layout:
            unchanged.append(state.index)
            continue
        if state.error:
            unreadable.append(state)
            continue
        try:
            change = plan_gpu(state, layout[state.index])
        except FieldError as exc:
            problems.extend(exc.problems)
            continue
        if change is None:
            unchanged.append(state.index)
        else:
            changes.append(change)
    if problems:
        raise FieldError(problems)
    return MigPlan(config, tuple(changes), tuple(unchanged), tuple(unreadable))
