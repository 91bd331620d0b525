"""What one DRA driver contributes to the shared kubelet-plugin framework.

The framework (:mod:`kgpu.kubelet.dra.plugin`, :mod:`kgpu.kubelet.dra.server`) owns everything
that is the same for every driver: the kubelet's gRPC APIs, registration, reading claims from
the API server, CDI spec files, the crash-safe checkpoint and restart reconciliation. A driver
supplies only a :class:`DriverHandler`: given a claim's allocation results for that driver, say
which CDI devices (and container edits) they become, and undo any side effects later. That is
how one ``kgpu agent`` serves ``gpu.nvidia.com`` and ``compute-domain.nvidia.com`` at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kgpu.errors import KgpuError
from kgpu.kubelet.cdi import ContainerEdits

Obj = dict[str, Any]


class ClaimError(KgpuError):
    """Preparing one claim failed for a reason the user can act on; the message goes back to
    the kubelet in that claim's ``error`` field (other claims of the call are unaffected)."""


@dataclass(frozen=True)
class ClaimRef:
    """A claim as the kubelet names it in NodePrepareResources / NodeUnprepareResources."""

    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class OpaqueConfig:
    """One ``status.allocation.devices.config[]`` entry whose ``opaque.driver`` is this driver.

    ``requests`` empty means every request of the claim. ``path`` locates ``parameters`` in the
    claim (``status.allocation.devices.config[1].opaque.parameters``) for error messages.
    Configs arrive in precedence order: ``FromClass`` before ``FromClaim``, later wins.
    """

    source: str  # "FromClass" | "FromClaim"
    requests: tuple[str, ...]
    parameters: Any
    path: str

    def applies_to(self, request: str) -> bool:
        """True for a result of ``request`` (``"gpu"`` or subrequest ``"gpu/large"``)."""
        if not self.requests:
            return True
        return request in self.requests or request.split("/", 1)[0] in self.requests


@dataclass(frozen=True)
class ClaimInfo:
    """What a handler is asked to prepare: one claim's results for its driver.

    ``results`` are ``status.allocation.devices.results[]`` entries with ``driver`` equal to the
    handler's (``request``, ``driver``, ``pool``, ``device``, maybe ``adminAccess``);
    ``claim`` is the whole ResourceClaim for anything else a handler needs.
    """

    uid: str
    namespace: str
    name: str
    results: tuple[Mapping[str, Any], ...]
    configs: tuple[OpaqueConfig, ...] = ()
    claim: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PreparedDevice:
    """One allocated device after preparation.

    ``cdi_name`` is the device's name inside the claim's CDI spec (unique within the claim,
    e.g. ``<claimUID>-gpu-0``); the framework qualifies it with the handler's ``cdi_kind`` to
    get the CDI device id the kubelet passes to the runtime. ``cdi_name=""`` means the device
    needs nothing injected (no CDI id is returned for it).
    """

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_name: str
    edits: ContainerEdits = field(default_factory=ContainerEdits)


@dataclass(frozen=True)
class PreparedClaim:
    """A handler's answer for one claim.

    ``common_edits`` become the spec-level ``containerEdits`` of the claim's CDI spec (applied
    once whenever any of its devices is injected). ``state`` is JSON-serialisable and recorded
    in the checkpoint; it comes back to :meth:`DriverHandler.unprepare` and
    :meth:`DriverHandler.restore`, so a handler needs no persistence of its own.
    """

    devices: tuple[PreparedDevice, ...]
    common_edits: ContainerEdits = field(default_factory=ContainerEdits)
    state: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class DriverHandler(Protocol):
    """A DRA driver's node-side logic.

    ``driver`` is the DRA driver name (``gpu.nvidia.com``); ``cdi_kind`` the CDI kind of its
    per-claim spec files (``k8s.gpu.nvidia.com/claim``), which must be owned by this driver
    alone: the framework deletes spec files of that kind that no prepared claim accounts for.

    ``prepare`` may raise :class:`ClaimError` or :class:`kgpu.errors.FieldError` to fail the
    claim with a message; it may be called again for a claim it already prepared when an agent
    crashed mid-way (after ``unprepare(uid, None)``), so its side effects must be keyed by
    claim uid. ``unprepare`` must be idempotent and cope with ``state=None`` (a preparation
    that never completed). ``restore`` is called once at startup with the state of every
    completed claim, so in-memory bookkeeping (IMEX channel numbers in use) survives restarts.
    ``resource_slices`` returns the driver's ResourceSlices for the node (``[]`` when the
    driver publishes none); the component publishes them.
    """

    driver: str
    cdi_kind: str

    def prepare(self, claim: ClaimInfo) -> PreparedClaim: ...

    def unprepare(self, claim_uid: str, state: Mapping[str, Any] | None) -> None: ...

    def restore(self, states: Mapping[str, Mapping[str, Any]]) -> None: ...

    def resource_slices(self, node_name: str) -> list[Obj]: ...
