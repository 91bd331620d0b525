"""The pure node view: (hardware snapshot, configs, node labels) -> what the node advertises.

Resource names and device ids are formed the way NVIDIA/k8s-device-plugin forms them:

* whole GPUs under ``nvidia.com/gpu``, id = GPU UUID; MIG devices under ``nvidia.com/gpu``
  (``migStrategy: single``, only when every MIG device has the same profile) or
  ``nvidia.com/mig-<profile>`` (``mixed``, ``+`` written as ``.``), id = MIG UUID; with
  ``migStrategy: none`` a MIG-enabled GPU is still advertised whole, as upstream does;
* a shared device becomes ``replicas`` ids ``<id>::<n>`` (n from 0), under ``rename`` or, with
  ``renameByDefault``, ``<name>.shared``;
* ``NVIDIA_VISIBLE_DEVICES`` gets the UUID, or the index (``<gpu>`` / ``<gpu>:<mig>``) under
  ``deviceIDStrategy: index``;
* what a shared device's mode adds (MPS limits and pipe directories, refusals such as MPS on MIG
  devices or with ``migStrategy: mixed``) is decided by that mode (:mod:`kgpu.node.sharing`);
* under ``migStrategy: single`` a node that does not qualify is refused as upstream's plugin
  refuses it (nothing advertised, :class:`~kgpu.node.model.Refusal` says why) while the labels
  are GFD's (``<product>-MIG-INVALID``);
* a MIG layout is never applied here, on real or simulated GPUs: the MIG devices the hardware
  has are advertised, and a desired layout (``nvidia.com/mig.config``, ``--mig-config``, Helm
  values) that differs is reported (``NodeView.mig_pending``). Changing the GPUs is the MIG
  manager's job (:mod:`kgpu.drivers.migmanager`), which also owns ``nvidia.com/mig.config.state``.

Beyond upstream, which drops custom ``rename`` and non-``all`` ``devices`` and runs one strategy
per node: kgpu honours both, so time-slicing can cover some GPUs and MPS others on one node;
every such difference is listed in the view's warnings and each GPU's :class:`GpuPlan` says what
it got.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kgpu.config.loader import ConfigSet, PluginConfigEntry, select_mig_config, select_plugin_config
from kgpu.config.migparted import MigConfig, layout_for
from kgpu.config.plugin import (
    DEFAULT_PLUGIN_CONFIG,
    MIG_STRATEGIES,
    DevicePluginConfig,
    GpuOwnership,
    ReplicatedResource,
    ReplicatedResources,
    is_gpu_index,
    is_mig_index,
)
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.hardware.mig import apply_layout
from kgpu.hardware.model import Gpu, Machine, MigDevice
from kgpu.node.ids import replica_id
from kgpu.node.labels import GPU_RESOURCE, mig_resource_name, node_labels
from kgpu.node.model import AdvertisedDevice, GpuPlan, NodeView, Refusal, ResourceView
from kgpu.node.ownership import resolve_policy
from kgpu.node.sharing import CONFIGURED_MODES, Sharing, SharingMode, config_problems


@dataclass(frozen=True)
class _Base:
    """A device before sharing: a whole GPU or a MIG device, under its upstream resource."""

    gpu: Gpu
    mig: MigDevice | None
    resource: str

    @property
    def id(self) -> str:
        return self.mig.uuid if self.mig else self.gpu.uuid

    @property
    def index(self) -> str:
        return f"{self.gpu.index}:{self.mig.index}" if self.mig else str(self.gpu.index)


@dataclass(frozen=True)
class _Rule:
    """One sharing entry, with where it came from for error messages."""

    mode: SharingMode
    group: ReplicatedResources
    entry: ReplicatedResource
    path: str  # sharing.timeSlicing.resources[0]

    @property
    def sharing(self) -> Sharing:
        return Sharing(self.mode.name)


def build_node_view(
    machine: Machine,
    configs: ConfigSet,
    labels: Mapping[str, str],
    *,
    config_name: str | None = None,
    mig_config_name: str | None = None,
    mig_strategy: str | None = None,
    flags: tuple[tuple[str, Any], ...] = (),
) -> NodeView:
    """What ``machine`` advertises under ``configs`` given the node's ``labels``.

    The device-plugin config is the one ``nvidia.com/device-plugin.config`` names, else
    ``config_name``, else the set's default, else its only entry. The desired MIG layout is the
    mig-parted config ``nvidia.com/mig.config`` names, else ``mig_config_name``, else the set's
    default; it is only compared with the hardware (``NodeView.mig_pending``), never applied.
    ``mig_strategy`` overrides the strategy from Helm values and from the config file, in that
    order; ``flags`` override the selected config's ``flags``
    (:meth:`DevicePluginConfig.with_flags`: the agent's upstream environment variables). Raises
    FieldError.
    """
    cache = _cache_of(configs)
    if cache.problems:
        raise FieldError(cache.problems)
    plugin = select_plugin_config(configs, labels, config_name)
    mig = select_mig_config(configs, labels, mig_config_name)
    view = cache.view(machine, configs, plugin, mig, mig_strategy, flags)
    return replace(view, labels=dict(view.labels))


#: Views kept per config set, the oldest dropped first (a simulated cluster builds one per node
#: and health state; an agent a handful per config).
VIEWS_PER_CONFIG_SET = 8192


class _SetCache:
    """The views built under one :class:`ConfigSet`, and what its sharing rules refuse.

    Held in a :class:`weakref.WeakKeyDictionary`, so it dies with its config set: a
    ``ConfigSet`` hashes by identity and the agent loads a new one on every config change, so a
    cache keyed by the set itself (``functools.lru_cache``) kept every superseded set and its
    views alive, about 20 KiB per reload on a 4-GPU node (``bench/agent.py --only
    rss-by-action``). Nothing cached here refers back to the set, which would keep it alive."""

    def __init__(self, configs: ConfigSet) -> None:
        self.problems = _config_rule_problems(configs)
        self._views: dict[tuple[Any, ...], NodeView] = {}
        self._lock = threading.Lock()

    def view(
        self,
        machine: Machine,
        configs: ConfigSet,
        plugin: PluginConfigEntry | None,
        mig: MigConfig | None,
        mig_strategy: str | None,
        flags: tuple[tuple[str, Any], ...],
    ) -> NodeView:
        key = (machine, plugin, mig, mig_strategy, flags)
        view = self._views.get(key)  # a hit takes no lock and hashes the key once
        if view is not None:
            return view
        view = _build(machine, configs, plugin, mig, mig_strategy, flags)
        with self._lock:
            self._views[key] = view
            if len(self._views) > VIEWS_PER_CONFIG_SET:  # the oldest goes first
                del self._views[next(iter(self._views))]
        return view


_caches: weakref.WeakKeyDictionary[ConfigSet, _SetCache] = weakref.WeakKeyDictionary()
_caches_lock = threading.Lock()


def _cache_of(configs: ConfigSet) -> _SetCache:
    cache = _caches.get(configs)
    if cache is None:
        with _caches_lock:
            cache = _caches.get(configs)
            if cache is None:
                cache = _caches[configs] = _SetCache(configs)
    return cache


def _config_rule_problems(configs: ConfigSet) -> tuple[FieldProblem, ...]:
    """What the sharing modes refuse in any device-plugin config of the set: a bad entry fails
    every node, not only those that select it, as it did when the file was loaded."""
    return tuple(
        problem
        for entry in configs.plugin_configs.values()
        for problem in config_problems(entry.config, file=entry.source, entry=entry.entry)
    )


def _mig_layout(gpu: Gpu) -> tuple[tuple[str, int], ...] | None:
    """A GPU's MIG state as a layout: None when MIG is off, else (profile, count) pairs."""
    if not gpu.mig_enabled:
        return None
    counts: dict[str, int] = {}
    for m in gpu.mig_devices:
        counts[m.profile] = counts.get(m.profile, 0) + 1
    return tuple(sorted(counts.items()))


def _describe_layout(layout: tuple[tuple[str, int], ...] | None) -> str:
    if layout is None:
        return "MIG disabled"
    return " + ".join(f"{p} x {n}" for p, n in layout) or "MIG enabled, no MIG devices"


def _mig_drift(machine: Machine, mig: MigConfig, warnings: list[str]) -> str:
    """The desired layout is compared, never applied: the view advertises the MIG devices that
    exist (the MIG manager changes them). Returns what differs ('' when the hardware already
    has the layout), also added to ``warnings``."""
    try:
        layout, notes = layout_for(mig, machine.gpus)
        warnings.extend(notes)
        wanted = apply_layout(machine, layout)
    except FieldError as exc:
        why = "; ".join(p.message for p in exc.problems)
        message = (
            f"mig config {mig.name!r} cannot be applied to this node's GPUs ({why}); the node "
            "advertises the MIG devices that exist (the MIG manager will report the layout "
            "failed)"
        )
        warnings.append(message)
        return message
    diffs = [
        f"GPU {have.index}: {_describe_layout(_mig_layout(want))} wanted, "
        f"{_describe_layout(_mig_layout(have))} present"
        for have, want in zip(machine.gpus, wanted.gpus, strict=True)
        if _mig_layout(have) != _mig_layout(want)
    ]
    if not diffs:
        return ""
    message = (
        f"mig config {mig.name!r} is not what this node's GPUs have ({'; '.join(diffs)}): the "
        "node advertises the MIG devices that exist until the MIG manager applies the layout"
    )
    warnings.append(message)
    return message


def _strategy(
    configs: ConfigSet, config: DevicePluginConfig, override: str | None
) -> tuple[str, str]:
    if override:
        if override not in MIG_STRATEGIES:
            raise FieldError(
                FieldProblem(
                    f"unknown MIG strategy {override!r}: allowed {', '.join(MIG_STRATEGIES)}",
                    "migStrategy",
                )
            )
        return override, "the --mig-strategy option"
    if configs.mig_strategy:
        return configs.mig_strategy, "GPU Operator Helm values (mig.strategy)"
    return config.mig_strategy, "the device-plugin config (flags.migStrategy)"


def _single_strategy_refusal(machine: Machine) -> str | None:
    """Why the device plugin refuses to start under ``migStrategy: single`` on this node
    (upstream's words), or None when the node qualifies. GFD labels such a node
    ``<product>-MIG-INVALID`` instead of failing."""
    enabled = [g for g in machine.gpus if g.mig_enabled]
    if not enabled:
        return None
    empty = [g.index for g in enabled if not g.mig_devices]
    if empty:
        return (
            "invalid MIG configuration: at least one device with migEnabled=true was not "
            f"configured correctly: device {empty[0]} has no MIG devices configured"
        )
    profiles = sorted({m.profile for g in enabled for m in g.mig_devices})
    if len(profiles) > 1:
        return (
            "invalid MIG configuration: more than one MIG device type present on node "
            f"({', '.join(profiles)})"
        )
    if len(enabled) != len(machine.gpus):
        return "all devices on the node must be configured with the same migEnabled value"
    return None


def _bases(machine: Machine, strategy: str, warnings: list[str]) -> list[_Base]:
    bases: list[_Base] = []
    for gpu in machine.gpus:
        if gpu.mig_enabled and strategy != "none":
            if not gpu.mig_devices:
                warnings.append(f"GPU {gpu.index} has MIG enabled but no MIG devices configured")
            for mig in sorted(gpu.mig_devices, key=lambda m: m.index):
                name = GPU_RESOURCE if strategy == "single" else mig_resource_name(mig.profile)
                bases.append(_Base(gpu, mig, name))
            continue
        if gpu.mig_enabled:
            warnings.append(
                f"GPU {gpu.index} has MIG enabled but migStrategy is none: it is advertised as a "
                "whole nvidia.com/gpu, as upstream does; set migStrategy single or mixed"
            )
        bases.append(_Base(gpu, None, GPU_RESOURCE))
    return bases


def _rules(config: DevicePluginConfig) -> list[_Rule]:
    """Every sharing entry of the config, the winning mode's first (upstream runs MPS alone
    where both name a device)."""
    rules: list[_Rule] = []
    for mode in CONFIGURED_MODES:
        group = mode.group(config)
        if group is None:
            continue
        for i, entry in enumerate(group.entries()):
            path = join_path("sharing", mode.config_key or mode.name, "resources", i)
            rules.append(_Rule(mode, group, entry, path))
    return rules


def _matches(ref: str, base: _Base) -> bool:
    if is_gpu_index(ref):
        return base.gpu.index == int(ref)
    if is_mig_index(ref):
        return base.mig is not None and base.index == ref
    return ref in (base.gpu.uuid, base.mig.uuid if base.mig else None)


def _select(rule: _Rule, candidates: list[_Base]) -> list[_Base]:
    devices = rule.entry.devices
    if devices.all:
        return candidates
    if devices.count is not None:
        return candidates[: devices.count]
    return [b for b in candidates if any(_matches(ref, b) for ref in devices.refs)]


def _assign(
    bases: list[_Base],
    config: DevicePluginConfig,
    rules: list[_Rule],
    file: str,
    name: str,
    warnings: list[str],
) -> dict[int, _Rule]:
    """Which sharing rule applies to each base device (by position); ``file``/``name`` locate
    the device-plugin config entry in warnings."""
    active = [mode for mode in CONFIGURED_MODES if mode.group(config) is not None]
    if len(active) > 1:
        keys = " and ".join(f"sharing.{mode.config_key}" for mode in reversed(active))
        first = active[0].title
        warnings.append(
            f"{file}: {name}: both {keys} are set; upstream runs "
            f"{first} only, kgpu applies each to the devices it selects ({first} first)"
        )
    assigned: dict[int, _Rule] = {}
    by_resource: dict[str, list[int]] = {}
    for pos, base in enumerate(bases):
        by_resource.setdefault(base.resource, []).append(pos)
    for rule in rules:
        positions = by_resource.get(rule.entry.name, [])
        candidates = [bases[p] for p in positions]
        chosen = {id(b) for b in _select(rule, candidates)}
        if rule.entry.devices.refs:
            for k, ref in enumerate(rule.entry.devices.refs):
                if not any(_matches(ref, b) for b in candidates):
                    warnings.append(
                        str(
                            FieldProblem(
                                f"{ref} names no {rule.entry.name} device on this node",
                                join_path(rule.path, "devices", k),
                                file,
                                name,
                            )
                        )
                    )
        if not rule.entry.devices.all:
            warnings.append(
                str(
                    FieldProblem(
                        f"devices: {rule.entry.devices.describe()} is honoured by kgpu; upstream "
                        "k8s-device-plugin ignores it and shares every device",
                        join_path(rule.path, "devices"),
                        file,
                        name,
                    )
                )
            )
        if rule.entry.rename and not rule.group.rename_by_default:
            warnings.append(
                str(
                    FieldProblem(
                        f"rename to {rule.entry.rename} is honoured by kgpu; upstream "
                        "k8s-device-plugin ignores custom renames",
                        join_path(rule.path, "rename"),
                        file,
                        name,
                    )
                )
            )
        for pos in positions:
            if id(bases[pos]) not in chosen:
                continue
            if pos in assigned:
                if assigned[pos].mode is not rule.mode:
                    first = assigned[pos].mode.title
                    warnings.append(
                        f"{file}: {name}: {bases[pos].resource} device {bases[pos].index} is "
                        f"selected for both {first} and {rule.mode.title}; {first} wins "
                        f"({rule.path} ignored for it)"
                    )
                continue
            _check_rule(rule, bases[pos], file, name)
            assigned[pos] = rule
    return assigned


def _check_rule(rule: _Rule, base: _Base, file: str, entry: str) -> None:
    problems = rule.mode.device_problems(
        rule.entry, rule.path, base.gpu, base.mig, base.resource, file=file, entry=entry
    )
    if problems:
        raise FieldError(problems)


def _build(
    machine: Machine,
    configs: ConfigSet,
    entry: PluginConfigEntry | None,
    mig: MigConfig | None,
    strategy_override: str | None,
    flags: tuple[tuple[str, Any], ...] = (),
) -> NodeView:
    warnings: list[str] = list(configs.warnings)
    config = (entry.config if entry else DEFAULT_PLUGIN_CONFIG).with_flags(flags)
    source, entry_name = (entry.source, entry.name) if entry else ("", "")
    mig_pending = _mig_drift(machine, mig, warnings) if mig is not None else ""
    strategy, strategy_source = _strategy(configs, config, strategy_override)
    for mode in CONFIGURED_MODES:
        if mode.group(config) is None:
            continue
        problems = mode.strategy_problems(strategy, strategy_source, file=source, entry=entry_name)
        problems += mode.node_problems(config, machine, file=source, entry=entry_name)
        if problems:
            raise FieldError(problems)
    refused: tuple[Refusal, ...] = ()
    refusal = _single_strategy_refusal(machine) if strategy == "single" else None
    all_rules = _rules(config)
    if refusal is None:
        bases = _bases(machine, strategy, warnings)
        assigned = _assign(bases, config, all_rules, source, entry_name, warnings)
    else:
        # Upstream's plugin exits; kgpu serves nothing and says why, and labels as GFD does.
        refused = (Refusal(GPU_RESOURCE, refusal),)
        warnings.append(
            f"migStrategy single: the device plugin refuses this node ({refusal}) and advertises "
            "nothing; gpu-feature-discovery labels it MIG-INVALID"
        )
        bases, assigned, all_rules = [], {}, []
    id_strategy = config.device_id_strategy

    grouped: dict[str, list[AdvertisedDevice]] = {}
    rule_of: dict[str, list[_Rule]] = {}
    for pos, base in enumerate(bases):
        rule = assigned.get(pos)
        visible = base.index if id_strategy == "index" else base.id
        common = {
            "visible_id": visible,
            "gpu_index": base.gpu.index,
            "gpu_uuid": base.gpu.uuid,
            "mig_uuid": base.mig.uuid if base.mig else None,
            "mig_profile": base.mig.profile if base.mig else None,
            "numa_node": base.gpu.numa_node,
        }
        if rule is None:
            grouped.setdefault(base.resource, []).append(
                AdvertisedDevice(id=base.id, resource=base.resource, **common)  # type: ignore[arg-type]
            )
            continue
        name = rule.group.advertised_name(rule.entry)
        replicas = rule.entry.replicas
        limits = rule.mode.limits(config, base.gpu, name, replicas)
        devices = grouped.setdefault(name, [])
        rule_of.setdefault(name, []).append(rule)
        for n in range(replicas):
            devices.append(
                AdvertisedDevice(
                    id=replica_id(base.id, n),
                    resource=name,
                    replica=n,
                    sharing=rule.sharing,
                    mps=limits,
                    **common,  # type: ignore[arg-type]
                )
            )

    resources: list[ResourceView] = []
    for name, devices in sorted(grouped.items()):
        rules = rule_of.get(name, [])
        sharings = {d.sharing for d in devices}
        if len(sharings) > 1:
            warnings.append(
                f"{name} mixes devices shared differently "
                f"({', '.join(sorted(map(str, sharings)))}); "
                "a pod asking for it may get either: use rename to give each its own resource"
            )
        sharing = next((r.sharing for r in rules), Sharing.NONE)
        fail = any(r.mode.fail_requests_greater_than_one(r.group) for r in rules)
        resources.append(
            ResourceView(
                name=name,
                devices=tuple(devices),
                sharing=sharing,
                replicas=max((r.entry.replicas for r in rules), default=1),
                fail_requests_greater_than_one=fail,
            )
        )

    advertised_bases = {b.resource for b in bases}
    for rule in all_rules:
        if rule.entry.name not in advertised_bases:
            warnings.append(
                str(
                    FieldProblem(
                        f"{rule.entry.name} is not advertised on this node "
                        f"({machine.profile}, migStrategy {strategy}); entry unused",
                        join_path(rule.path, "name"),
                        source,
                        entry_name,
                    )
                )
            )

    plans = _gpu_plans(machine, resources)
    labels = node_labels(machine, resources, strategy, config)
    section = config.gpu_ownership  # the config's own, else the chart's node-wide policy
    if "gpu_ownership" not in config.model_fields_set and configs.gpu_ownership:
        section = GpuOwnership(default=configs.gpu_ownership)  # type: ignore[arg-type]
    ownership = resolve_policy(section, machine, file=source, entry=entry_name)
    return NodeView(
        machine=machine,
        resources=tuple(resources),
        labels=labels,
        warnings=tuple(dict.fromkeys(warnings)),
        gpus=plans,
        config_name=entry.name if entry else None,
        mig_config_name=mig.name if mig else None,
        mig_strategy=strategy,
        refused=refused,
        mig_pending=mig_pending,
        device_list_strategy=config.device_list_strategy,
        device_id_strategy=config.device_id_strategy,
        pass_device_specs=config.pass_device_specs,
        shared_devices_allocation_policy=config.shared_devices_allocation_policy,
        cdi_annotation_prefix=config.cdi_annotation_prefix,
        allocate_envs=config.allocate_envs,
        gpu_ownership=ownership,
        gfd_timestamp=not (config.flags.gfd and config.flags.gfd.no_timestamp),
    )


def _gpu_plans(machine: Machine, resources: list[ResourceView]) -> tuple[GpuPlan, ...]:
    per_gpu: dict[int, list[AdvertisedDevice]] = {}
    for res in resources:
        for dev in res.devices:
            per_gpu.setdefault(dev.gpu_index, []).append(dev)
    plans = []
    for gpu in machine.gpus:
        devices = per_gpu.get(gpu.index, [])
        names = tuple(dict.fromkeys(d.resource for d in devices))
        shared = [d for d in devices if d.sharing is not Sharing.NONE]
        sharing = shared[0].sharing if shared else Sharing.NONE
        backing: dict[str, int] = {}
        for d in devices:
            backing[d.backing_uuid] = backing.get(d.backing_uuid, 0) + 1
        plans.append(
            GpuPlan(
                index=gpu.index,
                uuid=gpu.uuid,
                product=gpu.product_name,
                mig_devices=tuple(m.profile for m in gpu.mig_devices) if gpu.mig_enabled else (),
                resources=names,
                sharing=sharing,
                replicas=max(backing.values(), default=0),
            )
        )
    return tuple(plans)
