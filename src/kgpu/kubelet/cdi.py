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
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kgpu.kubelet.dirs import ensure_directory

DEFAULT_CDI_ROOT = Path("/var/run/cdi")

#: CDI spec versions a runtime may meet; we write the lowest one that can express the spec.
KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")

#: OCI hook points a CDI hook may name (the CDI library refuses any other).
HOOK_NAMES = (
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
)
_DEVICE_TYPES = ("", "b", "c", "u", "p")
_UINT32_MAX = 2**32 - 1

# Vendor and class start with a letter and end with a letter or digit; device names may also
# start with a digit (CDI 0.5.0) and contain ':'.
_VENDOR_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_CLASS_RE = _VENDOR_RE
_DEVICE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")
_SPEC_KEYS = frozenset({"cdiVersion", "kind", "annotations", "devices", "containerEdits"})
_DEVICE_KEYS = frozenset({"name", "annotations", "containerEdits"})
_EDIT_KEYS = frozenset(
    {"env", "deviceNodes", "mounts", "hooks", "intelRdt", "additionalGids", "netDevices"}
)
_NODE_KEYS = frozenset(
    {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
)
_MOUNT_KEYS = frozenset({"hostPath", "containerPath", "options", "type"})
_HOOK_KEYS = frozenset({"hookName", "path", "args", "env", "timeout"})
_RDT_KEYS = frozenset({"closID", "l3CacheSchema", "memBwSchema", "schemata", "enableMonitoring"})
_NET_KEYS = frozenset({"hostInterfaceName", "name"})


@dataclass(frozen=True)
class DeviceNode:
    """A device node to create in the container; ``host_path`` where it differs on the host
    (a driver container's ``/run/nvidia/driver/dev/...``)."""

    path: str
    host_path: str | None = None
    permissions: str | None = None
    type: str | None = None
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    uid: int | None = None
    gid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.host_path and self.host_path != self.path:
            out["hostPath"] = self.host_path
        for key, value in (
            ("type", self.type),
            ("major", self.major),
            ("minor", self.minor),
            ("fileMode", self.file_mode),
            ("permissions", self.permissions),
            ("uid", self.uid),
            ("gid", self.gid),
        ):
            if value is not None and value != "":
                out[key] = value
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DeviceNode:
        return cls(
            path=str(raw["path"]),
            host_path=raw.get("hostPath"),
            permissions=raw.get("permissions"),
            type=raw.get("type"),
            major=raw.get("major"),
            minor=raw.get("minor"),
            file_mode=raw.get("fileMode"),
            uid=raw.get("uid"),
            gid=raw.get("gid"),
        )


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.options:
            out["options"] = list(self.options)
        if self.type:
            out["type"] = self.type
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Mount:
        return cls(
            host_path=str(raw["hostPath"]),
            container_path=str(raw["containerPath"]),
            options=tuple(str(o) for o in raw.get("options") or ()),
            type=raw.get("type"),
        )


@dataclass(frozen=True)
class Hook:
    """An OCI hook the runtime runs (``hook_name`` is the OCI hook point, e.g.
    ``createContainer``); ``args`` start with argv[0], as execv takes them."""

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hookName": self.hook_name, "path": self.path}
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = list(self.env)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Hook:
        return cls(
            hook_name=str(raw["hookName"]),
            path=str(raw["path"]),
            args=tuple(str(a) for a in raw.get("args") or ()),
            env=tuple(str(e) for e in raw.get("env") or ()),
            timeout=raw.get("timeout"),
        )


@dataclass(frozen=True)
class ContainerEdits:
    """What a runtime changes in a container: env (``KEY=value``), device nodes, mounts, hooks
    and additional group ids."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()
    additional_gids: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(
            self.env or self.device_nodes or self.mounts or self.hooks or self.additional_gids
        )

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        return ContainerEdits(
            env=self.env + other.env,
            device_nodes=self.device_nodes + other.device_nodes,
            mounts=self.mounts + other.mounts,
            hooks=self.hooks + other.hooks,
            additional_gids=self.additional_gids + other.additional_gids,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [node.to_dict() for node in self.device_nodes]
        if self.hooks:
            out["hooks"] = [hook.to_dict() for hook in self.hooks]
        if self.mounts:
            out["mounts"] = [mount.to_dict() for mount in self.mounts]
        if self.additional_gids:
            out["additionalGids"] = list(self.additional_gids)
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "containerEdits") -> ContainerEdits:
        """Edits read from a spec (another vendor tool's); ValueError naming the field when they
        are malformed or use what kgpu does not carry (``intelRdt``, ``netDevices``)."""
        problems = _edit_problems(raw, where)
        unsupported = [k for k in ("intelRdt", "netDevices") if k in raw]
        if unsupported:
            problems.append(f"{where}.{unsupported[0]}: not carried over by kgpu")
        if problems:
            raise ValueError(problems[0])
        return cls(
            env=tuple(str(e) for e in raw.get("env") or ()),
            device_nodes=tuple(DeviceNode.from_dict(n) for n in raw.get("deviceNodes") or ()),
            mounts=tuple(Mount.from_dict(m) for m in raw.get("mounts") or ()),
            hooks=tuple(Hook.from_dict(h) for h in raw.get("hooks") or ()),
            additional_gids=tuple(int(g) for g in raw.get("additionalGids") or ()),
        )


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


def spec_name(kind: str) -> str:
    """The CDI library's name for a vendor's one spec of a class: ``<vendor>-<class>``
    (``k8s.device-plugin.nvidia.com-gpu``)."""
    vendor, cls = kind.split("/", 1)
    return f"{vendor}-{cls}"


def spec_path(cdi_root: Path, kind: str, transient_id: str) -> Path:
    return cdi_root / f"{transient_spec_name(kind, transient_id)}.yaml"


def _all_edits(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    devices = spec.get("devices")
    if not isinstance(devices, list):
        devices = []
    edits = [spec.get("containerEdits")] + [
        d.get("containerEdits") for d in devices if isinstance(d, Mapping)
    ]
    return [e for e in edits if isinstance(e, Mapping)]


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The lowest CDI version that can express ``spec`` (what runtimes are most likely to read),
    by the spec's version table: mount ``type`` 0.4.0; device names starting with a digit and
    device-node ``hostPath`` 0.5.0; annotations and dots in the class 0.6.0; ``intelRdt`` and
    ``additionalGids`` 0.7.0; ``netDevices`` and ``intelRdt.schemata``/``enableMonitoring``
    1.1.0."""
    devices = [d for d in spec.get("devices") or [] if isinstance(d, Mapping)]
    edits = _all_edits(spec)

    def nodes() -> Iterable[Mapping[str, Any]]:
        return (n for e in edits for n in e.get("deviceNodes") or [] if isinstance(n, Mapping))

    rdts = [e["intelRdt"] for e in edits if isinstance(e.get("intelRdt"), Mapping)]
    if any(e.get("netDevices") for e in edits) or any(
        r.get("schemata") is not None or r.get("enableMonitoring") for r in rdts
    ):
        return "1.1.0"
    if rdts or any(e.get("additionalGids") for e in edits):
        return "0.7.0"
    kind = str(spec.get("kind", ""))
    if (
        spec.get("annotations")
        or any(d.get("annotations") for d in devices)
        or "." in kind.partition("/")[2]
    ):
        return "0.6.0"
    if any(str(d.get("name", ""))[:1].isdigit() for d in devices) or any(
        n.get("hostPath") for n in nodes()
    ):
        return "0.5.0"
    if any(isinstance(m, Mapping) and m.get("type") for e in edits for m in e.get("mounts") or []):
        return "0.4.0"
    return "0.3.0"


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


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def validate_spec(spec: Any) -> list[str]:
    """Problems that would make a runtime reject the spec (empty when it is well formed).

    The checks are the CDI specification's (field names and types, unknown fields refused,
    ``cdiVersion`` at least what the fields used need) and the CDI library's validation
    (name syntax, non-empty device edits, env ``KEY=value``, device types and permissions,
    OCI hook names)."""
    if not isinstance(spec, Mapping):
        return ["spec: must be a mapping"]
    problems = [f"{key}: unknown field" for key in spec if key not in _SPEC_KEYS]
    raw_version = spec.get("cdiVersion")
    version = raw_version[1:] if isinstance(raw_version, str) and raw_version[:1] == "v" else None
    version = version or raw_version
    if version not in KNOWN_VERSIONS:
        problems.append(f"cdiVersion: {raw_version!r} is not one of {', '.join(KNOWN_VERSIONS)}")
    else:
        needed = minimum_version(spec)
        if _version_key(str(version)) < _version_key(needed):
            problems.append(
                f"cdiVersion: {version} is lower than {needed}, which the fields used need"
            )
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind.count("/") != 1:
        problems.append(f"kind: {kind!r} must be <vendor>/<class>")
    else:
        vendor, cls = kind.split("/")
        if not _VENDOR_RE.match(vendor) or not _CLASS_RE.match(cls):
            problems.append(f"kind: {kind!r} has an invalid vendor or class")
    problems += _annotation_problems(spec.get("annotations"), "annotations")
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        problems.append("devices: at least one device is required")
        devices = []
    seen: set[str] = set()
    for i, device in enumerate(devices):
        where = f"devices[{i}]"
        if not isinstance(device, Mapping):
            problems.append(f"{where}: must be a mapping")
            continue
        problems += [f"{where}.{key}: unknown field" for key in device if key not in _DEVICE_KEYS]
        name = device.get("name")
        if not isinstance(name, str) or not _DEVICE_RE.match(name):
            problems.append(f"{where}.name: {name!r} is not a valid device name")
        elif name in seen:
            problems.append(f"{where}.name: {name!r} is duplicated")
        else:
            seen.add(name)
        problems += _annotation_problems(device.get("annotations"), f"{where}.annotations")
        edits = device.get("containerEdits")
        if not isinstance(edits, Mapping) or not any(edits.get(k) for k in _EDIT_KEYS):
            problems.append(f"{where}.containerEdits: a device needs at least one edit")
            continue
        problems += _edit_problems(edits, f"{where}.containerEdits")
    if "containerEdits" in spec:
        problems += _edit_problems(spec["containerEdits"], "containerEdits")
    return problems


def _annotation_problems(annotations: Any, where: str) -> list[str]:
    if annotations is None:
        return []
    if not isinstance(annotations, Mapping) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in annotations.items()
    ):
        return [f"{where}: must map strings to strings"]
    return []


def _is_int(value: Any, low: int | None = None, high: int | None = None) -> bool:
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    return (low is None or value >= low) and (high is None or value <= high)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _env_problems(env: Any, where: str) -> list[str]:
    if env is None:
        return []
    if not isinstance(env, list):
        return [f"{where}: must be a list of KEY=value strings"]
    return [
        f"{where}[{j}]: {item!r} must be KEY=value"
        for j, item in enumerate(env)
        if not isinstance(item, str) or item.find("=") <= 0
    ]


def _list_of_mappings(value: Any, where: str) -> tuple[list[Mapping[str, Any]], list[str]]:
    if value is None:
        return [], []
    if not isinstance(value, list):
        return [], [f"{where}: must be a list"]
    problems = [
        f"{where}[{j}]: must be a mapping"
        for j, v in enumerate(value)
        if not isinstance(v, Mapping)
    ]
    return [v for v in value if isinstance(v, Mapping)], problems


def _edit_problems(edits: Any, where: str) -> list[str]:
    if not isinstance(edits, Mapping):
        return [f"{where}: must be a mapping"]
    problems = [f"{where}.{key}: unknown field" for key in edits if key not in _EDIT_KEYS]
    problems += _env_problems(edits.get("env"), f"{where}.env")
    nodes, bad = _list_of_mappings(edits.get("deviceNodes"), f"{where}.deviceNodes")
    problems += bad
    for j, node in enumerate(nodes):
        at = f"{where}.deviceNodes[{j}]"
        problems += [f"{at}.{key}: unknown field" for key in node if key not in _NODE_KEYS]
        path = node.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            problems.append(f"{at}.path: must be an absolute path")
        host = node.get("hostPath")
        if host is not None and (not isinstance(host, str) or not host.startswith("/")):
            problems.append(f"{at}.hostPath: must be an absolute path")
        if node.get("type", "") not in _DEVICE_TYPES:
            problems.append(f"{at}.type: {node.get('type')!r} is not one of b, c, u, p")
        perms = node.get("permissions")
        if perms is not None and (
            not isinstance(perms, str) or (perms != "none" and perms.strip("rwm") != "")
        ):
            problems.append(f"{at}.permissions: {perms!r} must use r, w, m (or be 'none')")
        for key in ("major", "minor", "fileMode"):
            if key in node and not _is_int(node[key]):
                problems.append(f"{at}.{key}: must be an integer")
        for key in ("uid", "gid"):
            if key in node and not _is_int(node[key], 0, _UINT32_MAX):
                problems.append(f"{at}.{key}: must be an unsigned 32-bit integer")
    mounts, bad = _list_of_mappings(edits.get("mounts"), f"{where}.mounts")
    problems += bad
    for j, mount in enumerate(mounts):
        at = f"{where}.mounts[{j}]"
        problems += [f"{at}.{key}: unknown field" for key in mount if key not in _MOUNT_KEYS]
        if not isinstance(mount.get("hostPath"), str) or not mount.get("hostPath"):
            problems.append(f"{at}.hostPath: required")
        container = mount.get("containerPath")
        if not isinstance(container, str) or not container.startswith("/"):
            problems.append(f"{at}.containerPath: must be an absolute path")
        if "options" in mount and not _strings(mount["options"]):
            problems.append(f"{at}.options: must be a list of strings")
        if "type" in mount and not isinstance(mount["type"], str):
            problems.append(f"{at}.type: must be a string")
    hooks, bad = _list_of_mappings(edits.get("hooks"), f"{where}.hooks")
    problems += bad
    for j, hook in enumerate(hooks):
        at = f"{where}.hooks[{j}]"
        problems += [f"{at}.{key}: unknown field" for key in hook if key not in _HOOK_KEYS]
        if hook.get("hookName") not in HOOK_NAMES:
            problems.append(
                f"{at}.hookName: {hook.get('hookName')!r} is not one of {', '.join(HOOK_NAMES)}"
            )
        path = hook.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            problems.append(f"{at}.path: must be an absolute path")
        if "args" in hook and not _strings(hook["args"]):
            problems.append(f"{at}.args: must be a list of strings")
        problems += _env_problems(hook.get("env"), f"{at}.env")
        if "timeout" in hook and not _is_int(hook["timeout"], 1, _UINT32_MAX):
            problems.append(f"{at}.timeout: must be a positive integer (seconds)")
    gids = edits.get("additionalGids")
    if gids is not None and (
        not isinstance(gids, list) or not all(_is_int(g, 0, _UINT32_MAX) for g in gids)
    ):
        problems.append(f"{where}.additionalGids: must be a list of unsigned 32-bit integers")
    rdt = edits.get("intelRdt")
    if rdt is not None:
        if not isinstance(rdt, Mapping):
            problems.append(f"{where}.intelRdt: must be a mapping")
        else:
            problems += [
                f"{where}.intelRdt.{key}: unknown field" for key in rdt if key not in _RDT_KEYS
            ]
    nets, bad = _list_of_mappings(edits.get("netDevices"), f"{where}.netDevices")
    problems += bad
    for j, net in enumerate(nets):
        at = f"{where}.netDevices[{j}]"
        problems += [f"{at}.{key}: unknown field" for key in net if key not in _NET_KEYS]
        for key in ("hostInterfaceName", "name"):
            if not isinstance(net.get(key), str) or not net.get(key):
                problems.append(f"{at}.{key}: required")
    return problems


_SPEC_ORDER = ("cdiVersion", "kind", "annotations", "devices", "containerEdits")
_DEVICE_ORDER = ("name", "annotations", "containerEdits")


def _ordered(obj: Mapping[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    out = {key: obj[key] for key in order if key in obj}
    out.update((key, value) for key, value in obj.items() if key not in out)
    return out


def dump_spec(spec: Mapping[str, Any], fmt: str = "yaml") -> str:
    """YAML (or JSON) in the spec's conventional key order, so the same spec always gives the
    same bytes (a spec restored from the checkpoint is identical to the one first written)."""
    body = _ordered(spec, _SPEC_ORDER)
    body["devices"] = [_ordered(d, _DEVICE_ORDER) for d in body.get("devices") or []]
    if fmt == "json":
        return json.dumps(body, indent=2) + "\n"
    return yaml.safe_dump(body, sort_keys=False, default_flow_style=False)


def write_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    """Write ``text`` so that readers see either the old file or the whole new one.

    tmp file in the same directory (a unique name, so concurrent writers cannot tear each
    other's file) -> fsync -> rename -> fsync the directory (so the rename itself survives a
    power cut). ``mode`` widens the temporary file's 0600 for readers running as other users.
    Missing directories are made 0750 whatever the umask (the runtime reading them is root).
    """
    ensure_directory(path.parent)
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
    write_atomic(path, dump_spec(spec, "json" if path.suffix == ".json" else "yaml"))


def read_spec(path: Path) -> dict[str, Any]:
    """The spec in a YAML or JSON file ({} when it holds no mapping); ValueError naming the file
    when it is not YAML."""
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a YAML or JSON file: {exc}") from None
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
