"""The NVIDIA device-plugin config file, ``version: v1``, loaded exactly as upstream accepts it.

Field names, defaults and validation rules follow ``api/config/v1`` of NVIDIA/k8s-device-plugin:
``replicas`` must be >= 2, ``devices`` is ``all``, a positive count or a list of GPU indices,
MIG indices (``"<gpu>:<mig>"``) and UUIDs, resource names get the ``nvidia.com/`` prefix when it
is missing and must fit in 63 characters, and an absent ``version`` means ``v1``. This module is
the file format only: what a sharing mode refuses (MPS with ``migStrategy: mixed``, say) is the
mode's rule (:mod:`kgpu.node.sharing`), checked by the node view and ``kgpu validate``; checks that
need the hardware (the MPS client limit per compute capability, which GPUs a selection names)
live in the node view.
"""

from __future__ import annotations

import posixpath
import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from kgpu.config.fields import StrictModel, is_dns_subdomain, problems_from, unknown_warnings
from kgpu.config.goduration import decode_duration
from kgpu.errors import FieldError, FieldProblem, join_path

VERSION = "v1"
RESOURCE_PREFIX = "nvidia.com"
SHARED_SUFFIX = ".shared"
MAX_RESOURCE_NAME = 63
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
MIG_STRATEGIES = ("none", "single", "mixed")
DEFAULT_MPS_ROOT = "/run/nvidia/mps"
DEFAULT_CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
#: Replicas per GPU (time-slicing, MPS): far above what GPU memory allows (MPS: 48 clients)
MAX_REPLICAS = 1024
#: Who may offer a GPU (``gpuOwnership``): both kubelet APIs, first come first served, or one.
GPU_OWNERSHIP_MODES = ("shared", "devicePlugin", "dra")

_MIG_RESOURCE = re.compile(r"^mig-(\d+c\.)?\d+g\.\d+gb(\.[a-z]+)*$")


def normalize_resource_name(raw: str) -> str:
    """Upstream's ``NewResourceName``: add the ``nvidia.com/`` prefix, then check the result."""
    name = raw if raw.startswith(RESOURCE_PREFIX + "/") else f"{RESOURCE_PREFIX}/{raw}"
    if len(name) > MAX_RESOURCE_NAME:
        raise ValueError(
            f"fully-qualified resource name must be {MAX_RESOURCE_NAME} characters or less: {name}"
        )
    short = name.split("/", 1)[1]
    if not is_dns_subdomain(short):
        raise ValueError(
            f"incorrect format for resource name {name!r}: the part after 'nvidia.com/' must be "
            "a DNS subdomain (lowercase letters, digits, '-' and '.')"
        )
    return name


def default_shared_rename(name: str) -> str:
    return name + SHARED_SUFFIX


def is_known_resource(name: str) -> bool:
    """True for the names the device plugin can advertise: nvidia.com/gpu, nvidia.com/mig-*."""
    short = name.split("/", 1)[1] if "/" in name else name
    return short == "gpu" or bool(_MIG_RESOURCE.fullmatch(short))


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def is_gpu_uuid(ref: str) -> bool:
    return ref.startswith("GPU-") and _is_uuid(ref[4:])


def is_mig_uuid(ref: str) -> bool:
    if not ref.startswith("MIG-"):
        return False
    rest = ref[4:]
    if _is_uuid(rest):
        return True
    parts = rest.split("/")
    return len(parts) == 3 and is_gpu_uuid(parts[0]) and all(p.isdigit() for p in parts[1:])


def is_gpu_index(ref: str) -> bool:
    return ref.isdigit()


def is_mig_index(ref: str) -> bool:
    parts = ref.split(":")
    return len(parts) == 2 and all(p.isdigit() for p in parts)


@dataclass(frozen=True)
class DeviceSelection:
    """``devices:`` of a shared resource: all of them, the first ``count``, or named ones."""

    all: bool = True
    count: int | None = None
    refs: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.all:
            return "all"
        if self.count is not None:
            return f"first {self.count}"
        return "[" + ", ".join(self.refs) + "]"


def parse_devices(value: Any) -> DeviceSelection:
    if isinstance(value, DeviceSelection):
        return value
    if isinstance(value, str):
        if value != "all":
            raise ValueError(
                f"devices set as {value!r} but the only valid string input is 'all' "
                "(allowed: 'all', a count > 0, or a list of GPU indices, MIG indices "
                "'<gpu>:<mig>' and GPU/MIG UUIDs)"
            )
        return DeviceSelection()
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(f"devices set as {value} but a count of devices must be > 0")
        return DeviceSelection(all=False, count=value)
    if isinstance(value, list):
        refs: list[str] = []
        for i, item in enumerate(value):
            if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
                refs.append(str(item))
                continue
            if isinstance(item, str) and (
                is_gpu_index(item) or is_mig_index(item) or is_gpu_uuid(item) or is_mig_uuid(item)
            ):
                refs.append(item)
                continue
            raise ValueError(
                f"devices[{i}]: unsupported device {item!r} (allowed: a GPU index, a MIG index "
                "'<gpu>:<mig>', a GPU UUID 'GPU-...' or a MIG UUID 'MIG-...')"
            )
        return DeviceSelection(all=False, refs=tuple(refs))
    raise ValueError(
        f"unrecognized type for devices spec: {value!r} (allowed: 'all', a count > 0, or a list)"
    )


class ReplicatedResource(StrictModel):
    """One entry of ``sharing.timeSlicing.resources`` / ``sharing.mps.resources``."""

    name: str
    rename: str | None = None
    devices: DeviceSelection = Field(default_factory=DeviceSelection)
    replicas: int

    @field_validator("name", "rename", mode="after")
    @classmethod
    def _resource_name(cls, value: str | None) -> str | None:
        return None if value is None else normalize_resource_name(value)

    @field_validator("devices", mode="before")
    @classmethod
    def _devices(cls, value: Any) -> DeviceSelection:
        return parse_devices(value)

    @field_validator("replicas", mode="after")
    @classmethod
    def _replicas(cls, value: int) -> int:
        if value < 2:
            raise ValueError("must be >= 2")
        if value > MAX_REPLICAS:
            raise ValueError(
                f"must be <= {MAX_REPLICAS} (kgpu's limit per GPU: every replica is a device the "
                "kubelet tracks, and each client's CUDA context takes GPU memory)"
            )
        return value


class ReplicatedResources(StrictModel):
    """``sharing.timeSlicing`` or ``sharing.mps``."""

    rename_by_default: bool = Field(False, alias="renameByDefault")
    fail_requests_greater_than_one: bool | None = Field(None, alias="failRequestsGreaterThanOne")
    resources: list[ReplicatedResource] | None = None

    @field_validator("resources", mode="after")
    @classmethod
    def _non_empty(cls, value: list[ReplicatedResource] | None) -> list[ReplicatedResource]:
        if not value:
            raise ValueError("no resources specified (at least one entry with name and replicas)")
        return value

    @model_validator(mode="after")
    def _required(self) -> ReplicatedResources:
        if self.resources is None:
            raise ValueError("no resources specified (resources: is required)")
        return self

    def entries(self) -> list[ReplicatedResource]:
        return list(self.resources or [])

    def advertised_name(self, entry: ReplicatedResource) -> str:
        """The resource name shared devices appear under (``rename``, else ``.shared``)."""
        if entry.rename:
            return entry.rename
        if self.rename_by_default:
            return default_shared_rename(entry.name)
        return entry.name


class Sharing(StrictModel):
    """``sharing:``: one section per sharing mode, keyed as upstream's file has them. What each
    section means lives with its mode (:mod:`kgpu.node.sharing`)."""

    time_slicing: ReplicatedResources | None = Field(None, alias="timeSlicing")
    mps: ReplicatedResources | None = None

    def group(self, key: str) -> ReplicatedResources | None:
        """The section under ``key`` as the file spells it (``timeSlicing``, ``mps``)."""
        for name, info in type(self).model_fields.items():
            if (info.alias or name) == key:
                value = getattr(self, name)
                return value if isinstance(value, ReplicatedResources) else None
        return None

    def groups(self) -> list[tuple[str, ReplicatedResources]]:
        """Every section that is set, as ``(key, section)`` in the file's field order."""
        out = []
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if isinstance(value, ReplicatedResources):
                out.append((info.alias or name, value))
        return out


class PatternResource(StrictModel):
    pattern: str
    name: str

    @field_validator("name", mode="after")
    @classmethod
    def _resource_name(cls, value: str) -> str:
        return normalize_resource_name(value)


class Resources(StrictModel):
    gpus: list[PatternResource] | None = None
    mig: list[PatternResource] | None = None


def host_root(value: str | None) -> str | None:
    """A host directory (or binary) kgpu derives paths from (``mpsRoot``, ``nvidiaDriverRoot``,
    ``nvidiaDevRoot``, ``plugin.containerDriverRoot``, ``plugin.nvidiaCTKPath``, and the
    environment variables that set them): absolute (relative to what? the agent's working
    directory is not the host's root), without ``..``, normalised (``/run/nvidia/mps/`` is
    ``/run/nvidia/mps``), so no config can point the agent outside the tree it names."""
    if value is None:
        return None
    if "\x00" in value:
        raise ValueError("must not contain a NUL byte")
    if not value.startswith("/"):
        raise ValueError(f"{value[:80]!r} is not an absolute path (it must start with /)")
    if ".." in value.split("/"):
        raise ValueError(f"{value[:80]!r} must not contain '..'")
    if len(value.encode()) > 4095:
        raise ValueError("is longer than a path may be (4095 bytes)")
    return "/" + posixpath.normpath(value).lstrip("/")


class PluginFlags(StrictModel):
    pass_device_specs: bool | None = Field(None, alias="passDeviceSpecs")
    device_list_strategy: str | list[str] | None = Field(None, alias="deviceListStrategy")
    device_id_strategy: Literal["uuid", "index"] | None = Field(None, alias="deviceIDStrategy")
    cdi_annotation_prefix: str | None = Field(None, alias="cdiAnnotationPrefix")
    nvidia_ctk_path: str | None = Field(None, alias="nvidiaCTKPath")
    container_driver_root: str | None = Field(None, alias="containerDriverRoot")
    shared_devices_allocation_policy: Literal["distributed", "packed"] | None = Field(
        None, alias="sharedDevicesAllocationPolicy"
    )

    @field_validator("device_list_strategy", mode="after")
    @classmethod
    def _strategies(cls, value: str | list[str] | None) -> str | list[str] | None:
        if value is None:
            return None
        items = [value] if isinstance(value, str) else value
        for item in items:
            if item not in DEVICE_LIST_STRATEGIES:
                raise ValueError(
                    f"invalid strategy {item!r}: allowed {', '.join(DEVICE_LIST_STRATEGIES)}"
                )
        return value

    @field_validator("nvidia_ctk_path", "container_driver_root", mode="after")
    @classmethod
    def _paths(cls, value: str | None) -> str | None:
        return host_root(value)


class GfdFlags(StrictModel):
    oneshot: bool | None = None
    no_timestamp: bool | None = Field(None, alias="noTimestamp")
    # nanoseconds, as upstream decodes it: a number, a Go duration string, or "infinite"
    sleep_interval: int | None = Field(None, alias="sleepInterval")
    output_file: str | None = Field(None, alias="outputFile")
    machine_type_file: str | None = Field(None, alias="machineTypeFile")

    @field_validator("sleep_interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> int | None:
        return None if value is None else decode_duration(value)


class Flags(StrictModel):
    mig_strategy: Literal["none", "single", "mixed"] | None = Field(None, alias="migStrategy")
    fail_on_init_error: bool | None = Field(None, alias="failOnInitError")
    nvidia_driver_root: str | None = Field(None, alias="nvidiaDriverRoot")
    nvidia_dev_root: str | None = Field(None, alias="nvidiaDevRoot")
    mps_root: str | None = Field(None, alias="mpsRoot")
    gdrcopy_enabled: bool | None = Field(None, alias="gdrcopyEnabled")
    gds_enabled: bool | None = Field(None, alias="gdsEnabled")
    mofed_enabled: bool | None = Field(None, alias="mofedEnabled")
    use_node_feature_api: bool | None = Field(None, alias="useNodeFeatureAPI")
    device_discovery_strategy: Literal["auto", "nvml", "tegra"] | None = Field(
        None, alias="deviceDiscoveryStrategy"
    )
    plugin: PluginFlags | None = None
    gfd: GfdFlags | None = None

    @field_validator("mps_root", "nvidia_driver_root", "nvidia_dev_root", mode="after")
    @classmethod
    def _roots(cls, value: str | None) -> str | None:
        return host_root(value)


class Imex(StrictModel):
    channel_ids: list[int] | None = Field(None, alias="channelIDs")
    required: bool | None = None

    @field_validator("channel_ids", mode="after")
    @classmethod
    def _channels(cls, value: list[int] | None) -> list[int] | None:
        """Upstream's plugin injects only the default channel: ``[]`` or ``[0]``."""
        if value and value != [0]:
            found = "[" + " ".join(str(i) for i in value) + "]"
            raise ValueError(
                f"invalid IMEX config: channelIDs must be [] or [0]; found {found} (the device "
                "plugin injects only IMEX channel 0; other channels come from ComputeDomains)"
            )
        return value


def _ownership_mode(value: Any) -> Any:
    if isinstance(value, str) and value not in GPU_OWNERSHIP_MODES:
        raise ValueError(
            f"unknown mode {value!r} (allowed: {', '.join(GPU_OWNERSHIP_MODES)})"
        )
    return value


class OwnershipRule(StrictModel):
    """One entry of ``gpuOwnership.gpus``: the GPUs ``devices`` selects (as the sharing
    config's ``devices``: ``all``, a count, or GPU indices and UUIDs) go to ``owner``."""

    devices: DeviceSelection
    owner: Literal["shared", "devicePlugin", "dra"]

    @field_validator("devices", mode="before")
    @classmethod
    def _devices(cls, value: Any) -> DeviceSelection:
        selection = parse_devices(value)
        for i, ref in enumerate(selection.refs):
            if is_mig_index(ref) or is_mig_uuid(ref):
                raise ValueError(
                    f"devices[{i}]: {ref!r} is a MIG device; ownership is per physical GPU "
                    "(a MIG device belongs to its GPU's owner): name the GPU's index or UUID"
                )
        return selection

    @field_validator("owner", mode="before")
    @classmethod
    def _owner(cls, value: Any) -> Any:
        return _ownership_mode(value)


class GpuOwnership(StrictModel):
    """``gpuOwnership`` (kgpu's own section): which kubelet API offers each GPU of the node.

    ``default`` applies to every GPU no ``gpus`` entry selects; the first entry that selects a
    GPU decides it. ``shared`` lets both the device plugin and the DRA driver offer a GPU,
    first come first served; ``devicePlugin`` and ``dra`` offer it through that API only. The
    plain form ``gpuOwnership: dra`` is ``{default: dra}``. Whatever the policy, a GPU held by
    one API is never offered by the other (:mod:`kgpu.node.ownership`)."""

    default: Literal["shared", "devicePlugin", "dra"] = "shared"
    gpus: list[OwnershipRule] = Field(default_factory=list)

    @field_validator("default", mode="before")
    @classmethod
    def _default(cls, value: Any) -> Any:
        return _ownership_mode(value)


class DevicePluginConfig(StrictModel):
    """A whole device-plugin config (one file, or one entry of a ConfigMap)."""

    version: str = VERSION
    flags: Flags = Field(default_factory=Flags)
    resources: Resources | None = None
    sharing: Sharing = Field(default_factory=Sharing)
    imex: Imex | None = None
    gpu_ownership: GpuOwnership = Field(default_factory=GpuOwnership, alias="gpuOwnership")

    @field_validator("gpu_ownership", mode="before")
    @classmethod
    def _ownership_shorthand(cls, value: Any) -> Any:
        """``gpuOwnership: dra`` means ``gpuOwnership: {default: dra}``."""
        if isinstance(value, str):
            return {"default": _ownership_mode(value)}
        return value

    @field_validator("version", mode="after")
    @classmethod
    def _version(cls, value: str) -> str:
        if value == "":
            return VERSION
        if value != VERSION:
            raise ValueError(f"unknown version: {value} (allowed: {VERSION})")
        return value

    # -- derived settings, with upstream's defaults ------------------------------------------

    @property
    def mig_strategy(self) -> str:
        return self.flags.mig_strategy or "none"

    @property
    def device_list_strategy(self) -> tuple[str, ...]:
        raw = self.flags.plugin.device_list_strategy if self.flags.plugin else None
        if raw is None:
            return ("envvar",)
        return (raw,) if isinstance(raw, str) else tuple(raw)

    @property
    def device_id_strategy(self) -> str:
        plugin = self.flags.plugin
        return (plugin.device_id_strategy if plugin else None) or "uuid"

    @property
    def shared_devices_allocation_policy(self) -> str:
        """How replicas of shared GPUs are picked: spread (``distributed``, upstream's default)
        or packed onto as few GPUs as possible."""
        plugin = self.flags.plugin
        return (plugin.shared_devices_allocation_policy if plugin else None) or "distributed"

    @property
    def cdi_annotation_prefix(self) -> str:
        plugin = self.flags.plugin
        return (plugin.cdi_annotation_prefix if plugin else None) or DEFAULT_CDI_ANNOTATION_PREFIX

    @property
    def allocate_envs(self) -> tuple[tuple[str, str], ...]:
        """What upstream's Allocate sets for the node features the flags turn on."""
        flags = self.flags
        return tuple(
            (name, "enabled")
            for name, on in (
                ("NVIDIA_GDRCOPY", flags.gdrcopy_enabled),
                ("NVIDIA_GDS", flags.gds_enabled),
                ("NVIDIA_MOFED", flags.mofed_enabled),
            )
            if on
        )

    @property
    def mps_root(self) -> str:
        return self.flags.mps_root or DEFAULT_MPS_ROOT

    @property
    def pass_device_specs(self) -> bool:
        """Allocate passes the devices' nodes to the kubelet (``DeviceSpecs``) too."""
        plugin = self.flags.plugin
        return bool(plugin and plugin.pass_device_specs)

    def with_flags(self, overrides: tuple[tuple[str, Any], ...]) -> DevicePluginConfig:
        """This config with ``flags`` fields replaced by ``overrides``: ``(path, value)`` pairs,
        the path as the file spells it under ``flags`` (``migStrategy``,
        ``plugin.deviceListStrategy``). Upstream lays its command-line flags and environment
        variables over the config file this way; the values must be valid already."""
        if not overrides:
            return self
        flags = self.flags
        for path, value in overrides:
            parent, _, leaf = path.rpartition(".")
            if parent == "plugin":
                plugin = flags.plugin or PluginFlags()
                flags = flags.model_copy(update={"plugin": _set(plugin, leaf, value)})
            elif not parent:
                flags = _set(flags, leaf, value)
            else:
                raise KeyError(f"flags.{path} is not a flag kgpu lets an override set")
        return self.model_copy(update={"flags": flags})


DEFAULT_PLUGIN_CONFIG = DevicePluginConfig()


def _set(model: Any, alias: str, value: Any) -> Any:
    """``model`` with the field the file calls ``alias`` set to ``value``."""
    for name, info in type(model).model_fields.items():
        if (info.alias or name) == alias:
            given = list(value) if isinstance(value, tuple) else value
            return model.model_copy(update={name: given})
    raise KeyError(f"{type(model).__name__} has no field {alias!r}")


@dataclass(frozen=True)
class ParsedPluginConfig:
    config: DevicePluginConfig
    warnings: tuple[str, ...]


def parse_plugin_config(data: Any, *, file: str = "", entry: str = "") -> ParsedPluginConfig:
    """Validate one device-plugin config document; FieldError on anything upstream rejects."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FieldError(
            FieldProblem(
                f"a device-plugin config must be a mapping, not {type(data).__name__}",
                file=file,
                entry=entry,
            )
        )
    try:
        config = DevicePluginConfig.model_validate(data)
    except ValidationError as exc:
        raise problems_from(exc, file=file, entry=entry) from None
    warnings = unknown_warnings(config, file=file, entry=entry)
    for key, strategy in config.sharing.groups():
        seen: dict[str, int] = {}
        for i, res in enumerate(strategy.entries()):
            path = join_path("sharing", key, "resources", i)
            if not is_known_resource(res.name):
                warnings.append(
                    str(
                        FieldProblem(
                            f"{res.name} is not a resource the device plugin advertises "
                            "(nvidia.com/gpu or nvidia.com/mig-<profile>); "
                            "this entry never applies",
                            join_path(path, "name"),
                            file,
                            entry,
                        )
                    )
                )
            if res.name in seen and res.devices.all:
                warnings.append(
                    str(
                        FieldProblem(
                            f"{res.name} is already shared by resources[{seen[res.name]}]; "
                            "the first matching entry wins",
                            join_path(path, "name"),
                            file,
                            entry,
                        )
                    )
                )
            seen.setdefault(res.name, i)
    if config.resources is not None and (config.resources.gpus or config.resources.mig):
        warnings.append(
            str(
                FieldProblem(
                    "customizing resources is not supported (upstream ignores it too); "
                    "use sharing.*.resources[].rename to change a resource name",
                    "resources",
                    file,
                    entry,
                )
            )
        )
    return ParsedPluginConfig(config, tuple(warnings))
