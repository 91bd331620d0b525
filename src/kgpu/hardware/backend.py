"""The edge between kgpu and a node's GPUs.

Two implementations exist: :mod:`kgpu.hardware.nvml` (real hardware through ``nvidia-ml-py``) and
:mod:`kgpu.hardware.simulated` (machine profiles, with fault injection). Everything above this
layer sees only the :class:`Backend` protocol and the frozen snapshot types of
:mod:`kgpu.hardware.model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from kgpu.hardware.model import Machine


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


class Backend(Protocol):
    """Read-only access to a node's GPUs."""

    def snapshot(self) -> Machine:
        """Discover every GPU now and return the frozen snapshot."""
        ...

    def wait_events(self, timeout_s: float) -> list[XidEvent]:
        """Block up to ``timeout_s`` for critical events; return those that arrived (maybe none)."""
        ...

    def probe(self, gpu_uuid: str) -> bool:
        """True when the GPU answers NVML now (used to recover a GPU marked unhealthy)."""
        ...

    def close(self) -> None: ...
