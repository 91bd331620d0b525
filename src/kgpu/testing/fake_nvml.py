"""A stand-in for the ``pynvml`` module over a simulated machine, for the NVML backend's MIG
operations and the MIG manager on ``--machine nvml``.

No GPU can be lent to the tests, and a MIG change is the one thing kgpu must never try on a GPU
it was not asked to change; so :class:`~kgpu.hardware.nvml.NvmlBackend` is driven through this
fake, which answers with pynvml's own error classes, constants and ctypes structs. Behind it is a
:class:`~kgpu.hardware.simulated.SimulatedBackend`, whose MIG rules are the ones a real GPU
enforces (:mod:`kgpu.hardware.simulated_mig`); the fake translates its refusals into the NVML
return codes a real driver gives:

- a mode change on a busy GPU or one that needs a reset: ``nvmlDeviceSetMigMode`` succeeds with
  activation status ``NVML_ERROR_IN_USE`` / ``NVML_ERROR_RESET_REQUIRED`` and
  ``nvmlDeviceGetMigMode`` reports the new mode as pending;
- destroying a compute instance with processes, a GPU instance with compute instances, or
  turning MIG off while instances exist: ``NVML_ERROR_IN_USE``;
- a placement that overlaps, a profile out of instances, a second ``+me`` instance:
  ``NVML_ERROR_INSUFFICIENT_RESOURCES``; a start the profile cannot take:
  ``NVML_ERROR_INVALID_ARGUMENT``; a profile the GPU does not offer, or MIG off:
  ``NVML_ERROR_NOT_SUPPORTED``; an id that does not exist: ``NVML_ERROR_NOT_FOUND``.

It also answers the discovery calls ``NvmlBackend.snapshot`` makes (names, UUIDs, memory, MIG
devices with their instance ids, attributes and placements), so "re-read NVML" reads what the
operations left. Profile ids follow an A100's (``1g.10gb`` is 19, ``3g.40gb`` 9, ``7g.80gb``
0).

XID events as the driver delivers them: ``nvmlEventSetWait_v2`` blocks until an event
registered on the set arrives (:meth:`FakeNvml.inject_event`) or the timeout passes
(``NVML_ERROR_TIMEOUT``), and waits are serialised across every event set of the process, the
way a real H200's driver made a zero-timeout drain queue behind another thread's half-second
wait; ``wait_threads`` records which thread made each wait. What it does not model: compute
instances narrower than their GPU instance (creating one is ``NVML_ERROR_NOT_SUPPORTED``),
per-MIG-device process lists (the parent GPU lists them all, as NVML does for root),
telemetry. ``fail[function] = code`` makes a call raise that
NVML error (``NVML_ERROR_NO_PERMISSION`` on ``nvmlDeviceSetMigMode``, say); ``calls`` records
every call made, ``mutating_calls()`` those that change MIG state.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

from kgpu.hardware.backend import BackendError, ComputeMode, MigOpError, MigRefusal
from kgpu.hardware.mig import MigGeometry, MigProfile, geometry_for
from kgpu.hardware.model import Gpu, MigDevice
from kgpu.hardware.simulated import SimulatedBackend

MIB = 1024 * 1024

_CODES = {
    MigRefusal.IN_USE: pynvml.NVML_ERROR_IN_USE,
    MigRefusal.RESET_REQUIRED: pynvml.NVML_ERROR_RESET_REQUIRED,
    MigRefusal.INSUFFICIENT_RESOURCES: pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES,
    MigRefusal.NOT_SUPPORTED: pynvml.NVML_ERROR_NOT_SUPPORTED,
    MigRefusal.INVALID_ARGUMENT: pynvml.NVML_ERROR_INVALID_ARGUMENT,
    MigRefusal.NOT_FOUND: pynvml.NVML_ERROR_NOT_FOUND,
    MigRefusal.NO_PERMISSION: pynvml.NVML_ERROR_NO_PERMISSION,
    MigRefusal.GPU_LOST: pynvml.NVML_ERROR_GPU_IS_LOST,
    MigRefusal.FAILED: pynvml.NVML_ERROR_UNKNOWN,
}
#: GPU-instance profile index -> the profile id an A100 reports for it
_GI_PROFILE_IDS = {0: 19, 1: 14, 2: 9, 3: 5, 4: 0, 5: 22, 6: 23, 7: 20, 8: 21, 9: 15}
#: compute slices -> compute-instance profile index (NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE)
_CI_INDEX = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
#: The calls that change a GPU's MIG layout: where nothing may change (an unchanged config, a
#: node that is not the manager's to touch), a test asserts none of them was made.
MUTATING_CALLS = frozenset(
    {
        "nvmlDeviceSetMigMode",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceDestroy",
        "nvmlGpuInstanceCreateComputeInstance",
        "nvmlComputeInstanceDestroy",
    }
)


def _engines(profile: MigProfile, geometry_compute: int) -> dict[str, int]:
    """The profile's engine counts from the product's published table; without one, shaped
    like an A100's (a copy engine per compute slice; decoders, JPEG and OFA on the whole GPU and
    on ``+me`` instances): approximate, for callers that read them."""
    if profile.engines is not None:
        e = profile.engines
        return {
            "copyEngineCount": e.copy,
            "decoderCount": e.decoder,
            "encoderCount": e.encoder,
            "jpegCount": e.jpeg,
            "ofaCount": e.ofa,
        }
    whole = profile.compute_slices == geometry_compute
    media = 1 if whole or profile.media_extensions else 0
    return {
        "copyEngineCount": profile.compute_slices,
        "decoderCount": profile.compute_slices * 5 // 7 or media,
        "encoderCount": 0,
        "jpegCount": media,
        "ofaCount": media,
    }


def gi_profile_index(geometry: MigGeometry, profile: MigProfile) -> int:
    """The ``NVML_GPU_INSTANCE_PROFILE_*`` index of a profile: by compute slices, with the
    media-extension revision (REV1) and the double-memory one-slice revision (REV2)."""
    c = profile.compute_slices
    if profile.media_extensions:
        return 7 if c == 1 else 8
    smallest = min(
        (p.memory_slices for p in geometry.profiles.values() if p.compute_slices == 1),
        default=1,
    )
    if c == 1 and profile.memory_slices > smallest:
        return 9
    return _CI_INDEX[c]


@dataclass(frozen=True)
class _Device:
    index: int


@dataclass(frozen=True)
class _Mig:
    index: int
    uuid: str


@dataclass(frozen=True)
class _Gi:
    index: int
    gi_id: int


@dataclass(frozen=True)
class _Ci:
    index: int
    gi_id: int
    ci_id: int


@dataclass
class _EventSet:
    devices: set[int] = field(default_factory=set)
    queue: list[Any] = field(default_factory=list)
    freed: bool = False


_NO_INSTANCE = 0xFFFFFFFF


def _deref(ref: Any) -> Any:
    """The object behind ``ctypes.byref(obj)`` (or the object itself)."""
    return getattr(ref, "_obj", ref)


class FakeNvml:
    """``pynvml`` for NvmlBackend, over ``sim`` (whose MIG state it changes)."""

    NVMLError = pynvml.NVMLError

    def __init__(self, sim: SimulatedBackend, driver: str = "570.124.06") -> None:
        self.sim = sim
        self.driver = driver
        self.fail: dict[str, int] = {}
        self.calls: list[str] = []
        self.initialised = 0
        self.wait_threads: list[str] = []
        #: NVML's addressing mode and virtualization mode for every GPU (an H200 in a VM:
        #: ``NVML_DEVICE_ADDRESSING_MODE_NONE``, pass-through)
        self.addressing_mode = int(pynvml.NVML_DEVICE_ADDRESSING_MODE_NONE)
        self.virtualization_mode = int(pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH)
        self._event_sets: list[_EventSet] = []
        self._events = threading.Condition()
        self._driver_wait = threading.Lock()  # one event wait at a time, as the driver does

    def mutating_calls(self) -> list[str]:
        """The calls made so far that change MIG state (:data:`MUTATING_CALLS`), in order."""
        return [c for c in self.calls if c in MUTATING_CALLS]

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "c_nvml")):
            return getattr(pynvml, name)
        raise AttributeError(name)  # an NVML function this fake does not answer

    # -- plumbing ------------------------------------------------------------------------------

    def _enter(self, fn: str) -> None:
        self.calls.append(fn)
        code = self.fail.get(fn)
        if code is not None:
            raise pynvml.NVMLError(code)

    def _gpu(self, handle: Any) -> Gpu:
        index = handle.index
        for gpu in self.sim.snapshot().gpus:
            if gpu.index == index:
                return gpu
        raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    def _mig(self, handle: _Mig) -> MigDevice:
        for mig in self._gpu(handle).mig_devices:
            if mig.uuid == handle.uuid:
                return mig
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def _geometry(self, gpu: Gpu) -> MigGeometry:
        geometry = geometry_for(gpu)
        if geometry is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return geometry

    def _profiles(self, gpu: Gpu) -> dict[int, tuple[int, MigProfile]]:
        """profile id -> (profile index, profile), for a GPU with MIG mode on."""
        if not gpu.mig_enabled:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        geometry = self._geometry(gpu)
        out: dict[int, tuple[int, MigProfile]] = {}
        for profile in geometry.profiles.values():
            index = gi_profile_index(geometry, profile)
            out[_GI_PROFILE_IDS.get(index, 30 + index)] = (index, profile)
        return out

    def _profile_id(self, gpu: Gpu, name: str) -> int:
        return next(pid for pid, (_, p) in self._profiles(gpu).items() if p.name == name)

    @staticmethod
    def _sim_call(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except MigOpError as exc:
            raise pynvml.NVMLError(_CODES[exc.refusal]) from None

    # -- lifecycle and discovery ---------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        major, minor = self.sim.snapshot().cuda_driver_version
        return major * 1000 + minor * 10

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.sim.snapshot().gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Device:
        self._enter("nvmlDeviceGetHandleByIndex")
        handle = _Device(index)
        self._gpu(handle)
        return handle

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any:
        for gpu in self.sim.snapshot().gpus:
            if gpu.uuid == uuid:
                return _Device(gpu.index)
            for mig in gpu.mig_devices:
                if mig.uuid == uuid:
                    return _Mig(gpu.index, uuid)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return self._mig(h).uuid if isinstance(h, _Mig) else self._gpu(h).uuid

    def nvmlDeviceGetName(self, h: Any) -> str:
        gpu = self._gpu(h)
        if isinstance(h, _Mig):
            return f"{gpu.product_name} MIG {self._mig(h).profile}"
        return gpu.product_name

    def nvmlDeviceGetPciInfo(self, h: _Device) -> Any:
        return SimpleNamespace(busId=self._gpu(h).pci_bus_id.encode())

    def nvmlDeviceGetCudaComputeCapability(self, h: _Device) -> tuple[int, int]:
        return self._gpu(h).compute_capability

    def nvmlDeviceGetMinorNumber(self, h: _Device) -> int:
        return self._gpu(h).minor

    def nvmlDeviceGetNumaNodeId(self, h: _Device) -> int:
        node = self._gpu(h).numa_node
        return -1 if node is None else node

    def nvmlDeviceGetAddressingMode(self, h: _Device) -> int:
        self._gpu(h)
        return self.addressing_mode

    def nvmlDeviceGetVirtualizationMode(self, h: _Device) -> int:
        self._gpu(h)
        return self.virtualization_mode

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        mib = self._mig(h).memory_mib if isinstance(h, _Mig) else self._gpu(h).memory_mib
        return SimpleNamespace(total=mib * MIB, used=0, free=mib * MIB)

    def nvmlDeviceGetMigMode(self, h: _Device) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        mode = self._sim_call(self.sim.mig_mode, h.index)
        return [int(mode.current), int(mode.pending)]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Device) -> int:
        gpu = self._gpu(h)
        geometry = geometry_for(gpu)
        if geometry is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return geometry.compute_slices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Device, slot: int) -> _Mig:
        devices = sorted(self._gpu(h).mig_devices, key=lambda m: m.index)
        if slot >= len(devices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return _Mig(h.index, devices[slot].uuid)

    def nvmlDeviceGetGpuInstanceId(self, h: _Mig) -> int:
        return self._mig(h).gi_id

    def nvmlDeviceGetComputeInstanceId(self, h: _Mig) -> int:
        return self._mig(h).ci_id

    def nvmlDeviceGetAttributes(self, h: _Mig) -> Any:
        mig = self._mig(h)
        return SimpleNamespace(
            memorySizeMB=mig.memory_mib,
            gpuInstanceSliceCount=mig.compute_slices,
            computeInstanceSliceCount=mig.compute_slices,
            multiprocessorCount=mig.multiprocessor_count,
        )

    # -- MIG mode --------------------------------------------------------------------------------

    def nvmlDeviceSetMigMode(self, h: _Device, mode: int) -> int:
        self._enter("nvmlDeviceSetMigMode")
        enabled = mode == pynvml.NVML_DEVICE_MIG_ENABLE
        result = self._sim_call(self.sim.set_mig_mode, h.index, enabled)
        return int(_CODES[result.why]) if result.why is not None else int(pynvml.NVML_SUCCESS)

    # -- GPU instances ---------------------------------------------------------------------------

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h: _Device, index: int, version: int = 2) -> Any:
        gpu = self._gpu(h)
        for pid, (idx, p) in self._profiles(gpu).items():
            if idx == index:
                return SimpleNamespace(
                    id=pid,
                    isP2pSupported=0,
                    sliceCount=p.compute_slices,
                    instanceCount=p.max_count,
                    multiprocessorCount=p.multiprocessor_count,
                    memorySizeMB=p.memory_mib,
                    **_engines(p, geometry_compute=self._geometry(gpu).compute_slices),
                )
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, h: _Device, profile_id: int, placements: Any, count_ref: Any
    ) -> int:
        gpu = self._gpu(h)
        found = self._profiles(gpu).get(profile_id)
        if found is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        profile = found[1]
        count = _deref(count_ref)
        if len(profile.placements) > count.value:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, start in enumerate(profile.placements):
            placements[i].start = start
            placements[i].size = profile.memory_slices
        count.value = len(profile.placements)
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, h: _Device, profile_id: int, placement_ref: Any
    ) -> _Gi:
        self._enter("nvmlDeviceCreateGpuInstanceWithPlacement")
        gpu = self._gpu(h)
        found = self._profiles(gpu).get(profile_id)
        placement = _deref(placement_ref)
        if found is None or not isinstance(placement, ctypes.Structure):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        profile = found[1]
        if int(placement.size) != profile.memory_slices:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gi = self._sim_call(
            self.sim.create_gpu_instance, h.index, profile.name, int(placement.start)
        )
        return _Gi(h.index, gi.gi_id)

    def nvmlDeviceGetGpuInstanceById(self, h: _Device, gi_id: int) -> _Gi:
        self._enter("nvmlDeviceGetGpuInstanceById")
        gpu = self._gpu(h)
        if not gpu.mig_enabled:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if any(gi.gi_id == gi_id for gi in self.sim.gpu_instances(h.index)):
            return _Gi(h.index, gi_id)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceGetInfo(self, h: _Gi) -> Any:
        gpu = self._gpu(h)
        for gi in self.sim.gpu_instances(h.index):
            if gi.gi_id == h.gi_id:
                return SimpleNamespace(
                    device=_Device(h.index),
                    id=gi.gi_id,
                    profileId=self._profile_id(gpu, gi.profile),
                    placement=SimpleNamespace(start=gi.start, size=gi.size),
                )
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceDestroy(self, h: _Gi) -> int:
        self._enter("nvmlGpuInstanceDestroy")
        self._sim_call(self.sim.destroy_gpu_instance, h.index, h.gi_id)
        return int(pynvml.NVML_SUCCESS)

    # -- compute instances -----------------------------------------------------------------------

    def _gi_slices(self, h: _Gi) -> int:
        gpu = self._gpu(h)
        info = self.nvmlGpuInstanceGetInfo(h)
        return self._profiles(gpu)[info.profileId][1].compute_slices

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, h: _Gi, index: int, engine: int, version: int = 2
    ) -> Any:
        slices = next((n for n, i in _CI_INDEX.items() if i == index), None)
        if slices is None or slices > self._gi_slices(h):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(id=index, sliceCount=slices, instanceCount=1)

    def nvmlGpuInstanceCreateComputeInstance(self, h: _Gi, profile_id: int) -> _Ci:
        self._enter("nvmlGpuInstanceCreateComputeInstance")
        if _CI_INDEX.get(self._gi_slices(h)) != profile_id:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        ci = self._sim_call(self.sim.create_compute_instance, h.index, h.gi_id)
        return _Ci(h.index, h.gi_id, ci.ci_id)

    def nvmlGpuInstanceGetComputeInstanceById(self, h: _Gi, ci_id: int) -> _Ci:
        found = self._sim_call(self.sim.compute_instances, h.index, h.gi_id)
        if any(ci.ci_id == ci_id for ci in found):
            return _Ci(h.index, h.gi_id, ci_id)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlComputeInstanceGetInfo(self, h: _Ci) -> Any:
        for ci in self._sim_call(self.sim.compute_instances, h.index, h.gi_id):
            if ci.ci_id == h.ci_id:
                return SimpleNamespace(id=ci.ci_id, profileId=_CI_INDEX[ci.compute_slices])
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlComputeInstanceDestroy(self, h: _Ci) -> int:
        self._enter("nvmlComputeInstanceDestroy")
        self._sim_call(self.sim.destroy_compute_instance, h.index, h.gi_id, h.ci_id)
        return int(pynvml.NVML_SUCCESS)

    # -- compute mode ----------------------------------------------------------------------------

    def nvmlDeviceGetComputeMode(self, h: _Device) -> int:
        self._enter("nvmlDeviceGetComputeMode")
        mode = self._sim_call(self.sim.compute_mode, h.index)
        return int(getattr(pynvml, "NVML_COMPUTEMODE_" + mode.name))

    def nvmlDeviceSetComputeMode(self, h: _Device, value: int) -> None:
        self._enter("nvmlDeviceSetComputeMode")
        names = {int(getattr(pynvml, "NVML_COMPUTEMODE_" + m.name)): m for m in ComputeMode}
        if value not in names:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        try:
            self.sim.set_compute_mode(h.index, names[value])
        except BackendError:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION) from None

    # -- processes -------------------------------------------------------------------------------

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        if isinstance(h, _Mig):
            return []
        pids = self._sim_call(self.sim.gpu_processes, h.index)
        return [SimpleNamespace(pid=pid, usedGpuMemory=0) for pid in pids]

    # -- events ----------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        event_set = _EventSet()
        with self._events:
            self._event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, h: _Device, types: int, event_set: _EventSet) -> None:
        self._enter("nvmlDeviceRegisterEvents")
        self._gpu(h)
        with self._events:
            event_set.devices.add(h.index)

    def nvmlEventSetWait_v2(self, event_set: _EventSet, timeout_ms: int) -> Any:
        self._enter("nvmlEventSetWait_v2")
        self.wait_threads.append(threading.current_thread().name)
        with self._driver_wait:
            deadline = time.monotonic() + max(timeout_ms, 0) / 1000
            with self._events:
                while not event_set.queue and not event_set.freed:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
                    self._events.wait(remaining)
                if event_set.freed:
                    raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
                return event_set.queue.pop(0)

    def nvmlEventSetFree(self, event_set: _EventSet) -> None:
        self._enter("nvmlEventSetFree")
        with self._events:
            event_set.freed = True
            self._event_sets = [s for s in self._event_sets if s is not event_set]
            self._events.notify_all()

    def inject_event(
        self, gpu: int, xid: int, gi_id: int = _NO_INSTANCE, ci_id: int = _NO_INSTANCE
    ) -> None:
        """The driver reports XID ``xid`` on GPU ``gpu`` (index) to every set registered on it."""
        data = SimpleNamespace(
            device=_Device(gpu),
            eventType=int(pynvml.nvmlEventTypeXidCriticalError),
            eventData=xid,
            gpuInstanceId=gi_id,
            computeInstanceId=ci_id,
            timeStamp=int(time.time() * 1e6),
        )
        with self._events:
            for event_set in self._event_sets:
                if gpu in event_set.devices:
                    event_set.queue.append(data)
            self._events.notify_all()
