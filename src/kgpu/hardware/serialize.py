"""Machine snapshots as JSON, so a real node's hardware can be recorded once and replayed by the
simulated backend (tests, bug reports, ``--machine path/to/snapshot.json``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from kgpu.errors import FieldError, FieldProblem
from kgpu.hardware.model import NVML_SOURCE, FabricInfo, Gpu, Machine, MigDevice, MigEngines, NvLink
from kgpu.userfiles import read_json

FORMAT = "kgpu.machine/v1"
#: The most GPUs one snapshot may list: above any server built (8-16 per node is the norm).
MAX_GPUS = 64
# what malformed JSON makes the converters below raise (a string where a list belongs...)
_BAD_DATA = (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError)


def machine_to_dict(machine: Machine) -> dict[str, Any]:
    """Plain JSON-ready data; tuples become lists."""
    data = dataclasses.asdict(machine)
    return {"format": FORMAT, **data}


def _mig_from_dict(raw: dict[str, Any]) -> MigDevice:
    fields = dict(raw)
    engines = fields.pop("engines", None)
    return MigDevice(**fields, engines=None if engines is None else MigEngines(**engines))


def _gpu_from_dict(raw: dict[str, Any]) -> Gpu:
    fabric = raw.get("fabric")
    numa = raw.get("numa_node")
    return Gpu(
        index=int(raw["index"]),
        uuid=str(raw["uuid"]),
        product_name=str(raw["product_name"]),
        brand=str(raw.get("brand", "")),
        architecture=str(raw.get("architecture", "")),
        compute_capability=(int(raw["compute_capability"][0]), int(raw["compute_capability"][1])),
        memory_mib=int(raw["memory_mib"]),
        pci_bus_id=str(raw.get("pci_bus_id", "")),
        minor=int(raw.get("minor", raw["index"])),
        numa_node=None if numa is None else int(numa),
        nvlinks=tuple(
            NvLink(int(n["peer_index"]), int(n["links"])) for n in raw.get("nvlinks", [])
        ),
        mig_capable=bool(raw.get("mig_capable", False)),
        mig_enabled=bool(raw.get("mig_enabled", False)),
        mig_devices=tuple(_mig_from_dict(m) for m in raw.get("mig_devices", [])),
        fabric=None if fabric is None else FabricInfo(**fabric),
        multiprocessor_count=int(raw.get("multiprocessor_count", 0)),
        power_limit_w=float(raw.get("power_limit_w", 0.0)),
    )


def machine_from_dict(data: dict[str, Any], *, source: str = "") -> Machine:
    """The inverse of :func:`machine_to_dict`; bad data is a :class:`FieldError`."""
    try:
        cuda = data["cuda_driver_version"]
        gpus = []
        listed = data.get("gpus", [])
        if len(listed) > MAX_GPUS:
            raise FieldError(
                FieldProblem(
                    f"{len(listed)} GPUs; a machine has at most {MAX_GPUS} (kgpu's limit)",
                    path="gpus",
                    file=source,
                )
            )
        for i, raw in enumerate(listed):
            if not isinstance(raw, dict):
                raise FieldError(
                    FieldProblem(
                        f"must be an object (one GPU: index, uuid, product_name, ...), not "
                        f"{type(raw).__name__}",
                        path=f"gpus[{i}]",
                        file=source,
                    )
                )
            try:
                gpus.append(_gpu_from_dict(raw))
            except _BAD_DATA as exc:
                raise FieldError(
                    FieldProblem(f"bad GPU entry: {_why(exc)}", path=f"gpus[{i}]", file=source)
                ) from None
        profile = str(data.get("profile", "snapshot"))
        # snapshots recorded before ``source`` existed say where they came from by profile
        origin = data.get("source") or (NVML_SOURCE if profile == NVML_SOURCE else "simulated")
        return Machine(
            profile=profile,
            source=str(origin),
            driver_version=str(data["driver_version"]),
            cuda_driver_version=(int(cuda[0]), int(cuda[1])),
            gpus=tuple(gpus),
            hostname=str(data.get("hostname", "")),
            extra=dict(data.get("extra", {})),
        )
    except _BAD_DATA as exc:
        raise FieldError(
            FieldProblem(f"not a kgpu machine snapshot: missing or bad {_why(exc)}", file=source)
        ) from None


def _why(exc: Exception) -> str:
    """What a converter's exception says about the data, in the data's terms."""
    if isinstance(exc, KeyError):
        return f"{exc.args[0]!r:.80}"
    if isinstance(exc, OverflowError):
        return "number (out of range)"
    return str(exc)[:200]


def dump_snapshot(machine: Machine, path: str | Path) -> None:
    Path(path).write_text(json.dumps(machine_to_dict(machine), indent=2) + "\n", encoding="utf-8")


def load_snapshot(path: str | Path) -> Machine:
    """Read a snapshot written by :func:`dump_snapshot` (or ``kgpu`` on a real node)."""
    source = str(path)
    data = read_json(path)  # a regular file, bounded, UTF-8, JSON within the limits
    if not isinstance(data, dict):
        raise FieldError(
            FieldProblem("not a kgpu machine snapshot (expected an object)", file=source)
        )
    return machine_from_dict(data, source=source)
