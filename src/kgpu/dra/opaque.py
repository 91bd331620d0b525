"""Opaque per-claim device configs of driver ``gpu.nvidia.com``: ``GpuConfig`` and
``MigDeviceConfig`` (``resource.nvidia.com/v1beta1``), as upstream's DRA driver accepts them.

A ResourceClaim (or its DeviceClass) carries these in ``spec.devices.config[].opaque.parameters``;
the scheduler copies them into ``status.allocation.devices.config[]`` and only the driver reads
them. Decoding is strict like upstream's (an unknown field is an error, not ignored), and every
problem is a :class:`~kgpu.errors.FieldError` whose path points into the claim, so the kubelet's
event for the pod names the exact field. Nothing here touches a GPU: :func:`sharing_plan` turns a
valid config into the environment, mounts and settings the kubelet plugin then applies.

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

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING
from typing import Any

from kgpu import quantity
from kgpu.errors import FieldError, FieldProblem

API_VERSION = "resource.nvidia.com/v1beta1"
GPU_CONFIG = "GpuConfig"
MIG_DEVICE_CONFIG = "MigDeviceConfig"

TIME_SLICING = "TimeSlicing"
MPS = "MPS"
FABRIC = "Fabric"
STRATEGIES = (TIME_SLICING, MPS)

#: Upstream's time-slice intervals and the value nvidia-smi's compute-policy takes for each.
INTERVALS = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}

#: Where an MPS client finds the control daemon's pipe inside the container (upstream's path).
MPS_PIPE_IN_CONTAINER = "/tmp/nvidia-mps"


@dataclass(frozen=True)
class TimeSlicingConfig:
    interval: str = "Default"


@dataclass(frozen=True)
class MpsConfig:
    default_active_thread_percentage: int | None = None
    default_pinned_device_memory_limit: int | None = None  # bytes
    default_per_device_pinned_memory_limit: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Sharing:
    strategy: str
    time_slicing: TimeSlicingConfig | None = None
    mps: MpsConfig | None = None


@dataclass(frozen=True)
class GpuConfig:
    sharing: Sharing | None = None
    kind: str = GPU_CONFIG


@dataclass(frozen=True)
class MigDeviceConfig:
    sharing: Sharing | None = None
    kind: str = MIG_DEVICE_CONFIG


DeviceConfig = GpuConfig | MigDeviceConfig


def parse_quantity(value: Any, path: str) -> int:
    """A Kubernetes quantity (``"1Gi"``, ``"500M"``, ``1073741824``) as whole units, rounded up
    like ``resource.Quantity.Value()``. The grammar is :mod:`kgpu.quantity`'s, less floats and
    the sub-unit suffixes ``n`` and ``u``, which these byte counts have never accepted."""
    text = value.strip() if isinstance(value, str) else ""
    if isinstance(value, bool) or not isinstance(value, int | str) or text.endswith(("n", "u")):
        raise FieldError(FieldProblem(f"{value!r} is not a quantity such as '1Gi'", path))
    try:
        amount = quantity.parse_quantity(value)
    except quantity.QuantityError:
        raise FieldError(FieldProblem(f"{value!r} is not a quantity such as '1Gi'", path)) from None
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise FieldError(FieldProblem(f"must be an object, got {type(value).__name__}", path))
    return value


def _unknown(obj: Mapping[str, Any], allowed: Sequence[str], path: str) -> list[FieldProblem]:
    return [
        FieldProblem(f"unknown field; allowed: {', '.join(allowed)}", f"{path}.{key}")
        for key in obj
        if key not in allowed
    ]


def _parse_mps(raw: Any, path: str) -> MpsConfig:
    obj = _mapping(raw, path)
    allowed = (
        "defaultActiveThreadPercentage",
        "defaultPinnedDeviceMemoryLimit",
        "defaultPerDevicePinnedMemoryLimit",
    )
    problems = _unknown(obj, allowed, path)
    if problems:
        raise FieldError(problems)
    percentage = obj.get("defaultActiveThreadPercentage")
    if percentage is not None:
        where = f"{path}.defaultActiveThreadPercentage"
        if isinstance(percentage, bool) or not isinstance(percentage, int):
            raise FieldError(FieldProblem(f"{percentage!r} must be an integer 0..100", where))
        if percentage < 0:
            raise FieldError(FieldProblem("active thread percentage must not be negative", where))
        if percentage > 100:
            raise FieldError(
                FieldProblem("active thread percentage must not be greater than 100", where)
            )
    limit = obj.get("defaultPinnedDeviceMemoryLimit")
    limit_bytes = None
    if limit is not None:
        where = f"{path}.defaultPinnedDeviceMemoryLimit"
        limit_bytes = parse_quantity(limit, where)
        if limit_bytes // 2**20 <= 0:
            raise FieldError(FieldProblem(f"{limit!r} is below 1Mi", where))
    per_device: dict[str, int] = {}
    raw_per_device = obj.get("defaultPerDevicePinnedMemoryLimit")
    if raw_per_device is not None:
        where = f"{path}.defaultPerDevicePinnedMemoryLimit"
        for key, value in _mapping(raw_per_device, where).items():
            amount = parse_quantity(value, f"{where}.{key}")
            if amount // 2**20 <= 0:
                raise FieldError(FieldProblem(f"{value!r} is below 1Mi", f"{where}.{key}"))
            per_device[str(key)] = amount
    return MpsConfig(percentage, limit_bytes, per_device)


def _parse_sharing(raw: Any, path: str, kind: str) -> Sharing:
    obj = _mapping(raw, path)
    allowed = (
        ("strategy", "timeSlicingConfig", "mpsConfig")
        if kind == GPU_CONFIG
        else ("strategy", "mpsConfig")
    )
    problems = _unknown(obj, allowed, path)
    if problems:
        raise FieldError(problems)
    strategy = obj.get("strategy")
    where = f"{path}.strategy"
    if strategy is None:
        raise FieldError(FieldProblem(f"required; one of {', '.join(STRATEGIES)}", where))
    if strategy == FABRIC:
        raise FieldError(FieldProblem("fabric GPU sharing strategy is not enabled", where))
    if strategy not in STRATEGIES:
        raise FieldError(
            FieldProblem(
                f"unknown GPU sharing strategy {strategy!r}; one of {', '.join(STRATEGIES)}",
                where,
            )
        )
    time_slicing = None
    mps = None
    if strategy == TIME_SLICING:
        if obj.get("mpsConfig") is not None:
            raise FieldError(
                FieldProblem(
                    f"cannot be used with the {TIME_SLICING!r} strategy", f"{path}.mpsConfig"
                )
            )
        if kind == GPU_CONFIG:
            raw_ts = obj.get("timeSlicingConfig")
            ts_path = f"{path}.timeSlicingConfig"
            ts = _mapping(raw_ts, ts_path) if raw_ts is not None else {}
            problems = _unknown(ts, ("interval",), ts_path)
            if problems:
                raise FieldError(problems)
            interval = ts.get("interval", "Default")
            if interval not in INTERVALS:
                raise FieldError(
                    FieldProblem(
                        f"unknown time-slice interval {interval!r}; one of {', '.join(INTERVALS)}",
                        f"{ts_path}.interval",
                    )
                )
            time_slicing = TimeSlicingConfig(str(interval))
    else:
        if obj.get("timeSlicingConfig") is not None:
            raise FieldError(
                FieldProblem(
                    f"cannot be used with the {MPS!r} strategy", f"{path}.timeSlicingConfig"
                )
            )
        raw_mps = obj.get("mpsConfig")
        mps = _parse_mps(raw_mps, f"{path}.mpsConfig") if raw_mps is not None else MpsConfig()
    return Sharing(str(strategy), time_slicing, mps)


def parse_config(parameters: Any, path: str = "parameters") -> DeviceConfig:
    """Decode one opaque config strictly; :class:`FieldError` names the offending field."""
    obj = _mapping(parameters, path)
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
    problems = _unknown(obj, ("apiVersion", "kind", "sharing"), path)
    if problems:
        raise FieldError(problems)
    raw = obj.get("sharing")
    sharing = _parse_sharing(raw, f"{path}.sharing", str(kind)) if raw is not None else None
    if kind == GPU_CONFIG:
        return GpuConfig(sharing)
    return MigDeviceConfig(sharing)


def pinned_memory_limits(mps: MpsConfig, uuids: Sequence[str], path: str) -> dict[str, str]:
    """Per-device pinned memory limits as MPS takes them (``"<MiB>M"``), keyed by UUID.

    The default applies to every device; ``defaultPerDevicePinnedMemoryLimit`` keys are a UUID
    of the claim's devices or an index into them, and override the default (upstream's rule).
    """
    limits: dict[str, str] = {}
    if mps.default_pinned_device_memory_limit is not None:
        for uuid in uuids:
            limits[uuid] = f"{mps.default_pinned_device_memory_limit // 2**20}M"
    for key, amount in mps.default_per_device_pinned_memory_limit.items():
        where = f"{path}.defaultPerDevicePinnedMemoryLimit.{key}"
        if key in uuids:
            uuid = key
        elif key.isdigit() and int(key) < len(uuids):
            uuid = uuids[int(key)]
        else:
            raise FieldError(
                FieldProblem(
                    f"invalid device {key!r}: not a UUID of this claim's devices nor an index "
                    f"below {len(uuids)}",
                    where,
                )
            )
        limits[uuid] = f"{amount // 2**20}M"
    return limits


@dataclass(frozen=True)
class SharingPlan:
    """What preparing devices with a config means, as plain data.

    ``env`` goes into the CDI spec; ``mounts`` are (host path, container path) pairs for the
    MPS pipe and shm directories (host paths relative to the MPS root); ``settings`` is what the
    kubelet plugin records (time-slice interval, MPS limits) so ``kgpu`` can report it and a
    restarted agent still knows it.
    """

    env: tuple[str, ...] = ()
    mounts: tuple[tuple[str, str], ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)
    mps_id: str | None = None


def mps_daemon_id(claim_uid: str, uuids: Sequence[str]) -> str:
    """Upstream names an MPS control daemon ``<claimUID>-<first 5 hex of sha256(uuids)>``."""
    digest = hashlib.sha256(",".join(uuids).encode()).hexdigest()
    return f"{claim_uid}-{digest[:5]}"


def sharing_plan(
    config: DeviceConfig, claim_uid: str, uuids: Sequence[str], path: str
) -> SharingPlan:
    """Turn a valid config for devices ``uuids`` into env, mounts and recorded settings."""
    sharing = config.sharing
    if sharing is None:
        return SharingPlan()
    if sharing.strategy == TIME_SLICING:
        interval = sharing.time_slicing.interval if sharing.time_slicing else "Default"
        return SharingPlan(
            settings={
                "strategy": TIME_SLICING,
                "interval": interval,
                "timeslice": INTERVALS[interval],
            }
        )
    mps = sharing.mps or MpsConfig()
    limits = pinned_memory_limits(mps, uuids, f"{path}.sharing.mpsConfig")
    daemon = mps_daemon_id(claim_uid, uuids)
    env = [f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_IN_CONTAINER}"]
    if mps.default_active_thread_percentage is not None:
        env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={mps.default_active_thread_percentage}")
    if limits:
        env.append(
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="
            + ",".join(f"{i}={limits[u]}" for i, u in enumerate(uuids) if u in limits)
        )
    settings: dict[str, Any] = {"strategy": MPS, "controlDaemon": daemon}
    if mps.default_active_thread_percentage is not None:
        settings["activeThreadPercentage"] = mps.default_active_thread_percentage
    if limits:
        settings["pinnedDeviceMemoryLimits"] = limits
    return SharingPlan(
        env=tuple(env),
        mounts=((f"{daemon}/shm", "/dev/shm"), (f"{daemon}/pipe", MPS_PIPE_IN_CONTAINER)),
        settings=settings,
        mps_id=daemon,
    )
