"""A Backend over a simulated machine, with the faults a real node shows.

It follows what the NVML backend reports on real hardware:

- ``wait_events`` behaves like ``nvmlEventSetWait``: it blocks until a critical XID arrives or
  the timeout passes, and each event is delivered once.
- A GPU marked failing (``set_nvml_failure``) answers nothing, as a GPU that fell off the bus:
  ``probe`` returns False for it, and ``snapshot`` leaves it out (NVML cannot read a lost GPU, so
  a fresh discovery does not list it). Its MIG devices vanish with it. Clearing the failure
  brings it back unchanged.
- The MIG operations (:class:`~kgpu.hardware.backend.MigBackend`) follow a real GPU's rules
  (:mod:`kgpu.hardware.simulated_mig`); ``set_processes``, ``set_needs_reset`` and
  ``reset_gpus`` make a GPU busy, make its mode changes wait for a reset, and reset it.
- The compute mode (:class:`~kgpu.hardware.backend.ComputeModeBackend`) starts ``Default``;
  ``open_context`` models what the CUDA driver does with it: in ``Exclusive_Process`` a GPU
  already held by a process (the MPS server of ``set_mps_server``) refuses every other process
  that does not come through MPS, and ``Prohibited`` refuses all. A GPU reset keeps the mode,
  as a real one does (only a reboot or ``nvidia-smi -c`` changes it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TypeVar

from kgpu.hardware.backend import (
    BackendError,
    ComputeInstance,
    ComputeMode,
    GpuInstance,
    MigMode,
    MigOpError,
    MigRefusal,
    TelemetryAccess,
    XidEvent,
)
from kgpu.hardware.events import EventHub
from kgpu.hardware.model import Gpu, Machine
from kgpu.hardware.simulated_mig import SimulatedMig

T = TypeVar("T")


class SimulatedBackend:
    """Thread-safe: the agent's health watcher, gRPC servers and metrics read it concurrently
    while tests or the simulator inject faults."""

    def __init__(self, machine: Machine) -> None:
        self._machine = machine
        self._cond = threading.Condition()
        self._events: list[XidEvent] = []
        self._history: list[XidEvent] = []
        self._failing: set[str] = set()
        self._closed = False
        self._mig = SimulatedMig()
        self._hub = EventHub(self.wait_events)
        self._compute_modes: dict[str, ComputeMode] = {}  # GPU UUID -> mode, when not Default
        self._mps_servers: dict[str, int] = {}  # GPU UUID -> PID of the MPS server on it
        self.refuse_compute_mode: str | None = None  # set: set_compute_mode fails with this

    # -- Backend protocol ---------------------------------------------------------------------

    def snapshot(self) -> Machine:
        with self._cond:
            if self._closed:
                raise BackendError("the simulated backend is closed")
            machine, failing = self._machine, frozenset(self._failing)
        if not failing:
            return machine
        return replace(machine, gpus=tuple(g for g in machine.gpus if g.uuid not in failing))

    def wait_events(self, timeout_s: float) -> list[XidEvent]:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        with self._cond:
            while not self._events and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            events, self._events = self._events, []
            return events

    def events(self) -> EventHub:
        return self._hub

    def telemetry(self) -> TelemetryAccess:
        """Simulated values; the last XIDs are the injected history (no reader needed)."""
        return TelemetryAccess(nvml=None, xids=self.last_xids)

    def probe(self, gpu_uuid: str) -> bool:
        with self._cond:
            if self._closed:
                return False
            gpu = self._find(gpu_uuid)
            return gpu is not None and gpu.uuid not in self._failing

    def close(self) -> None:
        self._hub.stop()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # -- fault injection ----------------------------------------------------------------------

    def inject_xid(
        self,
        gpu: int | str,
        xid: int,
        gi_id: int | None = None,
        ci_id: int | None = None,
    ) -> XidEvent:
        """Report XID ``xid`` on a GPU (index or UUID) or on a MIG device (its UUID, which sets
        ``gi_id``/``ci_id`` as NVML does for events raised inside a MIG device)."""
        with self._cond:
            target = self._resolve(gpu)
            if isinstance(gpu, str) and gpu.startswith("MIG-"):
                for mig in target.mig_devices:
                    if mig.uuid == gpu:
                        gi_id, ci_id = mig.gi_id, mig.ci_id
            event = XidEvent(
                gpu_uuid=target.uuid, xid=xid, gi_id=gi_id, ci_id=ci_id, timestamp=time.time()
            )
            self._events.append(event)
            self._history.append(event)
            self._cond.notify_all()
            return event

    def set_nvml_failure(self, gpu: int | str, failing: bool) -> None:
        """Make a GPU stop (or resume) answering NVML."""
        with self._cond:
            uuid = self._resolve(gpu).uuid
            if failing:
                self._failing.add(uuid)
            else:
                self._failing.discard(uuid)

    def replace_machine(self, machine: Machine) -> None:
        """Swap the hardware (a MIG reconfiguration, a driver upgrade); failures stay with the
        UUIDs they were set on."""
        with self._cond:
            self._machine = machine
            self._mig.forget()

    @property
    def machine(self) -> Machine:
        """The full machine, failing GPUs included."""
        with self._cond:
            return self._machine

    def last_xids(self) -> dict[str, int]:
        """The newest XID per GPU UUID injected so far (what ``DCGM_FI_DEV_XID_ERRORS``
        reports; NVML's event carries the GPU even when a MIG device raised it)."""
        with self._cond:
            return {event.gpu_uuid: event.xid for event in self._history}

    def xid_history(self) -> list[XidEvent]:
        """Every event injected so far (``wait_events`` consumes; this does not)."""
        with self._cond:
            return list(self._history)

    # -- MIG operations (MigBackend protocol) -------------------------------------------------

    def mig_mode(self, gpu: int) -> MigMode:
        return self._mig_read(gpu, self._mig.mode)

    def set_mig_mode(self, gpu: int, enabled: bool) -> MigMode:
        return self._mig_change(gpu, lambda g: self._mig.set_mode(g, enabled))

    def gpu_instances(self, gpu: int) -> tuple[GpuInstance, ...]:
        return self._mig_read(gpu, self._mig.instances)

    def create_gpu_instance(self, gpu: int, profile: str, start: int) -> GpuInstance:
        return self._mig_change(gpu, lambda g: self._mig.create_gpu_instance(g, profile, start))

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None:
        self._mig_change(gpu, lambda g: (self._mig.destroy_gpu_instance(g, gi_id), None))

    def compute_instances(self, gpu: int, gi_id: int) -> tuple[ComputeInstance, ...]:
        return self._mig_read(gpu, lambda g: self._mig.compute_instances(g, gi_id))

    def create_compute_instance(self, gpu: int, gi_id: int) -> ComputeInstance:
        return self._mig_change(gpu, lambda g: self._mig.create_compute_instance(g, gi_id))

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None:
        self._mig_change(gpu, lambda g: (self._mig.destroy_compute_instance(g, gi_id, ci_id), None))

    def gpu_processes(self, gpu: int) -> tuple[int, ...]:
        return self._mig_read(gpu, self._mig.processes)

    def set_processes(self, target: int | str, pids: Iterable[int]) -> None:
        """Processes now running on a GPU (index or UUID) or a MIG device (its UUID); an empty
        list ends them. A busy GPU keeps a mode change pending and refuses to lose a MIG device
        a process runs on."""
        with self._cond:
            uuid = target if isinstance(target, str) else self._resolve(target).uuid
            self._resolve(uuid)
            self._mig.set_processes(uuid, tuple(pids))

    def set_needs_reset(self, gpu: int | str, needs: bool = True) -> None:
        """Make a GPU's MIG mode changes wait for a GPU reset (a passthrough VM's GPU)."""
        with self._cond:
            self._mig.set_needs_reset(self._resolve(gpu).uuid, needs)

    def reset_gpus(self, gpus: Iterable[int] | None = None) -> None:
        """Reset GPUs (every GPU: a node reboot): pending MIG modes take effect, GPU and compute
        instances and processes are gone."""
        with self._cond:
            wanted = None if gpus is None else set(gpus)
            self._machine = self._machine.with_gpus(
                tuple(
                    self._mig.reset(g) if wanted is None or g.index in wanted else g
                    for g in self._machine.gpus
                )
            )

    def _mig_gpu(self, index: int) -> Gpu:
        if self._closed:
            raise BackendError("the simulated backend is closed")
        for gpu in self._machine.gpus:
            if gpu.index == index:
                if gpu.uuid in self._failing:
                    raise MigOpError(MigRefusal.GPU_LOST, f"GPU {index} does not answer NVML")
                return gpu
        raise MigOpError(MigRefusal.NOT_FOUND, f"no GPU with index {index}")

    def _mig_read(self, index: int, read: Callable[[Gpu], T]) -> T:
        with self._cond:
            return read(self._mig_gpu(index))

    def _mig_change(self, index: int, change: Callable[[Gpu], tuple[Gpu, T]]) -> T:
        with self._cond:
            gpu, result = change(self._mig_gpu(index))
            self._machine = self._machine.with_gpus(
                tuple(gpu if g.index == index else g for g in self._machine.gpus)
            )
            return result

    # -- compute mode (ComputeModeBackend protocol) --------------------------------------------

    def compute_mode(self, gpu: int) -> ComputeMode:
        with self._cond:
            return self._compute_modes.get(self._mig_gpu(gpu).uuid, ComputeMode.DEFAULT)

    def set_compute_mode(self, gpu: int, mode: ComputeMode) -> None:
        with self._cond:
            uuid = self._mig_gpu(gpu).uuid
            if self.refuse_compute_mode is not None:
                raise BackendError(f"GPU {gpu}: {self.refuse_compute_mode}")
            self._compute_modes[uuid] = mode

    def set_mps_server(self, gpu: int | str, pid: int | None) -> None:
        """An MPS server now holds the GPU (index or UUID) as process ``pid``; None: it quit."""
        with self._cond:
            uuid = self._resolve(gpu).uuid
            if pid is None:
                self._mps_servers.pop(uuid, None)
            else:
                self._mps_servers[uuid] = pid

    def open_context(self, gpu: int | str, *, through_mps: bool) -> None:
        """A process creates a CUDA context on the GPU, as an MPS client or directly; raises
        :class:`BackendError` with the CUDA driver's refusal when the compute mode forbids it."""
        with self._cond:
            found = self._resolve(gpu)
            mode = self._compute_modes.get(found.uuid, ComputeMode.DEFAULT)
            server = self._mps_servers.get(found.uuid)
            if through_mps and server is not None and mode != ComputeMode.PROHIBITED:
                return
            busy = server is not None or bool(self._mig.processes(found))
            if mode == ComputeMode.PROHIBITED or (mode == ComputeMode.EXCLUSIVE_PROCESS and busy):
                raise BackendError(
                    f"GPU {found.index} is in {mode} compute mode and held: "
                    "all CUDA-capable devices are busy or unavailable"
                )

    # -- helpers ------------------------------------------------------------------------------

    def _find(self, uuid: str) -> Gpu | None:
        for gpu in self._machine.gpus:
            if gpu.uuid == uuid or any(m.uuid == uuid for m in gpu.mig_devices):
                return gpu
        return None

    def _resolve(self, gpu: int | str) -> Gpu:
        if isinstance(gpu, int):
            for candidate in self._machine.gpus:
                if candidate.index == gpu:
                    return candidate
            raise BackendError(f"no GPU with index {gpu} on {self._machine.profile}")
        found = self._find(gpu)
        if found is None:
            raise BackendError(f"no GPU or MIG device with UUID {gpu} on {self._machine.profile}")
        return found
