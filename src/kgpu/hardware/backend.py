"""The edge between kgpu and a node's GPUs.

Two implementations exist: :mod:`kgpu.hardware.nvml` (real hardware through ``nvidia-ml-py``) and
:mod:`kgpu.hardware.simulated` (machine profiles, with fault injection). Everything above this
layer sees only the :class:`Backend` protocol and the frozen snapshot types of
:mod:`kgpu.hardware.model`.

:class:`MigBackend` is the one part that changes a GPU: the MIG operations the MIG manager
(:mod:`kgpu.drivers.migmanager`) applies a mig-parted layout with. It is a separate protocol so
read-only consumers (the exporter, the view) never see it; both backends implement it, the
simulated one with the rules real GPUs enforce, so the manager runs the same code on both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from kgpu.hardware.model import Machine

if TYPE_CHECKING:
    from kgpu.hardware.events import EventHub


class BackendError(RuntimeError):
    """A backend could not do what was asked (NVML missing, a call unsupported...).

    The message is meant for a user: it says what failed and what to do about it.
    """


@dataclass(frozen=True)
class XidEvent:
    """An XID error reported by the driver for one GPU (or one of its MIG devices).

    ``gi_id``/``ci_id`` are set when NVML attributes the event to a MIG device.
    """

    gpu_uuid: str
    xid: int
    gi_id: int | None = None
    ci_id: int | None = None
    timestamp: float = 0.0


@dataclass(frozen=True)
class TelemetryAccess:
    """What a backend offers the exporter to read its GPUs' telemetry through.

    ``nvml`` is the NVML library the backend itself uses (a real node; the exporter reads
    through the same one), None where values are simulated. ``xids`` gives the newest XID per
    GPU UUID without waiting on anything; ``hub`` is the process's one event reader feeding it,
    which a reader of ``xids`` holds (:meth:`~kgpu.hardware.events.EventHub.acquire`) while it
    serves, or None when ``xids`` needs no reader (a simulated backend's injected history).
    """

    nvml: Any
    xids: Callable[[], Mapping[str, int]]
    hub: EventHub | None = None


class Backend(Protocol):
    """Read-only access to a node's GPUs."""

    def snapshot(self) -> Machine:
        """Discover every GPU now and return the frozen snapshot."""
        ...

    def wait_events(self, timeout_s: float) -> list[XidEvent]:
        """Block up to ``timeout_s`` for critical events; return those that arrived (maybe none)."""
        ...

    def events(self) -> EventHub:
        """The process's one reader of this backend's events (over :meth:`wait_events`):
        everything that needs XIDs subscribes to it instead of waiting itself."""
        ...

    def telemetry(self) -> TelemetryAccess:
        """What the exporter reads this backend's telemetry through."""
        ...

    def probe(self, gpu_uuid: str) -> bool:
        """True when the GPU answers NVML now (used to recover a GPU marked unhealthy)."""
        ...

    def close(self) -> None: ...


# -- MIG operations ---------------------------------------------------------------------------


class MigRefusal(StrEnum):
    """Why a GPU refused a MIG operation, in NVML's terms (``NVML_ERROR_<NAME>``)."""

    IN_USE = "in-use"  # processes, compute instances or GPU instances still hold it
    RESET_REQUIRED = "reset-required"  # the change takes effect only at a GPU reset/reboot
    INSUFFICIENT_RESOURCES = "insufficient-resources"  # overlaps, or no slices/instances left
    NOT_SUPPORTED = "not-supported"  # not MIG capable, MIG off, or a profile it does not offer
    INVALID_ARGUMENT = "invalid-argument"  # a placement the profile cannot start at
    NOT_FOUND = "not-found"  # no such GPU, GPU instance or compute instance
    NO_PERMISSION = "no-permission"  # MIG changes need root (CAP_SYS_ADMIN)
    GPU_LOST = "gpu-lost"  # the GPU stopped answering
    FAILED = "failed"  # anything else NVML reports


class MigOpError(BackendError):
    """A MIG operation the GPU refused; ``refusal`` says why in a form code can act on."""

    def __init__(self, refusal: MigRefusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal


@dataclass(frozen=True)
class MigMode:
    """A GPU's MIG mode: ``current`` is in effect, ``pending`` takes effect at the next reset.

    They differ after a mode change the GPU could not activate at once; ``why`` then says what
    stopped it (NVML's activation status: ``in-use`` or ``reset-required``).
    """

    current: bool
    pending: bool
    why: MigRefusal | None = None

    @property
    def change_pending(self) -> bool:
        return self.current != self.pending


@dataclass(frozen=True)
class GpuInstance:
    """One GPU instance: ``profile`` (``3g.40gb``) at memory slices ``start`` .. ``start+size``.

    ``gi_id`` is NVML's GPU-instance id (it follows from the placement)."""

    gpu: int
    gi_id: int
    profile: str
    start: int
    size: int


@dataclass(frozen=True)
class ComputeInstance:
    """One compute instance of a GPU instance, ``compute_slices`` wide; with its GPU instance
    it is what NVML and the device plugin call a MIG device."""

    gpu: int
    gi_id: int
    ci_id: int
    compute_slices: int


@runtime_checkable
class MigBackend(Protocol):
    """MIG operations on one node's GPUs, addressed by GPU index (NVML's index).

    Every refusal raises :class:`MigOpError`. A mode change the GPU cannot activate now is not
    an error: :meth:`set_mig_mode` returns the mode with ``pending`` set, as NVML does.
    """

    def mig_mode(self, gpu: int) -> MigMode: ...

    def set_mig_mode(self, gpu: int, enabled: bool) -> MigMode: ...

    def gpu_instances(self, gpu: int) -> tuple[GpuInstance, ...]: ...

    def create_gpu_instance(self, gpu: int, profile: str, start: int) -> GpuInstance: ...

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None: ...

    def compute_instances(self, gpu: int, gi_id: int) -> tuple[ComputeInstance, ...]: ...

    def create_compute_instance(self, gpu: int, gi_id: int) -> ComputeInstance:
        """A compute instance spanning the whole GPU instance (what mig-parted creates for a
        ``<n>g.<m>gb`` profile)."""
        ...

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None: ...

    def gpu_processes(self, gpu: int) -> tuple[int, ...]:
        """PIDs of the processes running on the GPU or any of its MIG devices (busy if any)."""
        ...


# -- compute mode ---------------------------------------------------------------------------


class ComputeMode(StrEnum):
    """A GPU's compute mode, in ``nvidia-smi -c`` words (NVML's ``NVML_COMPUTEMODE_<NAME>``).

    ``EXCLUSIVE_PROCESS`` lets one process hold a context on the GPU: with an MPS daemon
    serving, that process is the MPS server, so a client that bypasses MPS (drops
    ``CUDA_MPS_PIPE_DIRECTORY``) is refused instead of escaping its MPS memory limit."""

    DEFAULT = "Default"
    EXCLUSIVE_THREAD = "Exclusive_Thread"  # deprecated by NVIDIA; only ever read
    PROHIBITED = "Prohibited"
    EXCLUSIVE_PROCESS = "Exclusive_Process"


@runtime_checkable
class ComputeModeBackend(Protocol):
    """Reads and sets a GPU's compute mode, by GPU index. Refusals (no permission, a GPU
    lost) raise :class:`BackendError` saying why. The MPS daemons
    (:mod:`kgpu.drivers.mps`) use it, as NVIDIA's daemon setup does."""

    def compute_mode(self, gpu: int) -> ComputeMode: ...

    def set_compute_mode(self, gpu: int, mode: ComputeMode) -> None: ...
