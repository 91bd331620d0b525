"""Container Device Interface (CDI) spec files, as a container runtime reads them.

A DRA driver hands the kubelet CDI device ids (``k8s.gpu.nvidia.com/claim=<uid>-gpu-0``); the
runtime (containerd, CRI-O) resolves them against the spec files in the CDI directory
(``/var/run/cdi``) and applies their container edits. So a spec file must exist, complete, for
as long as the claim is prepared and never be seen half-written: every write goes to a
temporary file in the same directory, is fsynced, then renamed over the final name.

The shapes follow the CDI specification (``cdiVersion``, ``kind`` = ``vendor/class``,
``devices[].name`` + ``containerEdits``, spec-level ``containerEdits``); transient per-claim
spec names follow the CDI library's convention ``<vendor>-<class>_<id>``, which is how
upstream's DRA driver names ``k8s.gpu.nvidia.com-claim_<claimUID>.yaml``.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_CDI_ROOT = Path("/var/run/cdi")

#: CDI spec versions a runtime may meet; we write the lowest one that can express the spec.
KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0")

_VENDOR_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
_CLASS_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?$")
_DEVICE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_EDIT_KEYS = frozenset(
    {"env", "deviceNodes", "mounts", "hooks", "intelRdt", "additionalGids", "netDevices"}
)


@dataclass(frozen=True)
class DeviceNode:
    path: str
    host_path: str | None = None
    permissions: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.host_path and self.host_path != self.path:
            out["hostPath"] = self.host_path
        if self.permissions:
            out["permissions"] = self.permissions
        return out


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.options:
            out["options"] = list(self.options)
        return out


@dataclass(frozen=True)
class ContainerEdits:
    """What a runtime changes in a container: env (``KEY=value``), device nodes, mounts."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.env or self.device_nodes or self.mounts)

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        return ContainerEdits(
            env=self.env + other.env,
            device_nodes=self.device_nodes + other.device_nodes,
            mounts=self.mounts + other.mounts,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [node.to_dict() for node in self.device_nodes]
        if self.mounts:
            out["mounts"] = [mount.to_dict() for mount in self.mounts]
        return out


@dataclass(frozen=True)
class CdiDevice:
    """One named device of a spec; ``annotations`` need CDI 0.6.0."""

    name: str
    edits: ContainerEdits
    annotations: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        out["containerEdits"] = self.edits.to_dict()
        return out


def qualified_name(kind: str, device: str) -> str:
    """``k8s.gpu.nvidia.com/claim`` + ``uid-gpu-0`` -> ``k8s.gpu.nvidia.com/claim=uid-gpu-0``."""
    return f"{kind}={device}"


def transient_spec_name(kind: str, transient_id: str) -> str:
    """The CDI library's name for a transient spec: ``<vendor>-<class>_<id>``."""
    vendor, cls = kind.split("/", 1)
    return f"{vendor}-{cls}_{transient_id.replace('/', '_')}"


def spec_path(cdi_root: Path, kind: str, transient_id: str) -> Path:
    return cdi_root / f"{transient_spec_name(kind, transient_id)}.yaml"


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The lowest CDI version that can express ``spec`` (what runtimes are most likely to read).

    Device names starting with a digit and device-node ``hostPath`` arrived in 0.5.0,
    annotations in 0.6.0.
    """
    version = "0.3.0"
    devices = spec.get("devices") or []
    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in devices]
    if any(str(d.get("name", "")).startswith(tuple("0123456789")) for d in devices) or any(
        "hostPath" in node for e in edits for node in e.get("deviceNodes") or []
    ):
        version = "0.5.0"
    if spec.get("annotations") or any(d.get("annotations") for d in devices):
        version = "0.6.0"
    return version


def build_spec(
    kind: str,
    devices: Iterable[CdiDevice],
    common: ContainerEdits | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"cdiVersion": "", "kind": kind}
    if annotations:
        spec["annotations"] = dict(annotations)
    spec["devices"] = [device.to_dict() for device in devices]
    if common:
        spec["containerEdits"] = common.to_dict()
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def validate_spec(spec: Any) -> list[str]:
    """Problems that would make a runtime reject the spec (empty when it is well formed)."""
    if not isinstance(spec, Mapping):
        return ["spec: must be a mapping"]
    problems: list[str] = []
    if spec.get("cdiVersion") not in KNOWN_VERSIONS:
        problems.append(f"cdiVersion: {spec.get('cdiVersion')!r} is not one of {KNOWN_VERSIONS}")
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind.count("/") != 1:
        problems.append(f"kind: {kind!r} must be <vendor>/<class>")
    else:
        vendor, cls = kind.split("/")
        if not _VENDOR_RE.match(vendor) or not _CLASS_RE.match(cls):
            problems.append(f"kind: {kind!r} has an invalid vendor or class")
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        problems.append("devices: at least one device is required")
        devices = []
    seen: set[str] = set()
    for i, device in enumerate(devices):
        name = device.get("name") if isinstance(device, Mapping) else None
        if not isinstance(name, str) or not _DEVICE_RE.match(name):
            problems.append(f"devices[{i}].name: {name!r} is not a valid device name")
        elif name in seen:
            problems.append(f"devices[{i}].name: {name!r} is duplicated")
        else:
            seen.add(name)
        edits = device.get("containerEdits") if isinstance(device, Mapping) else None
        if not isinstance(edits, Mapping):
            problems.append(f"devices[{i}].containerEdits: required")
            continue
        problems += _edit_problems(edits, f"devices[{i}].containerEdits")
    if "containerEdits" in spec:
        problems += _edit_problems(spec["containerEdits"], "containerEdits")
    return problems


def _edit_problems(edits: Any, where: str) -> list[str]:
    if not isinstance(edits, Mapping):
        return [f"{where}: must be a mapping"]
    problems = [f"{where}.{key}: unknown field" for key in edits if key not in _EDIT_KEYS]
    for j, env in enumerate(edits.get("env") or []):
        if not isinstance(env, str) or "=" not in env:
            problems.append(f"{where}.env[{j}]: {env!r} must be KEY=value")
    for j, node in enumerate(edits.get("deviceNodes") or []):
        if not isinstance(node, Mapping) or not str(node.get("path", "")).startswith("/"):
            problems.append(f"{where}.deviceNodes[{j}].path: must be an absolute path")
    for j, mount in enumerate(edits.get("mounts") or []):
        if not isinstance(mount, Mapping) or not mount.get("hostPath"):
            problems.append(f"{where}.mounts[{j}].hostPath: required")
        elif not str(mount.get("containerPath", "")).startswith("/"):
            problems.append(f"{where}.mounts[{j}].containerPath: must be an absolute path")
    return problems


_SPEC_ORDER = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
_DEVICE_ORDER = ("name", "annotations", "containerEdits")


def _ordered(obj: Mapping[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    out = {key: obj[key] for key in order if key in obj}
    out.update((key, value) for key, value in obj.items() if key not in out)
    return out


def dump_spec(spec: Mapping[str, Any]) -> str:
    """YAML in the spec's conventional key order, so the same spec always gives the same bytes
    (a spec restored from the checkpoint is identical to the one first written)."""
    body = _ordered(spec, _SPEC_ORDER)
    body["devices"] = [_ordered(d, _DEVICE_ORDER) for d in body.get("devices") or []]
    return yaml.safe_dump(body, sort_keys=False, default_flow_style=False)


def write_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    """Write ``text`` so that readers see either the old file or the whole new one.

    tmp file in the same directory (a unique name, so concurrent writers cannot tear each
    other's file) -> fsync -> rename -> fsync the directory (so the rename itself survives a
    power cut). ``mode`` widens the temporary file's 0600 for readers running as other users.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_spec(path: Path, spec: Mapping[str, Any]) -> None:
    problems = validate_spec(spec)
    if problems:
        raise ValueError(f"refusing to write an invalid CDI spec {path.name}: {problems[0]}")
    write_atomic(path, dump_spec(spec))


def read_spec(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded if isinstance(loaded, dict) else {}


def remove_spec(path: Path) -> bool:
    """Remove a spec file; True when it existed. Idempotent, and durable once it returns."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True


def transient_specs(cdi_root: Path, kind: str) -> dict[str, Path]:
    """Transient spec files of ``kind`` under ``cdi_root``, by transient id (claim uid)."""
    prefix = transient_spec_name(kind, "")
    found: dict[str, Path] = {}
    if not cdi_root.is_dir():
        return found
    for path in cdi_root.iterdir():
        if path.name.startswith(prefix) and path.suffix in (".yaml", ".json"):
            found[path.stem[len(prefix) :]] = path
    return found


def stale_temporaries(cdi_root: Path, kind: str) -> list[Path]:
    """Temporary files a crash left behind mid-write (never read by runtimes: they start with
    a dot and do not end in .yaml/.json)."""
    prefix = "." + transient_spec_name(kind, "")
    if not cdi_root.is_dir():
        return []
    return [p for p in cdi_root.iterdir() if p.name.startswith(prefix) and p.suffix == ".tmp"]
