"""MIG operations on a simulated GPU, refused where a real GPU refuses them.

The rules are NVML's, with the geometry of :mod:`kgpu.hardware.mig` (the placements NVML offers
per product):

- GPU instances exist only while MIG mode is on (``not-supported`` otherwise); a profile the
  product does not offer is ``not-supported``; a start the profile cannot take is
  ``invalid-argument``; an instance that overlaps another's memory slices, a profile past its
  instance count, a second media-extension (``+me``) instance or more compute slices than the GPU
  has is ``insufficient-resources``.
- A GPU instance with compute instances, a compute instance with processes, and turning MIG off
  while instances exist are ``in-use``.
- A mode change is activated at once on an idle GPU (the driver resets it itself). With
  processes on the GPU, or on a GPU marked as needing a reset (a VM with GPU passthrough, a
  driver that cannot reset it while other clients are attached), the change stays *pending*
  until :meth:`SimulatedMig.reset` -- what a GPU reset or a node reboot does: the pending mode
  takes effect and every GPU and compute instance is gone (they do not survive a reset).

A GPU instance with a full-size compute instance is a :class:`~kgpu.hardware.model.MigDevice` of
the snapshot, built by :func:`kgpu.hardware.mig.mig_device`, so a layout created here has the
UUIDs, ids and placements :func:`kgpu.hardware.mig.apply_layout` gives the same layout. GPU
instances without a compute instance, pending modes and processes are not in the snapshot (NVML
shows none of them as devices either) and live in :class:`SimulatedMig`.
"""

from __future__ import annotations

from dataclasses import replace

from kgpu.hardware.backend import (
    ComputeInstance,
    GpuInstance,
    MigMode,
    MigOpError,
    MigRefusal,
)
from kgpu.hardware.mig import MigGeometry, geometry_for, gi_id_for, mig_device
from kgpu.hardware.model import Gpu, MigDevice


def _geometry(gpu: Gpu) -> MigGeometry:
    if not gpu.mig_capable:
        raise MigOpError(
            MigRefusal.NOT_SUPPORTED, f"GPU {gpu.index} ({gpu.product_name}) is not MIG capable"
        )
    geometry = geometry_for(gpu)
    if geometry is None:
        raise MigOpError(
            MigRefusal.NOT_SUPPORTED,
            f"GPU {gpu.index} ({gpu.product_name}) has no MIG geometry kgpu knows",
        )
    return geometry


def _reindexed(gpu: Gpu, devices: list[MigDevice]) -> Gpu:
    """``gpu`` with ``devices`` as its MIG devices, numbered by placement as NVML lists them."""
    ordered = sorted(devices, key=lambda m: (m.placement_start, m.gi_id, m.ci_id, m.profile))
    return replace(gpu, mig_devices=tuple(replace(m, index=i) for i, m in enumerate(ordered)))


class SimulatedMig:
    """The MIG state of a simulated machine that its snapshot does not carry, and the rules.

    Not thread-safe by itself: :class:`~kgpu.hardware.simulated.SimulatedBackend` calls it under
    its lock and swaps the GPU it returns into the machine.
    """

    def __init__(self) -> None:
        self._pending: dict[str, bool] = {}  # GPU UUID -> mode waiting for a reset
        self._why: dict[str, MigRefusal] = {}
        self._bare: dict[str, dict[int, GpuInstance]] = {}  # GPU instances with no compute inst.
        self._processes: dict[str, tuple[int, ...]] = {}  # GPU or MIG UUID -> PIDs
        self._needs_reset: set[str] = set()

    # -- fault injection ------------------------------------------------------------------------

    def set_processes(self, uuid: str, pids: tuple[int, ...]) -> None:
        if pids:
            self._processes[uuid] = pids
        else:
            self._processes.pop(uuid, None)

    def set_needs_reset(self, uuid: str, needs: bool) -> None:
        if needs:
            self._needs_reset.add(uuid)
        else:
            self._needs_reset.discard(uuid)

    def forget(self) -> None:
        """The machine was replaced wholesale: pending modes and bare instances go with it."""
        self._pending.clear()
        self._why.clear()
        self._bare.clear()

    # -- reads ----------------------------------------------------------------------------------

    def processes(self, gpu: Gpu) -> tuple[int, ...]:
        uuids = [gpu.uuid, *(m.uuid for m in gpu.mig_devices)]
        return tuple(sorted({pid for uuid in uuids for pid in self._processes.get(uuid, ())}))

    def mode(self, gpu: Gpu) -> MigMode:
        _geometry(gpu)
        pending = self._pending.get(gpu.uuid, gpu.mig_enabled)
        return MigMode(
            gpu.mig_enabled,
            pending,
            self._why.get(gpu.uuid) if pending != gpu.mig_enabled else None,
        )

    def instances(self, gpu: Gpu) -> tuple[GpuInstance, ...]:
        _geometry(gpu)
        found: dict[int, GpuInstance] = dict(self._bare.get(gpu.uuid, {}))
        for mig in gpu.mig_devices:
            found.setdefault(
                mig.gi_id,
                GpuInstance(
                    gpu.index, mig.gi_id, mig.profile, mig.placement_start, mig.placement_size
                ),
            )
        return tuple(sorted(found.values(), key=lambda gi: (gi.start, gi.gi_id)))

    def compute_instances(self, gpu: Gpu, gi_id: int) -> tuple[ComputeInstance, ...]:
        self._instance(gpu, gi_id)
        return tuple(
            ComputeInstance(gpu.index, gi_id, m.ci_id, m.compute_slices)
            for m in sorted(gpu.mig_devices, key=lambda m: m.ci_id)
            if m.gi_id == gi_id
        )

    def _instance(self, gpu: Gpu, gi_id: int) -> GpuInstance:
        for gi in self.instances(gpu):
            if gi.gi_id == gi_id:
                return gi
        raise MigOpError(MigRefusal.NOT_FOUND, f"GPU {gpu.index} has no GPU instance {gi_id}")

    # -- changes: each returns the GPU as it is afterwards ---------------------------------------

    def set_mode(self, gpu: Gpu, enabled: bool) -> tuple[Gpu, MigMode]:
        _geometry(gpu)
        word = "enable" if enabled else "disable"
        if enabled == gpu.mig_enabled:
            self._pending.pop(gpu.uuid, None)  # setting the current mode cancels a pending one
            self._why.pop(gpu.uuid, None)
            return gpu, MigMode(enabled, enabled)
        if not enabled and self.instances(gpu):
            raise MigOpError(
                MigRefusal.IN_USE,
                f"cannot {word} MIG mode on GPU {gpu.index}: GPU instances still exist "
                "(destroy them first)",
            )
        why: MigRefusal | None = None
        if self.processes(gpu):
            why = MigRefusal.IN_USE
        elif gpu.uuid in self._needs_reset:
            why = MigRefusal.RESET_REQUIRED
        if why is not None:
            self._pending[gpu.uuid] = enabled
            self._why[gpu.uuid] = why
            return gpu, MigMode(gpu.mig_enabled, enabled, why)
        self._pending.pop(gpu.uuid, None)
        self._why.pop(gpu.uuid, None)
        self._bare.pop(gpu.uuid, None)
        return replace(gpu, mig_enabled=enabled, mig_devices=()), MigMode(enabled, enabled)

    def create_gpu_instance(self, gpu: Gpu, profile: str, start: int) -> tuple[Gpu, GpuInstance]:
        geometry = _geometry(gpu)
        where = f"GPU {gpu.index} ({gpu.product_name})"
        if not gpu.mig_enabled:
            raise MigOpError(MigRefusal.NOT_SUPPORTED, f"{where}: MIG mode is disabled")
        wanted = geometry.profiles.get(profile)
        if wanted is None:
            raise MigOpError(
                MigRefusal.NOT_SUPPORTED,
                f"{where} offers no GPU instance profile {profile} "
                f"(it offers {', '.join(geometry.profiles)})",
            )
        if start not in wanted.placements:
            raise MigOpError(
                MigRefusal.INVALID_ARGUMENT,
                f"{where}: {profile} cannot start at memory slice {start} "
                f"(it starts at {', '.join(map(str, wanted.placements))})",
            )
        existing = self.instances(gpu)
        span = set(range(start, start + wanted.memory_slices))
        for gi in existing:
            if span & set(range(gi.start, gi.start + gi.size)):
                raise MigOpError(
                    MigRefusal.INSUFFICIENT_RESOURCES,
                    f"{where}: {profile} at memory slice {start} overlaps GPU instance "
                    f"{gi.gi_id} ({gi.profile} at {gi.start}, {gi.size} slices)",
                )
        profiles = [geometry.profiles.get(gi.profile) for gi in existing]
        same = sum(1 for gi in existing if gi.profile == profile)
        if same >= wanted.max_count:
            raise MigOpError(
                MigRefusal.INSUFFICIENT_RESOURCES,
                f"{where}: no {profile} instance left ({wanted.max_count} at most)",
            )
        if wanted.media_extensions and any(p and p.media_extensions for p in profiles):
            raise MigOpError(
                MigRefusal.INSUFFICIENT_RESOURCES,
                f"{where}: the media engines already belong to another +me instance",
            )
        used = sum(p.compute_slices for p in profiles if p is not None)
        if used + wanted.compute_slices > geometry.compute_slices:
            raise MigOpError(
                MigRefusal.INSUFFICIENT_RESOURCES,
                f"{where}: {profile} needs {wanted.compute_slices} compute slices, "
                f"{geometry.compute_slices - used} are free",
            )
        gi = GpuInstance(
            gpu.index,
            gi_id_for(geometry, wanted.memory_slices, start),
            profile,
            start,
            wanted.memory_slices,
        )
        self._bare.setdefault(gpu.uuid, {})[gi.gi_id] = gi
        return gpu, gi

    def destroy_gpu_instance(self, gpu: Gpu, gi_id: int) -> Gpu:
        gi = self._instance(gpu, gi_id)
        if any(m.gi_id == gi_id for m in gpu.mig_devices):
            raise MigOpError(
                MigRefusal.IN_USE,
                f"GPU {gpu.index}: GPU instance {gi_id} ({gi.profile}) still has compute instances",
            )
        del self._bare[gpu.uuid][gi_id]
        return gpu

    def create_compute_instance(self, gpu: Gpu, gi_id: int) -> tuple[Gpu, ComputeInstance]:
        geometry = _geometry(gpu)
        gi = self._instance(gpu, gi_id)
        if gi_id not in self._bare.get(gpu.uuid, {}):
            raise MigOpError(
                MigRefusal.INSUFFICIENT_RESOURCES,
                f"GPU {gpu.index}: GPU instance {gi_id} ({gi.profile}) has no compute slices left",
            )
        device = mig_device(gpu, geometry, gi.profile, gi.start, 0)
        if device.gi_id != gi_id:  # cannot happen: ids follow placements
            raise MigOpError(MigRefusal.FAILED, f"GPU {gpu.index}: GPU instance id mismatch")
        del self._bare[gpu.uuid][gi_id]
        gpu = _reindexed(gpu, [*gpu.mig_devices, device])
        return gpu, ComputeInstance(gpu.index, gi_id, device.ci_id, device.compute_slices)

    def destroy_compute_instance(self, gpu: Gpu, gi_id: int, ci_id: int) -> Gpu:
        gi = self._instance(gpu, gi_id)
        for mig in gpu.mig_devices:
            if (mig.gi_id, mig.ci_id) != (gi_id, ci_id):
                continue
            pids = self._processes.get(mig.uuid, ())
            if pids:
                raise MigOpError(
                    MigRefusal.IN_USE,
                    f"GPU {gpu.index}: MIG device {mig.uuid} ({mig.profile}) has "
                    f"{len(pids)} process(es) running (PID {', '.join(map(str, pids))})",
                )
            rest = [m for m in gpu.mig_devices if m is not mig]
            if not any(m.gi_id == gi_id for m in rest):
                self._bare.setdefault(gpu.uuid, {})[gi_id] = gi
            return _reindexed(gpu, rest)
        raise MigOpError(
            MigRefusal.NOT_FOUND,
            f"GPU {gpu.index}: GPU instance {gi_id} has no compute instance {ci_id}",
        )

    def reset(self, gpu: Gpu) -> Gpu:
        """A GPU reset (or node reboot): the pending mode takes effect, instances and
        processes are gone."""
        for uuid in (gpu.uuid, *(m.uuid for m in gpu.mig_devices)):
            self._processes.pop(uuid, None)
        enabled = self._pending.pop(gpu.uuid, gpu.mig_enabled)
        self._why.pop(gpu.uuid, None)
        self._bare.pop(gpu.uuid, None)
        return replace(gpu, mig_enabled=enabled if gpu.mig_capable else False, mig_devices=())
