"""Fault injection into a simulated agent running as its own process.

``kgpu agent --fault-dir DIR`` (simulated backends only) watches DIR for ``*.json`` files, applies
each to the simulated backend in file-name order and renames it to ``<name>.done``. A file holds
one fault or a list of them::

    {"xid": 79, "gpu": 0}                         # unattributed XID on GPU index 0
    {"xid": 94, "gpu": "MIG-..."}                 # attributed to a MIG device the node serves
    {"xid": 94, "gpu": "GPU-...", "gi_id": 2, "ci_id": 0}   # the same, by GPU instance
    {"nvml_failure": true, "gpu": 1}              # GPU 1 stops answering NVML (false: back)

A file that cannot be applied (bad JSON, an unknown GPU, a field of the wrong type) is replaced
by ``<name>.error`` holding the reason (``001.json: [0].gpu: no GPU with index 99 on ...``) and
listed in the agent's status file; the next files are applied as usual. The faults of a list
before the bad one stay applied: each is an event that already happened. A file that cannot
even be moved aside (a read-only directory) is reported once and skipped until it changes.

Write the file under another name and rename it into place so the agent never reads half of it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kgpu.errors import join_path
from kgpu.hardware.model import Machine

log = logging.getLogger(__name__)

#: How many recent bad fault files the status file lists.
KEPT_ERRORS = 20


class FaultError(ValueError):
    """One fault that cannot be applied; ``path`` locates it in its file."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)


def _int(fault: dict[str, Any], key: str, at: str, *, optional: bool = False) -> int | None:
    value = fault.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**31:
        raise FaultError(join_path(at, key), f"must be a whole number >= 0, got {value!r}")
    return value


def apply_fault(backend: Any, fault: Any, at: str = "", machine: Machine | None = None) -> None:
    """Apply one fault; FaultError naming the field when it cannot be. ``machine`` (the served
    view's, MIG layout applied) resolves MIG UUIDs that the backend's snapshot may not have."""
    if not isinstance(fault, dict):
        raise FaultError(at, f"a fault is a mapping, got {type(fault).__name__}")
    gpu = fault.get("gpu")
    if isinstance(gpu, bool) or not isinstance(gpu, int | str):
        raise FaultError(join_path(at, "gpu"), "must be a GPU index or a GPU or MIG UUID")
    gi_id = _int(fault, "gi_id", at, optional=True)
    ci_id = _int(fault, "ci_id", at, optional=True)
    if isinstance(gpu, str) and gpu.startswith("MIG-") and machine is not None:
        for parent in machine.gpus:
            for mig in parent.mig_devices:
                if mig.uuid == gpu:
                    gpu, gi_id, ci_id = parent.uuid, mig.gi_id, mig.ci_id
    try:
        if "xid" in fault:
            xid = _int(fault, "xid", at)
            backend.inject_xid(gpu, xid, gi_id=gi_id, ci_id=ci_id)
        elif "nvml_failure" in fault:
            failing = fault["nvml_failure"]
            if not isinstance(failing, bool):
                raise FaultError(join_path(at, "nvml_failure"), "must be true or false")
            backend.set_nvml_failure(gpu, failing)
        else:
            raise FaultError(at, "a fault needs 'xid' or 'nvml_failure'")
    except FaultError:
        raise
    except Exception as exc:  # the backend's own refusal (no such GPU): that fault's problem
        raise FaultError(join_path(at, "gpu"), str(exc)) from None


class FaultDir:
    """The fault directory of one agent, polled by its watch loop."""

    def __init__(
        self,
        directory: Path,
        backend: Any,
        machine: Callable[[], Machine | None] = lambda: None,
    ) -> None:
        self.directory = directory
        self.backend = backend
        self.machine = machine
        self.errors: dict[str, str] = {}  # file name -> reason, the latest KEPT_ERRORS
        self._stuck: dict[str, tuple[int, int]] = {}  # name -> (mtime_ns, size), not moved

    def poll(self) -> int:
        """Apply every pending fault file; how many faults were applied."""
        if not self.directory.is_dir():
            return 0
        applied = 0
        for path in sorted(self.directory.glob("*.json")):
            try:
                st = path.stat()
            except OSError:
                continue  # gone meanwhile
            if self._stuck.get(path.name) == (st.st_mtime_ns, st.st_size):
                continue
            self._stuck.pop(path.name, None)
            try:
                applied += self._apply_file(path)
                outcome = path.with_name(path.name + ".done")
                path.rename(outcome)
            except Exception as exc:  # that file's problem: reported, the next goes on
                self._report(path, st, exc)
        return applied

    def _apply_file(self, path: Path) -> int:
        try:
            data = json.loads(path.read_bytes())
        except UnicodeDecodeError as exc:
            raise FaultError("", f"not UTF-8 text: {exc.reason}") from None
        except json.JSONDecodeError as exc:
            raise FaultError("", f"not JSON: {exc}") from None
        faults = data if isinstance(data, list) else [data]
        machine = self.machine()
        for i, fault in enumerate(faults):
            apply_fault(self.backend, fault, f"[{i}]" if isinstance(data, list) else "", machine)
            log.warning("injected fault %s", fault)
        return len(faults)

    def _report(self, path: Path, st: Any, exc: Exception) -> None:
        reason = f"{path.name}: {exc}"
        log.error("fault file %s", reason)
        self.errors[path.name] = str(exc)
        while len(self.errors) > KEPT_ERRORS:
            del self.errors[next(iter(self.errors))]
        try:
            path.with_name(path.name + ".error").write_text(reason + "\n")
            path.unlink(missing_ok=True)
        except OSError as move:
            log.error(
                "fault file %s: cannot be moved aside (%s): skipped until it changes", path, move
            )
            self._stuck[path.name] = (st.st_mtime_ns, st.st_size)


def process_fault_dir(directory: Path, backend: Any) -> int:
    """Apply every pending fault file once (a :class:`FaultDir` without memory)."""
    return FaultDir(directory, backend).poll()
