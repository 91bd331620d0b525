"""A Backend over a simulated machine, with the faults a real node shows.

It follows what the NVML backend reports on real hardware:

- ``wait_events`` behaves like ``nvmlEventSetWait``: it blocks until a critical XID arrives or
  the timeout passes, and each event is delivered once.
- A GPU marked failing (``set_nvml_failure``) answers nothing, as a GPU that fell off the bus:
  ``probe`` returns False for it, and ``snapshot`` leaves it out (NVML cannot read a lost GPU, so
  a fresh discovery does not list it). Its MIG devices vanish with it. Clearing the failure
  brings it back unchanged.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from kgpu.hardware.backend import BackendError, XidEvent
from kgpu.hardware.model import Gpu, Machine


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

    def probe(self, gpu_uuid: str) -> bool:
        with self._cond:
            if self._closed:
                return False
            gpu = self._find(gpu_uuid)
            return gpu is not None and gpu.uuid not in self._failing

    def close(self) -> None:
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
