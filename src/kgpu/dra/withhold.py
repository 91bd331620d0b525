"""How the ``gpu.nvidia.com`` driver stops offering a GPU another owner holds.

A GPU the device plugin holds (or that ``gpuOwnership`` gives to it, see
:mod:`kgpu.node.ownership`) must not be allocated to a new claim. Two ways exist, chosen by the
API server's version in :func:`withhold_method`, the one place to point at a release table:

* **omit** (Kubernetes 1.32 to 1.35): republish the pool without the GPU's devices (the GPU,
  its MIG devices, its partitionable placements). Every scheduler honours a device that is not
  there. Device taints exist from 1.33 but only as an alpha (``DRADeviceTaints``, off by
  default): a taint there would be ignored and the claim allocated onto the held GPU.
* **taint** (1.36 on, ``DRADeviceTaints`` beta and on by default): keep the devices and taint
  them ``gpu.nvidia.com/owner=device-plugin:NoSchedule``, so ``kubectl get resourceslices``
  shows why a GPU is not allocatable and the pool's device list stays stable. A claim that
  tolerates the taint can still be allocated there; its preparation then fails, naming the
  holder, as the race does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kgpu import releases
from kgpu.dra.slices import kubernetes_minor

Obj = dict[str, Any]

OMIT = "omit"
TAINT = "taint"
OWNER_TAINT_KEY = "gpu.nvidia.com/owner"
OWNER_TAINT_VALUE = "device-plugin"


def withhold_method(kubernetes_version: str) -> str:
    """``omit`` or ``taint`` for an API server of ``kubernetes_version`` (``v1.35.2``)."""
    try:
        major, minor = kubernetes_minor(kubernetes_version)
    except ValueError:
        return OMIT  # an unknown version: the way every release honours
    if major != 1:
        return OMIT
    # schedulers honour device taints where the release has DRADeviceTaints on by default
    # (kgpu.releases, read from upstream's feature specs); outside the modelled releases, the
    # nearest one decides
    modelled = min(max(minor, releases.MODELLED[0]), releases.MODELLED[-1])
    state = releases.release(modelled).gate("DRADeviceTaints")
    return TAINT if state is not None and state.default else OMIT


def owner_taint() -> Obj:
    return {"key": OWNER_TAINT_KEY, "value": OWNER_TAINT_VALUE, "effect": "NoSchedule"}


def _gpu_of(device: Mapping[str, Any]) -> tuple[str | None, str | None]:
    attrs = device.get("attributes") or {}
    return tuple(  # type: ignore[return-value]
        (attrs.get(name) or {}).get("string") for name in ("uuid", "parentUUID")
    )


def withhold_devices(slices: Sequence[Obj], withheld: Mapping[str, str], method: str) -> list[Obj]:
    """``slices`` with the devices of the ``withheld`` GPUs (UUID -> why) left out or
    tainted; slices keep their number and names, so the pool stays whole."""
    if not withheld:
        return list(slices)
    out = []
    for slice_ in slices:
        spec = slice_.get("spec") or {}
        devices = spec.get("devices")
        if not devices:
            out.append(slice_)
            continue
        kept = []
        for dev in devices:
            uuid, parent = _gpu_of(dev)
            if uuid not in withheld and parent not in withheld:
                kept.append(dev)
            elif method == TAINT:
                kept.append({**dev, "taints": [*(dev.get("taints") or []), owner_taint()]})
        out.append({**slice_, "spec": {**spec, "devices": kept}})
    return out


__all__ = ["OMIT", "OWNER_TAINT_KEY", "TAINT", "owner_taint", "withhold_devices", "withhold_method"]
