"""The kubelet DRA plugin framework: one agent, several DRA drivers (see docs/dra-kubelet.md).

``handler`` (what a driver implements: :class:`DriverHandler`), ``plugin`` (:class:`DraPlugin`:
prepare/unprepare with checkpoints and CDI specs), ``server`` (the gRPC servers and the
registration socket: :class:`DriverServer`).
"""

from kgpu.kubelet.dra.handler import ClaimError, ClaimRef, DriverHandler, PreparedClaim
from kgpu.kubelet.dra.plugin import DraPlugin
from kgpu.kubelet.dra.server import DriverServer

__all__ = ["ClaimError", "ClaimRef", "DraPlugin", "DriverHandler", "DriverServer", "PreparedClaim"]
