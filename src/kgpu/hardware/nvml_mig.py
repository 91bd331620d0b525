"""MIG operations through NVML: the calls mig-parted makes, by placement.

:class:`NvmlMigOps` is mixed into :class:`~kgpu.hardware.nvml.NvmlBackend`, which is otherwise
read-only; only the MIG manager calls these. What each maps to:

- mode: ``nvmlDeviceGetMigMode`` (current, pending) and ``nvmlDeviceSetMigMode``, whose
  activation status says why a change is left pending (``NVML_ERROR_IN_USE``: the GPU is not
  idle; ``NVML_ERROR_RESET_REQUIRED``: only a reset or reboot activates it);
- GPU instances: profiles from ``nvmlDeviceGetGpuInstanceProfileInfo`` over every profile
  index, named as nvidia-smi and mig-parted name them (``<slices>g.<GB>gb``, ``+me`` for the
  media-extension revision); ``nvmlDeviceGetGpuInstancePossiblePlacements`` checks the start,
  ``nvmlDeviceCreateGpuInstanceWithPlacement`` creates; instances are found with
  ``nvmlDeviceGetGpuInstanceById`` and destroyed with ``nvmlGpuInstanceDestroy``;
- compute instances: the full-size compute-instance profile of the GPU instance
  (``nvmlGpuInstanceGetComputeInstanceProfileInfo``), ``nvmlGpuInstanceCreateComputeInstance``,
  ``nvmlGpuInstanceGetComputeInstanceById``, ``nvmlComputeInstanceDestroy``;
- busy: ``nvmlDeviceGetComputeRunningProcesses`` and ``...GraphicsRunningProcesses`` on the
  GPU and on each of its MIG devices.

Every NVML error becomes a :class:`~kgpu.hardware.backend.MigOpError` whose refusal names the
NVML error, with a message that says which GPU, instance or profile it was about. Tests drive
this through :class:`kgpu.testing.fake_nvml.FakeNvml`; no GPU was changed to write it.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kgpu.hardware.backend import (
    BackendError,
    ComputeInstance,
    GpuInstance,
    MigMode,
    MigOpError,
    MigRefusal,
)

T = TypeVar("T")

#: NVML error constant -> refusal (names, so an older nvidia-ml-py lacking one still loads)
_REFUSALS = {
    "NVML_ERROR_IN_USE": MigRefusal.IN_USE,
    "NVML_ERROR_RESET_REQUIRED": MigRefusal.RESET_REQUIRED,
    "NVML_ERROR_INSUFFICIENT_RESOURCES": MigRefusal.INSUFFICIENT_RESOURCES,
    "NVML_ERROR_NOT_SUPPORTED": MigRefusal.NOT_SUPPORTED,
    "NVML_ERROR_INVALID_ARGUMENT": MigRefusal.INVALID_ARGUMENT,
    "NVML_ERROR_NOT_FOUND": MigRefusal.NOT_FOUND,
    "NVML_ERROR_NO_PERMISSION": MigRefusal.NO_PERMISSION,
    "NVML_ERROR_GPU_IS_LOST": MigRefusal.GPU_LOST,
}
#: GPU-instance profile index constants whose profiles carry a name suffix (go-nvlib's names)
_SUFFIXES = {
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1": "+me",
    "NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1": "+me",
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME": "+me.all",
    "NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME": "+me.all",
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME": "-me",
    "NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME": "-me",
    "NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX": "+gfx",
    "NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX": "+gfx",
    "NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX": "+gfx",
    "NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX": "+gfx",
}
#: what each refusal means here, for messages (NVML's own strings lack most of these codes)
_MEANINGS = {
    MigRefusal.IN_USE: "in use: processes, compute instances or GPU instances remain",
    MigRefusal.RESET_REQUIRED: "takes effect only after a GPU reset or reboot",
    MigRefusal.INSUFFICIENT_RESOURCES: "insufficient resources: it overlaps an existing "
    "instance, or no instance or slice of that kind is left",
    MigRefusal.NOT_SUPPORTED: "not supported: MIG is off or the GPU does not offer it",
    MigRefusal.INVALID_ARGUMENT: "invalid argument",
    MigRefusal.NOT_FOUND: "not found",
    MigRefusal.NO_PERMISSION: "no permission: MIG changes need root (CAP_SYS_ADMIN)",
    MigRefusal.GPU_LOST: "the GPU is lost (fell off the bus)",
}
_MAX_INSTANCE_IDS = 32  # GPU-instance ids are placement slots: 0..14 on an 8-slice GPU
_MAX_COMPUTE_IDS = 8
_MAX_PLACEMENTS = 16
_MIB = 1024 * 1024
_GIB = 1024 * _MIB


def profile_name(slices: int, memory_mib: int, total_bytes: int, suffix: str = "") -> str:
    """The name nvidia-smi, go-nvlib and mig-parted give a GPU-instance profile: its memory as
    the nearest eighth of the GPU's (rounded up) times the GPU's whole GiB, so an A100 80GB's
    9728 MiB instance is ``1g.10gb`` and an H200's 71296 MiB one ``3g.71gb``."""
    fraction = math.ceil(memory_mib * _MIB / total_bytes * 8) / 8 if total_bytes else 0.0
    total_gb = (total_bytes + _GIB - 1) // _GIB
    gb = math.floor(fraction * total_gb + 0.5)  # Go's math.Round: halves away from zero
    return f"{slices}g.{gb}gb{suffix}"


@dataclass(frozen=True)
class _Profile:
    name: str
    profile_id: int  # what NVML's create call and instance info carry
    slices: int
    memory_mib: int


class NvmlMigOps:
    """The :class:`~kgpu.hardware.backend.MigBackend` operations over an NVML module."""

    _nvml: Any

    # -- plumbing ------------------------------------------------------------------------------

    def _refusal(self, exc: Any) -> MigRefusal:
        return self._refusal_of(getattr(exc, "value", None))

    def _refusal_of(self, code: int | None) -> MigRefusal:
        for name, refusal in _REFUSALS.items():
            if code is not None and getattr(self._nvml, name, None) == code:
                return refusal
        return MigRefusal.FAILED

    def _call(self, what: str, fn_name: str, *args: Any) -> Any:
        """``nvml.<fn_name>(*args)``; an NVML error becomes a MigOpError saying ``what``."""
        fn: Callable[..., Any] | None = getattr(self._nvml, fn_name, None)
        if fn is None:
            raise MigOpError(
                MigRefusal.NOT_SUPPORTED,
                f"{what}: this nvidia-ml-py has no {fn_name} (upgrade nvidia-ml-py)",
            )
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            raise self._error(what, exc) from None

    def _error(self, what: str, exc: Any) -> MigOpError:
        """A MigOpError naming the NVML error constant and what it means for MIG."""
        refusal = self._refusal(exc)
        code = getattr(exc, "value", None)
        names = [n for n in _REFUSALS if getattr(self._nvml, n, None) == code]
        meaning = _MEANINGS.get(refusal, str(exc))
        return MigOpError(refusal, f"{what}: {meaning} ({names[0] if names else exc})")

    def _handle(self, gpu: int) -> Any:
        if getattr(self, "_closed", False):
            raise BackendError("the NVML backend is closed")
        return self._call(f"GPU {gpu}", "nvmlDeviceGetHandleByIndex", gpu)

    def _enabled(self, value: Any) -> bool:
        return int(value) == int(getattr(self._nvml, "NVML_DEVICE_MIG_ENABLE", 1))

    def _profiles(self, gpu: int, handle: Any) -> list[_Profile]:
        """Every GPU-instance profile the GPU offers now (MIG mode must be on)."""
        nvml = self._nvml
        memory = self._call(f"GPU {gpu}: memory", "nvmlDeviceGetMemoryInfo", handle)
        suffixes = {
            int(getattr(nvml, name)): suffix
            for name, suffix in _SUFFIXES.items()
            if hasattr(nvml, name)
        }
        out: list[_Profile] = []
        for index in range(int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 10))):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
            except nvml.NVMLError:
                continue  # a profile this GPU does not offer
            slices, mib = int(info.sliceCount), int(info.memorySizeMB)
            name = profile_name(slices, mib, int(memory.total), suffixes.get(index, ""))
            out.append(_Profile(name, int(info.id), slices, mib))
        return out

    def measured_geometry(self, handle: Any) -> dict[str, Any] | None:
        """The GPU's MIG geometry as NVML reports it, in ``profiles/mig.yaml``'s shape (read with
        :func:`kgpu.hardware.mig.geometry_from_table`): per profile its compute slices, memory,
        instance count, SMs, engines and placements. None when NVML offers no profile (not MIG
        capable; an old driver). Read only: the snapshot records it so a real node's geometry
        is what its driver says, not kgpu's table."""
        nvml = self._nvml
        try:
            total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        except Exception:
            return None
        suffixes = {
            int(getattr(nvml, name)): suffix
            for name, suffix in _SUFFIXES.items()
            if hasattr(nvml, name)
        }
        profiles: dict[str, Any] = {}
        for index in range(int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 10))):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
            except Exception:
                continue  # a profile this GPU does not offer
            slices, mib = int(info.sliceCount), int(info.memorySizeMB)
            name = profile_name(slices, mib, total, suffixes.get(index, ""))
            starts, size = self._placements(handle, int(info.id))
            profiles[name] = {
                "compute": slices,
                "memory_mib": mib,
                "size": size,
                "starts": starts,
                "max": int(info.instanceCount),
                "sms": int(info.multiprocessorCount),
                "eng": [
                    int(getattr(info, f, 0))
                    for f in ("copyEngineCount", "decoderCount", "encoderCount", "jpegCount")
                ]
                + [int(getattr(info, "ofaCount", 0))],
            }
        if not profiles:
            return None
        return {
            "compute_slices": max(p["compute"] for p in profiles.values()),
            "memory_slices": max(p["size"] for p in profiles.values()) or 8,
            "profiles": profiles,
        }

    def _placements(self, handle: Any, profile_id: int) -> tuple[list[int], int]:
        """A profile's possible placement starts and size (none when NVML does not say)."""
        nvml = self._nvml
        try:
            placements = (nvml.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
            count = ctypes.c_uint(_MAX_PLACEMENTS)
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements(
                handle, profile_id, placements, ctypes.byref(count)
            )
        except Exception:
            return [], 0
        found = placements[: count.value]
        return [int(p.start) for p in found], max((int(p.size) for p in found), default=0)

    def _instance(self, gpu: int, handle: Any, gi_id: int) -> Any:
        return self._call(
            f"GPU {gpu}: GPU instance {gi_id}", "nvmlDeviceGetGpuInstanceById", handle, gi_id
        )

    def _gpu_instance(self, gpu: int, gi: Any, names: dict[int, str]) -> GpuInstance:
        info = self._call(f"GPU {gpu}: GPU instance", "nvmlGpuInstanceGetInfo", gi)
        profile_id = int(info.profileId)
        return GpuInstance(
            gpu=gpu,
            gi_id=int(info.id),
            profile=names.get(profile_id, f"profile-{profile_id}"),
            start=int(info.placement.start),
            size=int(info.placement.size),
        )

    def _compute_profiles(self, gpu: int, gi: Any) -> dict[int, int]:
        """Compute-instance profile id -> slices, for the profiles this GPU instance offers."""
        nvml = self._nvml
        shared = int(getattr(nvml, "NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED", 0))
        out: dict[int, int] = {}
        for index in range(int(getattr(nvml, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 8))):
            try:
                info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, index, shared)
            except nvml.NVMLError:
                continue
            out[int(info.id)] = int(info.sliceCount)
        return out

    # -- MigBackend ----------------------------------------------------------------------------

    def mig_mode(self, gpu: int) -> MigMode:
        handle = self._handle(gpu)
        current, pending = self._call(f"GPU {gpu}: MIG mode", "nvmlDeviceGetMigMode", handle)
        return MigMode(self._enabled(current), self._enabled(pending))

    def set_mig_mode(self, gpu: int, enabled: bool) -> MigMode:
        nvml = self._nvml
        handle = self._handle(gpu)
        value = getattr(nvml, "NVML_DEVICE_MIG_ENABLE" if enabled else "NVML_DEVICE_MIG_DISABLE")
        word = "enable" if enabled else "disable"
        status = self._call(f"GPU {gpu}: {word} MIG mode", "nvmlDeviceSetMigMode", handle, value)
        mode = self.mig_mode(gpu)
        if mode.change_pending and status:
            return MigMode(mode.current, mode.pending, self._refusal_of(int(status)))
        return mode

    def gpu_instances(self, gpu: int) -> tuple[GpuInstance, ...]:
        nvml = self._nvml
        handle = self._handle(gpu)
        names = {p.profile_id: p.name for p in self._profiles(gpu, handle)}
        found = []
        for gi_id in range(_MAX_INSTANCE_IDS):
            try:
                gi = nvml.nvmlDeviceGetGpuInstanceById(handle, gi_id)
            except nvml.NVMLError as exc:
                refusal = self._refusal(exc)
                if refusal in (MigRefusal.NOT_FOUND, MigRefusal.INVALID_ARGUMENT):
                    continue  # no instance with this id
                raise self._error(f"GPU {gpu}: GPU instance {gi_id}", exc) from None
            found.append(self._gpu_instance(gpu, gi, names))
        return tuple(sorted(found, key=lambda gi: (gi.start, gi.gi_id)))

    def create_gpu_instance(self, gpu: int, profile: str, start: int) -> GpuInstance:
        nvml = self._nvml
        handle = self._handle(gpu)
        profiles = self._profiles(gpu, handle)
        chosen = next((p for p in profiles if p.name == profile), None)
        if chosen is None:
            offered = ", ".join(p.name for p in profiles) or "none: is MIG mode on?"
            raise MigOpError(
                MigRefusal.NOT_SUPPORTED,
                f"GPU {gpu} offers no GPU instance profile {profile} (it offers {offered})",
            )
        what = f"GPU {gpu}: create {profile} at memory slice {start}"
        placements = (nvml.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
        count = ctypes.c_uint(_MAX_PLACEMENTS)
        self._call(
            what,
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            handle,
            chosen.profile_id,
            placements,
            ctypes.byref(count),
        )
        possible = {int(p.start): int(p.size) for p in placements[: count.value]}
        if start not in possible:
            raise MigOpError(
                MigRefusal.INVALID_ARGUMENT,
                f"{what}: {profile} starts at "
                f"{', '.join(str(s) for s in sorted(possible)) or 'no placement'}",
            )
        placement = nvml.c_nvmlGpuInstancePlacement_t(start, possible[start])
        gi = self._call(
            what,
            "nvmlDeviceCreateGpuInstanceWithPlacement",
            handle,
            chosen.profile_id,
            ctypes.byref(placement),
        )
        return self._gpu_instance(gpu, gi, {p.profile_id: p.name for p in profiles})

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None:
        gi = self._instance(gpu, self._handle(gpu), gi_id)
        self._call(f"GPU {gpu}: destroy GPU instance {gi_id}", "nvmlGpuInstanceDestroy", gi)

    def compute_instances(self, gpu: int, gi_id: int) -> tuple[ComputeInstance, ...]:
        nvml = self._nvml
        gi = self._instance(gpu, self._handle(gpu), gi_id)
        slices = self._compute_profiles(gpu, gi)
        found = []
        for ci_id in range(_MAX_COMPUTE_IDS):
            try:
                ci = nvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
            except nvml.NVMLError as exc:
                refusal = self._refusal(exc)
                if refusal in (MigRefusal.NOT_FOUND, MigRefusal.INVALID_ARGUMENT):
                    continue
                raise self._error(
                    f"GPU {gpu}: GPU instance {gi_id}: compute instance {ci_id}", exc
                ) from None
            info = self._call(
                f"GPU {gpu}: compute instance {ci_id}", "nvmlComputeInstanceGetInfo", ci
            )
            found.append(
                ComputeInstance(gpu, gi_id, int(info.id), slices.get(int(info.profileId), 0))
            )
        return tuple(found)

    def create_compute_instance(self, gpu: int, gi_id: int) -> ComputeInstance:
        handle = self._handle(gpu)
        gi = self._instance(gpu, handle, gi_id)
        names = {p.profile_id: p for p in self._profiles(gpu, handle)}
        info = self._call(f"GPU {gpu}: GPU instance {gi_id}", "nvmlGpuInstanceGetInfo", gi)
        profile = names.get(int(info.profileId))
        offered = self._compute_profiles(gpu, gi)
        what = f"GPU {gpu}: create a compute instance in GPU instance {gi_id}"
        width = profile.slices if profile is not None else max(offered.values(), default=0)
        full = [pid for pid, n in offered.items() if n == width]
        if not full:
            raise MigOpError(MigRefusal.NOT_SUPPORTED, f"{what}: no {width}-slice profile")
        ci = self._call(what, "nvmlGpuInstanceCreateComputeInstance", gi, full[0])
        created = self._call(what, "nvmlComputeInstanceGetInfo", ci)
        return ComputeInstance(gpu, gi_id, int(created.id), width)

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None:
        gi = self._instance(gpu, self._handle(gpu), gi_id)
        what = f"GPU {gpu}: GPU instance {gi_id}: compute instance {ci_id}"
        ci = self._call(what, "nvmlGpuInstanceGetComputeInstanceById", gi, ci_id)
        self._call(f"{what}: destroy", "nvmlComputeInstanceDestroy", ci)

    def gpu_processes(self, gpu: int) -> tuple[int, ...]:
        nvml = self._nvml
        handle = self._handle(gpu)
        handles = [handle]
        count = 0
        with contextlib.suppress(nvml.NVMLError):  # not MIG capable: no MIG devices
            count = int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        for slot in range(count):
            try:
                handles.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot))
            except nvml.NVMLError:
                continue
        pids: set[int] = set()
        for which, h in enumerate(handles):
            for fn in (
                "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetGraphicsRunningProcesses",
            ):
                if not hasattr(nvml, fn):
                    continue
                try:
                    found = getattr(nvml, fn)(h)
                except nvml.NVMLError as exc:
                    if which and self._refusal(exc) is MigRefusal.NOT_SUPPORTED:
                        continue  # MIG devices do not report graphics processes
                    raise self._error(f"GPU {gpu}: running processes", exc) from None
                pids.update(int(p.pid) for p in found)
        return tuple(sorted(pids))
