"""Opaque per-claim device configs of driver ``gpu.nvidia.com``: ``GpuConfig`` and
``MigDeviceConfig`` (``resource.nvidia.com/v1beta1``), as upstream's DRA driver accepts them.

A ResourceClaim (or its DeviceClass) carries these in ``spec.devices.config[].opaque.parameters``;
the scheduler copies them into ``status.allocation.devices.config[]`` and only the driver reads
them. Decoding is strict like upstream's (an unknown field is an error, not ignored), and every
problem is a :class:`~kgpu.errors.FieldError` whose path points into the claim, so the kubelet's
event for the pod names the exact field. Nothing here touches a GPU: :func:`sharing_plan` turns a
valid config into the environment, mounts and settings the kubelet plugin then applies. What each
``strategy`` accepts and means is its sharing mode's (:mod:`kgpu.node.sharing`); this module
decodes the envelope and hands each mode its part.

Field names and allowed values are upstream's::

    apiVersion: resource.nvidia.com/v1beta1
    kind: GpuConfig                 # or MigDeviceConfig (no timeSlicingConfig there)
    sharing:
      strategy: TimeSlicing | MPS
      timeSlicingConfig: {interval: Default | Short | Medium | Long}
      mpsConfig:
        defaultActiveThreadPercentage: 0..100
        defaultPinnedDeviceMemoryLimit: <quantity>
        defaultPerDevicePinnedMemoryLimit: {<device index or UUID>: <quantity>}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kgpu.errors import FieldError, FieldProblem
from kgpu.node.sharing import DRA_MODES, SharingMode, SharingPlan
from kgpu.node.sharing.base import mapping_of, reject_unknown
from kgpu.node.sharing.mps import (
    MPS_PIPE_IN_CONTAINER,
    MpsConfig,
    mps_daemon_id,
    parse_quantity,
    pinned_memory_limits,
)
from kgpu.node.sharing.timeslicing import INTERVALS, TimeSlicingConfig

API_VERSION = "resource.nvidia.com/v1beta1"
GPU_CONFIG = "GpuConfig"
MIG_DEVICE_CONFIG = "MigDeviceConfig"

FABRIC = "Fabric"
STRATEGIES = tuple(DRA_MODES)


@dataclass(frozen=True)
class Sharing:
    """A decoded ``sharing``: the strategy and what its mode decoded beside it."""

    strategy: str
    settings: object = None

    @property
    def mode(self) -> SharingMode:
        return DRA_MODES[self.strategy]

    @property
    def time_slicing(self) -> TimeSlicingConfig | None:
        return self.settings if isinstance(self.settings, TimeSlicingConfig) else None

    @property
    def mps(self) -> MpsConfig | None:
        return self.settings if isinstance(self.settings, MpsConfig) else None


@dataclass(frozen=True)
class GpuConfig:
    sharing: Sharing | None = None
    kind: str = GPU_CONFIG


@dataclass(frozen=True)
class MigDeviceConfig:
    sharing: Sharing | None = None
    kind: str = MIG_DEVICE_CONFIG


DeviceConfig = GpuConfig | MigDeviceConfig


def _parse_sharing(raw: Any, path: str, kind: str) -> Sharing:
    obj = mapping_of(raw, path)
    keys = [m.dra_config_key for m in DRA_MODES.values() if m.dra_config_key]
    allowed = ["strategy"] + [
        m.dra_config_key for m in DRA_MODES.values() if m.dra_config_key and kind in m.dra_kinds
    ]
    reject_unknown(obj, allowed, path)
    strategy = obj.get("strategy")
    where = f"{path}.strategy"
    if strategy is None:
        raise FieldError(FieldProblem(f"required; one of {', '.join(STRATEGIES)}", where))
    if strategy == FABRIC:
        raise FieldError(FieldProblem("fabric GPU sharing strategy is not enabled", where))
    if strategy not in DRA_MODES:
        raise FieldError(
            FieldProblem(
                f"unknown GPU sharing strategy {strategy!r}; one of {', '.join(STRATEGIES)}",
                where,
            )
        )
    mode = DRA_MODES[strategy]
    for key in keys:
        if key != mode.dra_config_key and obj.get(key) is not None:
            raise FieldError(
                FieldProblem(f"cannot be used with the {strategy!r} strategy", f"{path}.{key}")
            )
    return Sharing(str(strategy), mode.parse_dra(obj, path, kind))


def parse_config(parameters: Any, path: str = "parameters") -> DeviceConfig:
    """Decode one opaque config strictly; :class:`FieldError` names the offending field."""
    obj = mapping_of(parameters, path)
    api_version = obj.get("apiVersion")
    if api_version != API_VERSION:
        raise FieldError(
            FieldProblem(f"{api_version!r} is not {API_VERSION!r}", f"{path}.apiVersion")
        )
    kind = obj.get("kind")
    if kind not in (GPU_CONFIG, MIG_DEVICE_CONFIG):
        raise FieldError(
            FieldProblem(
                f"unknown kind {kind!r} for driver gpu.nvidia.com; one of {GPU_CONFIG}, "
                f"{MIG_DEVICE_CONFIG}",
                f"{path}.kind",
            )
        )
    reject_unknown(obj, ("apiVersion", "kind", "sharing"), path)
    raw = obj.get("sharing")
    sharing = _parse_sharing(raw, f"{path}.sharing", str(kind)) if raw is not None else None
    if kind == GPU_CONFIG:
        return GpuConfig(sharing)
    return MigDeviceConfig(sharing)


def sharing_plan(
    config: DeviceConfig, claim_uid: str, uuids: Sequence[str], path: str
) -> SharingPlan:
    """Turn a valid config for devices ``uuids`` into env, mounts and recorded settings."""
    sharing = config.sharing
    if sharing is None:
        return SharingPlan()
    return sharing.mode.dra_plan(sharing.settings, claim_uid, uuids, path)


__all__ = [
    "API_VERSION",
    "FABRIC",
    "GPU_CONFIG",
    "INTERVALS",
    "MIG_DEVICE_CONFIG",
    "MPS_PIPE_IN_CONTAINER",
    "STRATEGIES",
    "DeviceConfig",
    "GpuConfig",
    "MigDeviceConfig",
    "MpsConfig",
    "Sharing",
    "SharingPlan",
    "TimeSlicingConfig",
    "mps_daemon_id",
    "parse_config",
    "parse_quantity",
    "pinned_memory_limits",
    "sharing_plan",
]
