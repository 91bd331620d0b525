"""Device ids as the device plugin advertises them: a shared device's replicas are
``<id>::<n>`` (n from 0), the scheme NVIDIA's device plugin uses for time-slicing and MPS.

Built and taken apart only here, so every reader (allocation, metrics attribution, the
simulator's tables) agrees on what a replica id is.
"""

from __future__ import annotations

REPLICA_SEPARATOR = "::"


def replica_id(device_id: str, replica: int | str) -> str:
    """``GPU-x``, 3 -> ``GPU-x::3``."""
    return f"{device_id}{REPLICA_SEPARATOR}{replica}"


def split_replica(device_id: str) -> tuple[str, str | None]:
    """``GPU-x::3`` -> (``GPU-x``, ``"3"``); an id that is no replica -> (id, None)."""
    base, sep, replica = device_id.partition(REPLICA_SEPARATOR)
    return (base, replica) if sep else (base, None)


def strip_replica(device_id: str) -> str:
    """``GPU-x::3`` -> ``GPU-x``: the id of the device behind a shared replica."""
    return split_replica(device_id)[0]


def is_replica(device_id: str) -> bool:
    return REPLICA_SEPARATOR in device_id


__all__ = ["REPLICA_SEPARATOR", "is_replica", "replica_id", "split_replica", "strip_replica"]
