"""Who holds which share of a shared GPU: read from allocated ResourceClaims and the slices.

A claim allocated a share of a device (a result with ``shareID``, :mod:`kgpu.dra.shares`) holds
its result's ``consumedCapacity``; the pods in the claim's ``status.reservedFor`` use it. The
simulator's report (per-GPU shares of each node), its metrics and the agent's exporter
(``kgpu_dra_share_*`` series) all read the same two lists, so they cannot disagree: pure
functions of claims and slices, no store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.dra.shares import COMPUTE_SHARES, is_shared
from kgpu.quantity import parse_quantity

DeviceKey = tuple[str, str, str]  # (driver, pool, device)


@dataclass(frozen=True)
class ClaimShare:
    """One allocated share: the claim's result on a shared device, and its consumers."""

    driver: str
    pool: str
    device: str
    namespace: str
    claim: str
    share_id: str
    #: the result's ``consumedCapacity`` as the allocator wrote it (quantity strings)
    consumed: Mapping[str, str]
    pods: tuple[str, ...] = ()  # names of the pods in ``reservedFor``

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, self.device)

    @property
    def memory_bytes(self) -> int | None:
        value = self.consumed.get("memory")
        return int(parse_quantity(str(value))) if value is not None else None

    @property
    def compute_shares(self) -> int | None:
        value = self.consumed.get(COMPUTE_SHARES)
        return int(parse_quantity(str(value))) if value is not None else None


@dataclass(frozen=True)
class SharedDevice:
    """A device published for sharing: where it is and what it has."""

    driver: str
    pool: str
    device: str
    node: str
    uuid: str  # the GPU's UUID attribute ("" when the driver published none)
    capacity: Mapping[str, str]  # capacity name -> value (quantity strings)


def claim_shares(claims: Iterable[Mapping[str, Any]], driver: str = "") -> list[ClaimShare]:
    """Every share held by an allocated claim (of ``driver`` only, when given), in claim order;
    results without ``shareID`` (exclusive devices) are not shares."""
    out: list[ClaimShare] = []
    for claim in claims:
        status = claim.get("status") or {}
        allocation = status.get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        if not results:
            continue
        meta = claim.get("metadata") or {}
        pods = tuple(
            str(r.get("name"))
            for r in status.get("reservedFor") or []
            if r.get("resource", "pods") == "pods" and r.get("name")
        )
        for result in results:
            share_id = result.get("shareID")
            if not share_id or (driver and result.get("driver") != driver):
                continue
            consumed = result.get("consumedCapacity") or {}
            out.append(
                ClaimShare(
                    driver=str(result.get("driver", "")),
                    pool=str(result.get("pool", "")),
                    device=str(result.get("device", "")),
                    namespace=str(meta.get("namespace") or "default"),
                    claim=str(meta.get("name", "")),
                    share_id=str(share_id),
                    consumed={str(k): str(v) for k, v in consumed.items()},
                    pods=pods,
                )
            )
    return out


def shared_devices(slices: Iterable[Mapping[str, Any]]) -> dict[DeviceKey, SharedDevice]:
    """Every device the slices publish with ``allowMultipleAllocations``."""
    out: dict[DeviceKey, SharedDevice] = {}
    for slice_ in slices:
        spec = slice_.get("spec") or {}
        driver = str(spec.get("driver", ""))
        pool = str((spec.get("pool") or {}).get("name", ""))
        node = str(spec.get("nodeName") or "")
        for device in spec.get("devices") or []:
            if not is_shared(device):
                continue
            name = str(device.get("name", ""))
            uuid = ((device.get("attributes") or {}).get("uuid") or {}).get("string")
            out[(driver, pool, name)] = SharedDevice(
                driver=driver,
                pool=pool,
                device=name,
                node=node,
                uuid=str(uuid or ""),
                capacity={
                    str(k): str((v or {}).get("value", ""))
                    for k, v in (device.get("capacity") or {}).items()
                },
            )
    return out
