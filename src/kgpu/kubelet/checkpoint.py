"""The DRA plugin's checkpoint: which claims it has prepared, durable across agent restarts.

The kubelet remembers which claims it asked a driver to prepare and calls NodeUnprepareResources
for them later, possibly after the agent restarted; the agent must then still know what it did
(CDI spec, handler state such as an IMEX channel number) to undo it, and a repeated
NodePrepareResources must return the same devices. So every change is written before the RPC
returns, as a whole new file (tmp + fsync + rename) carrying a checksum, in two phases:

    PrepareStarted   -> recorded before any side effect of preparing a claim
    PrepareCompleted -> recorded after the CDI spec is on disk, before success is returned
    UnprepareStarted -> recorded before any side effect of unpreparing
    (record removed) -> after the CDI spec and the handler's side effects are gone

A crash between any two steps leaves a record whose state says what to finish or roll back (see
:meth:`kgpu.kubelet.dra.plugin.DraPlugin.reconcile`). The checksum catches a file that was
damaged outside our control; such a file is an error the operator must see, never silently an
empty checkpoint (that would orphan every prepared claim).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from kgpu.errors import KgpuError
from kgpu.kubelet.cdi import write_atomic

CHECKPOINT_VERSION = "kgpu.dra.checkpoint/v1"


class CheckpointError(KgpuError):
    """The checkpoint file exists but cannot be trusted (bad JSON, checksum, version)."""


class ClaimState(StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    UNPREPARE_STARTED = "UnprepareStarted"


@dataclass(frozen=True)
class PreparedDeviceRecord:
    """One device as returned to the kubelet (NodePrepareResourceResponse.devices[])."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PreparedDeviceRecord:
        return cls(
            request_names=tuple(data.get("request_names", ())),
            pool_name=str(data.get("pool_name", "")),
            device_name=str(data.get("device_name", "")),
            cdi_device_ids=tuple(data.get("cdi_device_ids", ())),
        )


@dataclass(frozen=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    state: ClaimState
    devices: tuple[PreparedDeviceRecord, ...] = ()
    cdi_spec: dict[str, Any] | None = None  # the spec written, so a lost file can be restored
    handler_state: dict[str, Any] = field(default_factory=dict)

    def with_state(self, state: ClaimState) -> ClaimRecord:
        return replace(self, state=state)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = str(self.state)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClaimRecord:
        return cls(
            uid=str(data["uid"]),
            namespace=str(data.get("namespace", "")),
            name=str(data.get("name", "")),
            state=ClaimState(data["state"]),
            devices=tuple(PreparedDeviceRecord.from_dict(d) for d in data.get("devices", ())),
            cdi_spec=data.get("cdi_spec"),
            handler_state=dict(data.get("handler_state") or {}),
        )


def _checksum(claims: dict[str, Any]) -> str:
    canonical = json.dumps(claims, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class Checkpoint:
    """The records of one driver, mirrored in memory and on disk (``path``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._records: dict[str, ClaimRecord] = self._load()
        if path.parent.is_dir():  # a crash between writing and renaming leaves these behind
            for tmp in path.parent.glob(f".{path.name}.*.tmp"):
                tmp.unlink(missing_ok=True)

    def _load(self) -> dict[str, ClaimRecord]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{self.path}: unreadable checkpoint: {exc}") from exc
        if not isinstance(data, dict) or data.get("version") != CHECKPOINT_VERSION:
            raise CheckpointError(
                f"{self.path}: version {data.get('version') if isinstance(data, dict) else None!r}"
                f" is not {CHECKPOINT_VERSION!r}"
            )
        claims = data.get("claims")
        if not isinstance(claims, dict) or data.get("checksum") != _checksum(claims):
            raise CheckpointError(f"{self.path}: checksum mismatch; the file was damaged")
        try:
            return {uid: ClaimRecord.from_dict(rec) for uid, rec in claims.items()}
        except (KeyError, ValueError, TypeError) as exc:
            raise CheckpointError(f"{self.path}: malformed record: {exc}") from exc

    def _save(self) -> None:
        claims = {uid: rec.to_dict() for uid, rec in sorted(self._records.items())}
        body = {"version": CHECKPOINT_VERSION, "checksum": _checksum(claims), "claims": claims}
        write_atomic(self.path, json.dumps(body, indent=1) + "\n")

    def get(self, uid: str) -> ClaimRecord | None:
        return self._records.get(uid)

    def records(self) -> dict[str, ClaimRecord]:
        return dict(self._records)

    def put(self, record: ClaimRecord) -> None:
        """Record (durably, before returning) a claim's new state."""
        self._records[record.uid] = record
        try:
            self._save()
        except BaseException:
            self._records = self._load()
            raise

    def drop(self, uid: str) -> None:
        if uid not in self._records:
            return
        previous = self._records.pop(uid)
        try:
            self._save()
        except BaseException:
            self._records[uid] = previous
            raise
