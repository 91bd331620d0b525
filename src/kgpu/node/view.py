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
* MPS: ``100 // replicas`` percent of the SMs and ``memory / replicas`` pinned memory per
  client. Upstream runs one control daemon per resource (pipe ``<mpsRoot>/<resource>/pipe``);
  kgpu runs one per GPU, so each MPS-shared GPU gets its own pipe and log directories under
  ``<mpsRoot>/<resource>/<gpu index>/`` (every MPS client uses exactly one GPU: requests for more
  than one MPS replica are refused, as upstream, see ``kgpu.node.allocate``).

Beyond upstream, which drops custom ``rename`` and non-``all`` ``devices`` and runs one strategy
per node: kgpu honours both, so time-slicing can cover some GPUs and MPS others on one node;
every such difference is listed in the view's warnings and each GPU's :class:`GpuPlan` says what
it got.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace

from kgpu.config.loader import ConfigSet, PluginConfigEntry, select_mig_config, select_plugin_config
from kgpu.config.migparted import MigConfig, layout_for
from kgpu.config.plugin import (
    DEFAULT_PLUGIN_CONFIG,
    MIG_STRATEGIES,
    DevicePluginConfig,
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
from kgpu.node.model import AdvertisedDevice, GpuPlan, MpsLimits, NodeView, ResourceView, Sharing

MPS_MAX_CLIENTS = 48
MPS_MAX_CLIENTS_PRE_VOLTA = 16


def mps_max_clients(compute_capability: tuple[int, int]) -> int:
    """CUDA MPS client limit per device: 48 from Volta (7.0) on, 16 before."""
    return MPS_MAX_CLIENTS if compute_capability >= (7, 0) else MPS_MAX_CLIENTS_PRE_VOLTA


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

    sharing: Sharing
    group: ReplicatedResources
    entry: ReplicatedResource
    path: str  # sharing.timeSlicing.resources[0]


def build_node_view(
    machine: Machine,
    configs: ConfigSet,
    labels: Mapping[str, str],
    *,
    config_name: str | None = None,
    mig_config_name: str | None = None,
    mig_strategy: str | None = None,
) -> NodeView:
    """What ``machine`` advertises under ``configs`` given the node's ``labels``.

    The device-plugin config is the one ``nvidia.com/device-plugin.config`` names, else
    ``config_name``, else the set's default, else its only entry; the MIG layout is the
    mig-parted config ``nvidia.com/mig.config`` names, else ``mig_config_name``, else the set's
    default (none: the hardware's current MIG state). ``mig_strategy`` overrides the strategy
    from Helm values and from the config file, in that order. Raises FieldError.
    """
    plugin = select_plugin_config(configs, labels, config_name)
    mig = select_mig_config(configs, labels, mig_config_name)
    view = _cached_view(machine, configs, plugin, mig, mig_strategy)
    return replace(view, labels=dict(view.labels))


@functools.lru_cache(maxsize=8192)
def _cached_view(
    machine: Machine,
    configs: ConfigSet,
    plugin: PluginConfigEntry | None,
    mig: MigConfig | None,
    mig_strategy: str | None,
) -> NodeView:
    return _build(machine, configs, plugin, mig, mig_strategy)


def _apply_mig(machine: Machine, mig: MigConfig, warnings: list[str]) -> Machine:
    layout, notes = layout_for(mig, machine.gpus)
    warnings.extend(notes)
    try:
        return apply_layout(machine, layout)
    except FieldError as exc:
        raise FieldError(
            [
                FieldProblem(
                    f"cannot apply mig config {mig.name!r}: {p.message}",
                    p.path or join_path("mig-configs", mig.name),
                    p.file or mig.source,
                    p.entry,
                )
                for p in exc.problems
            ]
        ) from None


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


def _bases(machine: Machine, strategy: str, warnings: list[str]) -> list[_Base]:
    bases: list[_Base] = []
    enabled = [g for g in machine.gpus if g.mig_enabled]
    if strategy == "single" and enabled:
        empty = [g.index for g in enabled if not g.mig_devices]
        if empty:
            raise FieldError(
                FieldProblem(
                    "at least one device with migEnabled=true was not configured correctly: "
                    f"GPU {empty[0]} has MIG enabled but no MIG devices (migStrategy single)"
                )
            )
        profiles = sorted({m.profile for g in enabled for m in g.mig_devices})
        if len(profiles) > 1:
            raise FieldError(
                FieldProblem(
                    "more than one MIG device type present on node "
                    f"({', '.join(profiles)}): migStrategy single needs one profile on every "
                    "GPU; use migStrategy mixed"
                )
            )
        if len(enabled) != len(machine.gpus):
            warnings.append(
                "migStrategy single with some GPUs MIG-enabled and some not: both whole GPUs "
                "and MIG devices are advertised as nvidia.com/gpu (GFD labels this node "
                "MIG-INVALID)"
            )
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
    rules: list[_Rule] = []
    # MPS first: where both strategies name a device, upstream runs MPS only.
    for group, key, sharing in (
        (config.sharing.mps, "mps", Sharing.MPS),
        (config.sharing.time_slicing, "timeSlicing", Sharing.TIME_SLICING),
    ):
        if group is None:
            continue
        for i, entry in enumerate(group.entries()):
            rules.append(_Rule(sharing, group, entry, join_path("sharing", key, "resources", i)))
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
    if config.uses_mps and config.uses_time_slicing:
        warnings.append(
            f"{file}: {name}: both sharing.timeSlicing and sharing.mps are set; upstream runs "
            "MPS only, kgpu applies each to the devices it selects (MPS first)"
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
                if assigned[pos].sharing is not rule.sharing:
                    warnings.append(
                        f"{file}: {name}: {bases[pos].resource} device {bases[pos].index} is "
                        f"selected for both MPS and time-slicing; MPS wins ({rule.path} ignored "
                        "for it)"
                    )
                continue
            _check_rule(rule, bases[pos], file, name)
            assigned[pos] = rule
    return assigned


def _check_rule(rule: _Rule, base: _Base, file: str, entry: str) -> None:
    if rule.sharing is not Sharing.MPS:
        return
    if base.mig is not None:
        raise FieldError(
            FieldProblem(
                f"sharing using MPS is not supported for MIG devices (GPU {base.gpu.index} is "
                f"split into MIG devices advertised as {base.resource})",
                rule.path,
                file,
                entry,
            )
        )
    limit = mps_max_clients(base.gpu.compute_capability)
    if rule.entry.replicas > limit:
        raise FieldError(
            FieldProblem(
                f"must be <= {limit} on GPU {base.gpu.index} ({base.gpu.product_name}, compute "
                f"capability {base.gpu.cc}): an MPS server accepts at most {limit} clients per "
                "device",
                join_path(rule.path, "replicas"),
                file,
                entry,
            )
        )


def _build(
    machine: Machine,
    configs: ConfigSet,
    entry: PluginConfigEntry | None,
    mig: MigConfig | None,
    strategy_override: str | None,
) -> NodeView:
    warnings: list[str] = list(configs.warnings)
    config = entry.config if entry else DEFAULT_PLUGIN_CONFIG
    source, entry_name = (entry.source, entry.name) if entry else ("", "")
    if mig is not None:
        machine = _apply_mig(machine, mig, warnings)
    strategy, strategy_source = _strategy(configs, config, strategy_override)
    if config.uses_mps and strategy == "mixed":
        raise FieldError(
            FieldProblem(
                "MPS sharing is not supported with migStrategy mixed (set by "
                f"{strategy_source}): upstream refuses to start (using --mig-strategy=mixed is "
                "not supported with MPS)",
                "sharing.mps",
                source,
                entry_name,
            )
        )
    bases = _bases(machine, strategy, warnings)
    all_rules = _rules(config)
    assigned = _assign(bases, config, all_rules, source, entry_name, warnings)
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
        mps = None
        if rule.sharing is Sharing.MPS:
            root = config.mps_root.rstrip("/")
            mps = MpsLimits(
                active_thread_percentage=100 // replicas,
                pinned_memory_limit_mib=base.gpu.memory_mib // replicas,
                pipe_directory=f"{root}/{name}/{base.gpu.index}/pipe",
                log_directory=f"{root}/{name}/{base.gpu.index}/log",
                shm_directory=f"{root}/shm",
            )
        devices = grouped.setdefault(name, [])
        rule_of.setdefault(name, []).append(rule)
        for n in range(replicas):
            devices.append(
                AdvertisedDevice(
                    id=replica_id(base.id, n),
                    resource=name,
                    replica=n,
                    sharing=rule.sharing,
                    mps=mps,
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
        fail = False
        for r in rules:
            if r.sharing is Sharing.MPS:
                fail = fail or config.mps_fail_requests_greater_than_one()
            else:
                fail = fail or bool(r.group.fail_requests_greater_than_one)
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
    labels = node_labels(machine, resources, strategy)
    if mig is not None and any(g.mig_capable for g in machine.gpus):
        labels["nvidia.com/mig.config.state"] = "success"
    return NodeView(
        machine=machine,
        resources=tuple(resources),
        labels=labels,
        warnings=tuple(dict.fromkeys(warnings)),
        gpus=plans,
        config_name=entry.name if entry else None,
        mig_config_name=mig.name if mig else None,
        mig_strategy=strategy,
        device_list_strategy=config.device_list_strategy,
        device_id_strategy=config.device_id_strategy,
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
