"""Reading the files users already have, whatever shape they come in.

One file may be a bare device-plugin config, a ConfigMap whose ``data`` entries are device-plugin
configs (the GPU Operator / Helm chart ``config.map`` form), a mig-parted config (bare, or in the
``config.yaml`` key of a ConfigMap), GPU Operator Helm values (``mig.strategy``,
``migManager.config.data``, ``devicePlugin.config.data``), or a multi-document mix of these.
Everything lands in one :class:`ConfigSet`; which entry a node uses is decided later from its
labels, the way the device plugin's config manager and the MIG manager decide it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgpu.config.fields import load_yaml_documents, load_yaml_mapping, read_problem
from kgpu.config.migparted import MigConfig, builtin_mig_configs, parse_mig_parted
from kgpu.config.plugin import (
    GPU_OWNERSHIP_MODES,
    MIG_STRATEGIES,
    DevicePluginConfig,
    parse_plugin_config,
)
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.userfiles import read_text

PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"

_PLUGIN_KEYS = {"version", "flags", "sharing", "resources", "imex", "gpuOwnership"}
_OPERATOR_KEYS = {
    "migManager",
    "mig",
    "devicePlugin",
    "driver",
    "toolkit",
    "dcgmExporter",
    "dcgm",
    "gfd",
    "nfd",
    "operator",
    "daemonsets",
    "validator",
    "mps",
    "cdi",
    "psp",
    "sandboxWorkloads",
    "vgpuManager",
    "ccManager",
    "nodeStatusExporter",
}
_DRA_KEYS = {"kubeletPlugin", "controller", "gpuResourcesEnabledOverride", "nvidiaDriverRoot"}


@dataclass(frozen=True, eq=False)
class PluginConfigEntry:
    name: str
    config: DevicePluginConfig
    source: str  # the file it came from
    entry: str = ""  # where in the file: a ConfigMap key, a Helm values path, "document 1"


@dataclass(frozen=True, eq=False)
class ConfigSet:
    """Every config kgpu was given. Hashes by identity so node views can be cached per set."""

    plugin_configs: dict[str, PluginConfigEntry] = field(default_factory=dict)
    default_plugin_config: str | None = None
    default_plugin_source: str = ""  # the Helm values file that set default_plugin_config
    mig_configs: dict[str, MigConfig] = field(default_factory=dict)
    default_mig_config: str | None = None
    default_mig_source: str = ""  # the Helm values file that set default_mig_config
    mig_strategy: str | None = None  # from GPU Operator Helm values (overrides config files)
    # the chart's devicePlugin.gpuOwnership: the policy of configs that set no gpuOwnership
    gpu_ownership: str | None = None
    warnings: tuple[str, ...] = ()
    kinds: tuple[tuple[str, str], ...] = ()  # (file, what it was recognised as)

    def all_mig_configs(self) -> dict[str, MigConfig]:
        """User configs first; the GPU Operator's defaults fill in the names they do not use."""
        merged = dict(builtin_mig_configs())
        merged.update(self.mig_configs)
        return merged


EMPTY = ConfigSet()


class _Builder:
    def __init__(self) -> None:
        self.plugin: dict[str, PluginConfigEntry] = {}
        self.default_plugin: str | None = None
        self.default_plugin_source = ""
        self.mig: dict[str, MigConfig] = {}
        self.default_mig: str | None = None
        self.default_mig_source = ""
        self.strategy: str | None = None
        self.gpu_ownership: str | None = None
        self.warnings: list[str] = []
        self.kinds: list[tuple[str, str]] = []

    def add_plugin(self, name: str, data: Any, *, file: str, entry: str) -> None:
        parsed = parse_plugin_config(data, file=file, entry=entry)
        self.warnings.extend(parsed.warnings)
        if name in self.plugin:
            self.warnings.append(
                str(
                    FieldProblem(
                        f"device-plugin config {name!r} also defined in "
                        f"{self.plugin[name].source}; this one wins",
                        file=file,
                        entry=entry,
                    )
                )
            )
        self.plugin[name] = PluginConfigEntry(name, parsed.config, file, entry)

    def add_mig(self, data: Any, *, file: str, entry: str = "") -> None:
        parsed = parse_mig_parted(data, file=file, entry=entry)
        self.warnings.extend(parsed.warnings)
        for name, cfg in parsed.configs.items():
            if name in self.mig:
                self.warnings.append(
                    str(
                        FieldProblem(
                            f"mig config {name!r} also defined in {self.mig[name].source}; "
                            "this one wins",
                            file=file,
                            entry=entry,
                        )
                    )
                )
            self.mig[name] = cfg

    def build(self) -> ConfigSet:
        return ConfigSet(
            plugin_configs=self.plugin,
            default_plugin_config=self.default_plugin,
            default_plugin_source=self.default_plugin_source,
            mig_configs=self.mig,
            default_mig_config=self.default_mig,
            default_mig_source=self.default_mig_source,
            mig_strategy=self.strategy,
            gpu_ownership=self.gpu_ownership,
            warnings=tuple(self.warnings),
            kinds=tuple(self.kinds),
        )


def classify(doc: Any) -> str:
    """What one YAML document is: one of ``plugin-config``, ``mig-parted``, ``configmap``,
    ``operator-values``, ``dra-values``, ``manifest`` or ``unknown``."""
    if not isinstance(doc, dict):
        return "unknown"
    if "apiVersion" in doc and "kind" in doc:
        return "configmap" if doc.get("kind") == "ConfigMap" else "manifest"
    if "mig-configs" in doc:
        return "mig-parted"
    keys = set(doc)
    if keys & {"sharing", "flags", "gpuOwnership"} or (
        keys and keys <= _PLUGIN_KEYS and "version" in keys
    ):
        return "plugin-config"
    if keys & {"migManager", "devicePlugin"} or len(keys & _OPERATOR_KEYS) >= 2:
        return "operator-values"
    if keys & _DRA_KEYS:
        return "dra-values"
    return "unknown"


def other_kgpu_input(doc: Any) -> str:
    """A hint when ``doc`` is a kgpu input of another command (a scenario, an allocate file),
    or not a mapping at all."""
    if isinstance(doc, list):
        return "the document is a YAML list; every format kgpu reads is a mapping (key: value)"
    if not isinstance(doc, dict):
        what = {str: "text", int: "number", float: "number", bool: "true/false"}.get(
            type(doc), type(doc).__name__
        )
        return f"the document is a single {what} value, not a mapping (key: value)"
    keys = set(doc)
    if keys & {"nodes", "apply", "steps"}:
        return "it looks like a kgpu sim scenario (nodes/apply/steps): run it with kgpu sim FILE"
    if "node" in keys and keys & {"classes", "slices", "claims"}:
        return (
            "it looks like a kgpu allocate input (node/classes/slices/claims): kgpu allocate FILE"
        )
    return ""


def _configmap_entry_kind(text: str, *, file: str, entry: str) -> tuple[str, dict[str, Any]]:
    data = load_yaml_mapping(text, file=file, entry=entry)
    if "mig-configs" in data:
        return "mig-parted", data
    return "plugin-config", data


def _add_configmap(builder: _Builder, doc: dict[str, Any], *, file: str, where: str) -> None:
    data = doc.get("data")
    if data is None:
        builder.warnings.append(str(FieldProblem("ConfigMap has no data", "data", file, where)))
        return
    if not isinstance(data, dict):
        raise FieldError(FieldProblem("must be a mapping of names to strings", "data", file, where))
    problems: list[FieldProblem] = []
    for key, text in data.items():
        if not isinstance(text, str):
            problems.append(
                FieldProblem(
                    "must be a string (a YAML document)", join_path("data", str(key)), file, where
                )
            )
            continue
        try:
            kind, parsed = _configmap_entry_kind(text, file=file, entry=str(key))
            if kind == "mig-parted":
                builder.add_mig(parsed, file=file, entry=str(key))
            else:
                builder.add_plugin(str(key), parsed, file=file, entry=str(key))
        except FieldError as exc:  # every bad entry is reported, not just the first
            problems.extend(exc.problems)
    if problems:
        raise FieldError(problems)


def _get(doc: Mapping[str, Any], *path: str) -> Any:
    cur: Any = doc
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _add_operator_values(builder: _Builder, doc: dict[str, Any], *, file: str) -> None:
    """Everything kgpu takes from GPU Operator Helm values; every bad part is reported, not just
    the first."""
    problems: list[FieldProblem] = []
    strategy = _get(doc, "mig", "strategy")
    if strategy is not None:
        if strategy not in MIG_STRATEGIES:
            problems.append(
                FieldProblem(
                    f"unknown MIG strategy {strategy!r}: allowed {', '.join(MIG_STRATEGIES)}",
                    "mig.strategy",
                    file,
                )
            )
        else:
            builder.strategy = str(strategy)
    mig_data = _get(doc, "migManager", "config", "data")
    if isinstance(mig_data, dict):
        for key, text in mig_data.items():
            path = join_path("migManager", "config", "data", str(key))
            if not isinstance(text, str):
                problems.append(FieldProblem("must be a string (a mig-parted config)", path, file))
                continue
            try:
                data = load_yaml_mapping(text, file=file, entry=path)
                builder.add_mig(data, file=file, entry=path)
            except FieldError as exc:
                problems.extend(exc.problems)
    elif mig_data is not None:
        problems.append(
            FieldProblem(
                "must be a mapping of file names to strings", "migManager.config.data", file
            )
        )
    mig_default = _get(doc, "migManager", "config", "default")
    if isinstance(mig_default, str) and mig_default:
        builder.default_mig = mig_default
        builder.default_mig_source = file
    dp_data = _get(doc, "devicePlugin", "config", "data")
    if isinstance(dp_data, dict):
        for key, text in dp_data.items():
            path = join_path("devicePlugin", "config", "data", str(key))
            if not isinstance(text, str):
                problems.append(
                    FieldProblem("must be a string (a device-plugin config)", path, file)
                )
                continue
            try:
                data = load_yaml_mapping(text, file=file, entry=path)
                builder.add_plugin(str(key), data, file=file, entry=path)
            except FieldError as exc:
                problems.extend(exc.problems)
    elif dp_data is not None:
        problems.append(
            FieldProblem(
                "must be a mapping of config names to strings", "devicePlugin.config.data", file
            )
        )
    dp_default = _get(doc, "devicePlugin", "config", "default")
    if isinstance(dp_default, str) and dp_default:
        builder.default_plugin = dp_default
        builder.default_plugin_source = file
    owners = _get(doc, "devicePlugin", "gpuOwnership")
    if owners is not None:  # kgpu's chart value: the node-wide policy
        if owners not in GPU_OWNERSHIP_MODES:
            problems.append(
                FieldProblem(
                    f"unknown mode {owners!r}: allowed {', '.join(GPU_OWNERSHIP_MODES)} (a "
                    "per-GPU split goes in a device-plugin config's gpuOwnership.gpus)",
                    "devicePlugin.gpuOwnership",
                    file,
                )
            )
        else:
            builder.gpu_ownership = str(owners)
    if problems:
        raise FieldError(problems)


def _add_document(
    builder: _Builder, doc: Any, *, file: str, name: str, index: int, count: int
) -> str:
    kind = classify(doc)
    where = f"document {index}" if count > 1 else ""
    if kind == "plugin-config":
        builder.add_plugin(name if count == 1 else f"{name}-{index}", doc, file=file, entry=where)
    elif kind == "mig-parted":
        builder.add_mig(doc, file=file, entry=where)
    elif kind == "configmap":
        _add_configmap(builder, doc, file=file, where=where)
    elif kind == "operator-values":
        _add_operator_values(builder, doc, file=file)
    elif kind == "dra-values":
        builder.warnings.append(
            str(
                FieldProblem(
                    "DRA driver Helm values: nothing here changes the node plan", file=file
                )
            )
        )
    elif kind == "manifest":
        builder.warnings.append(
            str(
                FieldProblem(
                    f"{doc.get('kind')} manifest is not a config; ignored "
                    "(kgpu validate checks it)",
                    file=file,
                    entry=where,
                )
            )
        )
    else:
        hint = other_kgpu_input(doc)
        raise FieldError(
            FieldProblem(
                "not a device-plugin config, ConfigMap, mig-parted config or GPU Operator "
                "Helm values "
                + (
                    f"({hint})"
                    if hint
                    else "(expected keys such as version/sharing/flags, mig-configs, "
                    "apiVersion/kind, or mig/migManager/devicePlugin)"
                ),
                file=file,
                entry=where,
            )
        )
    return kind


def _load_text(builder: _Builder, text: str, *, file: str) -> None:
    docs = load_yaml_documents(text, file=file)
    name = Path(file).stem
    if not docs:
        builder.warnings.append(str(FieldProblem("empty file: nothing loaded from it", file=file)))
    kinds = [
        _add_document(builder, doc, file=file, name=name, index=i, count=len(docs))
        for i, doc in enumerate(docs)
    ]
    builder.kinds.append((file, "+".join(dict.fromkeys(kinds)) or "empty"))


#: The link a kubelet-mounted ConfigMap volume swaps atomically to publish new contents.
CONFIGMAP_DATA_LINK = "..data"


def configmap_volume_files(directory: Path) -> list[Path]:
    """The keys of a directory laid out as the kubelet mounts a ConfigMap (or any directory of
    config files), as paths to read, sorted by key.

    The kubelet writes a new timestamped directory and swaps the ``..data`` link to it in one
    rename; the keys are links through ``..data``. The files are read from where ``..data``
    points when it is read, so one load sees one version of the ConfigMap even if a swap
    happens meanwhile. Names starting with a dot are the volume's own bookkeeping."""
    data = directory / CONFIGMAP_DATA_LINK
    base = directory
    if data.is_symlink() or data.is_dir():
        base = directory / os.readlink(data) if data.is_symlink() else data
    try:
        names = sorted(e.name for e in os.scandir(base) if not e.name.startswith("."))
    except OSError:
        return []
    return [base / name for name in names if (base / name).is_file()]


def _load_directory(builder: _Builder, directory: Path) -> None:
    """A ConfigMap volume: each key (file) is one config, named by the key, as the GPU
    Operator's config manager reads ``devicePlugin.config.name``'s ConfigMap (a mig-parted
    config, ``mig-configs:``, is recognised as such)."""
    files = configmap_volume_files(directory)
    if not files and not (directory / CONFIGMAP_DATA_LINK).exists():
        raise FieldError(
            FieldProblem(read_problem(IsADirectoryError(), directory), file=str(directory))
        )
    if not files:
        builder.warnings.append(
            str(FieldProblem("ConfigMap volume without keys: nothing loaded", file=str(directory)))
        )
    problems: list[FieldProblem] = []
    for path in files:
        key = path.name
        shown = str(directory / key)  # the path users know, not the timestamped one
        try:
            text = read_text(path, shown=shown)  # a regular file, bounded, UTF-8
        except FieldError as exc:
            problems.extend(exc.problems)
            continue
        try:
            kind, parsed = _configmap_entry_kind(text, file=shown, entry="")
            if kind == "mig-parted":
                builder.add_mig(parsed, file=shown)
            else:
                builder.add_plugin(key, parsed, file=shown, entry="")
        except FieldError as exc:  # every bad key is reported, not just the first
            problems.extend(exc.problems)
    if problems:
        raise FieldError(problems)
    builder.kinds.append((str(directory), "configmap-volume"))


def load_config_files(paths: Iterable[str | Path]) -> ConfigSet:
    """Load every file (a directory: a ConfigMap volume, one config per key); FieldError naming
    the file, entry and field on the first bad one."""
    builder = _Builder()
    for path in paths:
        p = Path(path)
        if p.is_dir():
            _load_directory(builder, p)
            continue
        _load_text(builder, read_text(p, shown=str(path)), file=str(path))
    return builder.build()


def load_config_strings(files: Mapping[str, str]) -> ConfigSet:
    """Same as :func:`load_config_files` for in-memory texts (a scenario, an API ConfigMap)."""
    builder = _Builder()
    for name, text in files.items():
        _load_text(builder, text, file=name)
    return builder.build()


def select_plugin_config(
    configs: ConfigSet, labels: Mapping[str, str], default: str | None = None
) -> PluginConfigEntry | None:
    """The device-plugin config entry a node uses: its ``nvidia.com/device-plugin.config``
    label, else ``default``, else the set's default, else the only entry. None when the set has
    no device-plugin config at all (upstream defaults apply)."""
    choices = configs.plugin_configs
    name = labels.get(PLUGIN_CONFIG_LABEL) or default or configs.default_plugin_config
    if name:
        if name in choices:
            return choices[name]
        if not choices and name == labels.get(PLUGIN_CONFIG_LABEL):
            raise FieldError(
                FieldProblem(
                    f"node label {PLUGIN_CONFIG_LABEL}={name} names a device-plugin config, "
                    "but no device-plugin config was given"
                )
            )
        if not choices and not default and name == configs.default_plugin_config:
            raise FieldError(
                FieldProblem(
                    f"names device-plugin config {name!r}, but no device-plugin config was "
                    "given: add the ConfigMap that devicePlugin.config.name points to",
                    "devicePlugin.config.default",
                    configs.default_plugin_source,
                )
            )
        if choices:
            if labels.get(PLUGIN_CONFIG_LABEL):
                where = f"node label {PLUGIN_CONFIG_LABEL}={name}"
            elif default:
                where = f"config name {name!r} (--config-name, or defaultConfig in a scenario)"
            else:
                where = f"devicePlugin.config.default {name!r}"
            sources = sorted({entry.source for entry in choices.values()})
            raise FieldError(
                FieldProblem(
                    f"{where} matches no device-plugin config entry; choices: "
                    f"{', '.join(sorted(choices))}",
                    file=", ".join(sources),
                )
            )
        return None
    if not choices:
        return None
    if len(choices) == 1:
        return next(iter(choices.values()))
    sources = sorted({entry.source for entry in choices.values()})
    raise FieldError(
        FieldProblem(
            f"{len(choices)} device-plugin configs and none selected: label the node "
            f"{PLUGIN_CONFIG_LABEL}=<name>, or name the default (--config-name NAME for "
            "kgpu plan and kgpu agent, defaultConfig in a scenario, devicePlugin.config.default "
            f"in Helm values); choices: {', '.join(sorted(choices))}",
            file=", ".join(sources),
        )
    )


def select_mig_config(
    configs: ConfigSet, labels: Mapping[str, str], default: str | None = None
) -> MigConfig | None:
    """The mig-parted config a node uses: its ``nvidia.com/mig.config`` label, else ``default``,
    else the set's default (``migManager.config.default``). None: leave MIG as the hardware is."""
    name = labels.get(MIG_CONFIG_LABEL) or default or configs.default_mig_config
    if not name:
        return None
    available = configs.all_mig_configs()
    if name in available:
        return available[name]
    if labels.get(MIG_CONFIG_LABEL):
        source = f"node label {MIG_CONFIG_LABEL}={name}"
    elif default:
        source = f"mig config {name!r} (--mig-config)"
    else:
        source = f"{name!r}"  # migManager.config.default, named as the field path below
    # the GPU Operator's defaults are dozens of all-<profile> names: summarised, not listed
    builtin = sorted(n for n in builtin_mig_configs() if n not in configs.mig_configs)
    named = [n for n in builtin if n.count(".") == 0]
    yours = ", ".join(sorted(configs.mig_configs)) or "none given"
    from_values = not labels.get(MIG_CONFIG_LABEL) and not default
    raise FieldError(
        FieldProblem(
            f"{source} names no mig-parted config; yours: {yours}; built in: "
            f"{', '.join(named)}, and all-<profile> for each MIG profile (all-1g.10gb, "
            "all-3g.40gb, ...: `kgpu machines <machine>` lists a GPU's profiles)",
            "migManager.config.default" if from_values else "",
            configs.default_mig_source if from_values else "",
        )
    )
