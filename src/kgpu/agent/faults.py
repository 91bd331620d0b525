"""Fault injection into a simulated agent running as its own process.

``kgpu agent --fault-dir DIR`` (simulated backends only) watches DIR for ``*.json`` files, applies
each to the simulated backend in file-name order and renames it to ``<name>.done`` (or
``<name>.error`` with the reason inside). A file holds one fault or a list of them::

    {"xid": 79, "gpu": 0}                         # unattributed XID on GPU index 0
    {"xid": 94, "gpu": "GPU-...", "gi_id": 2, "ci_id": 0}   # attributed to a MIG device
    {"nvml_failure": true, "gpu": 1}              # GPU 1 stops answering NVML (false: back)

Write the file under another name and rename it into place so the agent never reads half of it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def apply_fault(backend: Any, fault: dict[str, Any]) -> None:
    gpu = fault.get("gpu")
    if not isinstance(gpu, int | str):
        raise ValueError("'gpu' must be a GPU index or UUID")
    if "xid" in fault:
        backend.inject_xid(
            gpu, int(fault["xid"]), gi_id=fault.get("gi_id"), ci_id=fault.get("ci_id")
        )
    elif "nvml_failure" in fault:
        backend.set_nvml_failure(gpu, bool(fault["nvml_failure"]))
    else:
        raise ValueError("a fault needs 'xid' or 'nvml_failure'")


def process_fault_dir(directory: Path, backend: Any) -> int:
    """Apply every pending fault file; return how many were applied."""
    applied = 0
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text())
            for fault in data if isinstance(data, list) else [data]:
                apply_fault(backend, fault)
                applied += 1
                log.warning("injected fault %s", fault)
            path.rename(path.with_name(path.name + ".done"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            log.error("fault file %s: %s", path, exc)
            path.with_name(path.name + ".error").write_text(str(exc) + "\n")
            path.unlink(missing_ok=True)
    return applied
