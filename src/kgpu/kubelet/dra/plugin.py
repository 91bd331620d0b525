"""NodePrepareResources / NodeUnprepareResources for one driver, crash-safe, without gRPC.

The gRPC servicers (:mod:`kgpu.kubelet.dra.server`) and the simulator's in-process kubelet
plugin both call :class:`DraPlugin`, so the simulator exercises exactly the code the agent runs.

Order of effects for one claim (each arrow is a durable step; ``crash_hook`` names them so
tests can stop the plugin between any two)::

    prepare:    checkpoint PrepareStarted -> handler.prepare -> CDI spec written
                -> checkpoint PrepareCompleted -> success returned
    unprepare:  checkpoint UnprepareStarted -> CDI spec removed -> handler.unprepare
                -> record dropped -> success returned

:meth:`DraPlugin.reconcile` runs at every start: a ``PrepareStarted`` claim is rolled back (the
kubelet never saw success and will call again), an ``UnprepareStarted`` claim is finished, a
``PrepareCompleted`` claim gets its CDI spec rewritten if it went missing, and a spec file of
the driver's kind that no record accounts for is deleted. Hence after any crash and restart the
spec files on disk are exactly those of completed claims, and the kubelet's retries converge.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgpu.dra.api import RESOURCE_API
from kgpu.errors import FieldError
from kgpu.kubelet import cdi
from kgpu.kubelet.checkpoint import Checkpoint, ClaimRecord, ClaimState, PreparedDeviceRecord
from kgpu.kubelet.dra.handler import (
    ClaimError,
    ClaimInfo,
    ClaimRef,
    DriverHandler,
    OpaqueConfig,
    PreparedClaim,
)
from kgpu.kubelet.sockets import ensure_directory
from kgpu.store import ObjectStore, StoreError

log = logging.getLogger(__name__)


#: Points at which ``crash_hook`` is called, in the order they happen.
CRASH_POINTS = (
    "prepare-started",
    "handler-prepared",
    "cdi-written",
    "prepare-completed",
    "unprepare-started",
    "cdi-removed",
    "handler-unprepared",
    "record-dropped",
)


@dataclass(frozen=True)
class PrepareResult:
    """One claim's entry in NodePrepareResourcesResponse (``error`` non-empty on failure)."""

    devices: tuple[PreparedDeviceRecord, ...] = ()
    error: str = ""


@dataclass
class ReconcileReport:
    rolled_back: list[str] = field(default_factory=list)
    finished_unprepare: list[str] = field(default_factory=list)
    restored_specs: list[str] = field(default_factory=list)
    removed_orphans: list[str] = field(default_factory=list)


# What the API server lets through, checked again here because these strings become file
# names (CDI specs, MPS directories, checkpoint keys): a UID of letters, digits, '-', '_' and
# '.' (never '.' or '..', never a '/'), a namespace that is a DNS label, a name that is a DNS
# subdomain, device names that are DNS labels and pools that are DNS subdomains joined by '/'.
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"  # lengths are checked beside each use
_DNS_LABEL = re.compile(_LABEL)
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_POOL = re.compile(rf"{_LABEL}(\.{_LABEL})*(/{_LABEL}(\.{_LABEL})*)*")


def claim_ref_problem(ref: ClaimRef) -> str:
    """Why the kubelet's reference to a claim cannot be used ("" when it can)."""
    label = f"claim {ref.namespace!r}/{ref.name!r} (uid {ref.uid!r})"
    if not (ref.namespace and ref.uid and ref.name):
        return f"{label}: a claim reference needs a namespace, a uid and a name"
    if not _UID.fullmatch(ref.uid):
        return f"{label}: uid must be letters, digits, '-', '_' or '.' (at most 128)"
    if len(ref.namespace) > 63 or not _DNS_LABEL.fullmatch(ref.namespace):
        return f"{label}: namespace must be a DNS label (lowercase letters, digits, '-')"
    if len(ref.name) > 253 or not _SUBDOMAIN.fullmatch(ref.name):
        return f"{label}: name must be a DNS subdomain (lowercase letters, digits, '-', '.')"
    return ""


def _check_results(listed: Sequence[Any], label: str, driver: str) -> None:
    """``driver``'s device and pool names usable as file-name parts, no device named twice."""
    seen: dict[tuple[str, str, str], int] = {}
    for i, result in enumerate(listed):
        at = f"{label}: status.allocation.devices.results[{i}]"
        if not isinstance(result, Mapping):
            raise ClaimError(f"{at}: must be a mapping")
        if result.get("driver") != driver:
            continue
        device, pool = result.get("device"), result.get("pool")
        if not isinstance(device, str) or len(device) > 63 or not _DNS_LABEL.fullmatch(device):
            raise ClaimError(f"{at}.device: must be a DNS label, got {device!r}")
        if not isinstance(pool, str) or len(pool) > 253 or not _POOL.fullmatch(pool):
            raise ClaimError(f"{at}.pool: must be DNS subdomains joined by '/', got {pool!r}")
        key = (pool, device, str(result.get("shareID") or ""))
        if key in seen:
            raise ClaimError(
                f"{at}: device {pool}/{device} of {driver} is allocated twice "
                f"(also results[{seen[key]}])"
            )
        seen[key] = i


def claim_info(claim: Mapping[str, Any], driver: str) -> ClaimInfo:
    """The part of a ResourceClaim that belongs to ``driver``; :class:`ClaimError` when it is
    not allocated, or its results name a device that is not a usable name or name one twice."""
    meta = claim.get("metadata") or {}
    label = f"claim {meta.get('namespace')}/{meta.get('name')}"
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"{label} is not allocated")
    devices = allocation.get("devices") or {}
    listed = devices.get("results") or []
    if not isinstance(listed, list):
        raise ClaimError(f"{label}: status.allocation.devices.results must be a list")
    _check_results(listed, label, driver)
    results = tuple(r for r in listed if r.get("driver") == driver)
    configs: list[OpaqueConfig] = []
    for i, entry in enumerate(devices.get("config") or []):
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != driver:
            continue
        configs.append(
            OpaqueConfig(
                source=str(entry.get("source", "FromClaim")),
                requests=tuple(entry.get("requests") or ()),
                parameters=opaque.get("parameters"),
                path=f"status.allocation.devices.config[{i}].opaque.parameters",
            )
        )
    # Class configs are defaults that claim configs override; keep each group's own order.
    configs.sort(key=lambda c: 0 if c.source == "FromClass" else 1)
    return ClaimInfo(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        results=results,
        configs=tuple(configs),
        claim=claim,
    )


class DraPlugin:
    """One driver's prepared-claim state: checkpoint + CDI spec files + handler."""

    def __init__(
        self,
        handler: DriverHandler,
        plugin_dir: Path,
        cdi_root: Path,
        store: ObjectStore | None = None,
        crash_hook: Callable[[str], None] | None = None,
    ) -> None:
        self.handler = handler
        self.driver = handler.driver
        self.plugin_dir = plugin_dir
        self.cdi_root = cdi_root
        self.store = store
        self._crash_hook = crash_hook
        self._lock = threading.RLock()
        ensure_directory(plugin_dir)  # 0750 whatever the umask: it holds the checkpoint
        self.checkpoint = Checkpoint(plugin_dir / "checkpoint.json")
        self.last_reconcile = self.reconcile()

    # -- helpers ---------------------------------------------------------------------------
    def _hook(self, point: str) -> None:
        if self._crash_hook is not None:
            self._crash_hook(point)

    def spec_path(self, uid: str) -> Path:
        return cdi.spec_path(self.cdi_root, self.handler.cdi_kind, uid)

    def prepared(self) -> dict[str, ClaimRecord]:
        """Completed claims by uid."""
        return {
            uid: rec
            for uid, rec in self.checkpoint.records().items()
            if rec.state == ClaimState.PREPARE_COMPLETED
        }

    def _fetch(self, ref: ClaimRef) -> Mapping[str, Any]:
        if self.store is None:
            raise ClaimError("no API server access to read ResourceClaims")
        try:
            claim = self.store.get(RESOURCE_API, "ResourceClaim", ref.name, ref.namespace)
        except StoreError as exc:
            raise ClaimError(f"retrieve claim {ref.namespace}/{ref.name}: {exc}") from exc
        uid = (claim.get("metadata") or {}).get("uid")
        if uid != ref.uid:
            raise ClaimError(
                f"claim {ref.namespace}/{ref.name} has uid {uid}, not {ref.uid}: "
                "it was deleted and recreated"
            )
        return claim

    # -- NodePrepareResources --------------------------------------------------------------
    def prepare(
        self, refs: Sequence[ClaimRef], claims: Mapping[str, Mapping[str, Any]] | None = None
    ) -> dict[str, PrepareResult]:
        """Prepare each claim independently; ``claims`` (by uid) skips the API read, which is
        how the simulator passes the objects it already holds."""
        out: dict[str, PrepareResult] = {}
        with self._lock:
            for ref in refs:
                problem = claim_ref_problem(ref)
                if problem:  # before the uid names any file
                    out[ref.uid] = PrepareResult(error=problem)
                    continue
                try:
                    given = (claims or {}).get(ref.uid)
                    out[ref.uid] = PrepareResult(devices=self._prepare_one(ref, given))
                except (ClaimError, FieldError) as exc:
                    out[ref.uid] = PrepareResult(error=str(exc))
                except Exception as exc:  # a handler bug fails its claim, not the whole call
                    log.exception("preparing claim %s failed", ref.uid)
                    out[ref.uid] = PrepareResult(error=f"internal error: {exc}")
        return out

    def _prepare_one(
        self, ref: ClaimRef, given: Mapping[str, Any] | None
    ) -> tuple[PreparedDeviceRecord, ...]:
        record = self.checkpoint.get(ref.uid)
        if record is not None and record.state == ClaimState.PREPARE_COMPLETED:
            self._ensure_spec(record)
            return record.devices
        if record is not None:  # a half-done attempt of this process: undo it first
            self._undo(record)
        claim = given if given is not None else self._fetch(ref)
        info = claim_info(claim, self.driver)
        if not info.results:
            raise ClaimError(f"claim {ref.namespace}/{ref.name} has no devices of {self.driver}")
        started = ClaimRecord(ref.uid, ref.namespace, ref.name, ClaimState.PREPARE_STARTED)
        self.checkpoint.put(started)
        self._hook("prepare-started")
        try:
            prepared = self.handler.prepare(info)
            self._hook("handler-prepared")
            devices, spec = self._materialise(ref.uid, prepared)
            if spec is not None:
                cdi.write_spec(self.spec_path(ref.uid), spec)
            self._hook("cdi-written")
        except Exception:  # not BaseException: a simulated crash must leave the record behind
            self._undo(started)
            raise
        completed = ClaimRecord(
            ref.uid,
            ref.namespace,
            ref.name,
            ClaimState.PREPARE_COMPLETED,
            devices=devices,
            cdi_spec=spec,
            handler_state=dict(prepared.state),
        )
        self.checkpoint.put(completed)
        self._hook("prepare-completed")
        return devices

    def _materialise(
        self, uid: str, prepared: PreparedClaim
    ) -> tuple[tuple[PreparedDeviceRecord, ...], dict[str, Any] | None]:
        kind = self.handler.cdi_kind
        records = []
        spec_devices = []
        for dev in prepared.devices:
            ids: tuple[str, ...] = ()
            if dev.cdi_name:
                ids = (cdi.qualified_name(kind, dev.cdi_name),)
                spec_devices.append(cdi.CdiDevice(dev.cdi_name, dev.edits))
            records.append(PreparedDeviceRecord(dev.requests, dev.pool, dev.device, ids))
        spec = None
        if spec_devices:
            spec = cdi.build_spec(kind, spec_devices, prepared.common_edits or None)
        return tuple(records), spec

    def _ensure_spec(self, record: ClaimRecord) -> bool:
        """Rewrite a completed claim's spec when it is missing or differs; True if rewritten."""
        if record.cdi_spec is None:
            return False
        path = self.spec_path(record.uid)
        try:
            if path.exists() and cdi.read_spec(path) == record.cdi_spec:
                return False
        except (OSError, ValueError):
            pass
        cdi.write_spec(path, record.cdi_spec)
        return True

    def _undo(self, record: ClaimRecord) -> None:
        """Roll back a claim whose preparation never completed (no success was returned)."""
        cdi.remove_spec(self.spec_path(record.uid))
        self.handler.unprepare(record.uid, None)
        self.checkpoint.drop(record.uid)

    # -- NodeUnprepareResources ------------------------------------------------------------
    def unprepare(self, refs: Sequence[ClaimRef]) -> dict[str, str]:
        """Unprepare each claim; the value is its error ("" on success, also when unknown)."""
        out: dict[str, str] = {}
        with self._lock:
            for ref in refs:
                problem = claim_ref_problem(ref)
                if problem:
                    out[ref.uid] = problem
                    continue
                try:
                    self._unprepare_one(ref.uid)
                    out[ref.uid] = ""
                except Exception as exc:
                    log.exception("unpreparing claim %s failed", ref.uid)
                    out[ref.uid] = f"unprepare claim {ref.namespace}/{ref.name}: {exc}"
        return out

    def _unprepare_one(self, uid: str) -> None:
        record = self.checkpoint.get(uid)
        if record is None:
            cdi.remove_spec(self.spec_path(uid))  # nothing of ours may linger under this uid
            return
        if record.state == ClaimState.PREPARE_STARTED:
            self._undo(record)
            return
        if record.state != ClaimState.UNPREPARE_STARTED:
            record = record.with_state(ClaimState.UNPREPARE_STARTED)
            self.checkpoint.put(record)
        self._hook("unprepare-started")
        cdi.remove_spec(self.spec_path(uid))
        self._hook("cdi-removed")
        self.handler.unprepare(uid, record.handler_state)
        self._hook("handler-unprepared")
        self.checkpoint.drop(uid)
        self._hook("record-dropped")

    # -- restart ---------------------------------------------------------------------------
    def reconcile(self) -> ReconcileReport:
        """Bring disk state back to "spec files == completed claims" after a crash."""
        report = ReconcileReport()
        kind = self.handler.cdi_kind
        with self._lock:
            for tmp in cdi.stale_temporaries(self.cdi_root, kind):
                tmp.unlink(missing_ok=True)
            for uid, record in sorted(self.checkpoint.records().items()):
                if record.state == ClaimState.PREPARE_STARTED:
                    self._undo(record)
                    report.rolled_back.append(uid)
                elif record.state == ClaimState.UNPREPARE_STARTED:
                    self._unprepare_one(uid)
                    report.finished_unprepare.append(uid)
                elif self._ensure_spec(record):
                    report.restored_specs.append(uid)
            records = self.checkpoint.records()
            for uid, path in sorted(cdi.transient_specs(self.cdi_root, kind).items()):
                if uid not in records:
                    cdi.remove_spec(path)
                    report.removed_orphans.append(uid)
            self.handler.restore({uid: rec.handler_state for uid, rec in self.prepared().items()})
        if any(vars(report).values()):
            log.info("%s: reconciled after restart: %s", self.driver, report)
        return report
