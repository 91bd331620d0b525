"""The environment variables of NVIDIA's device plugin and dcgm-exporter, read by ``kgpu agent``.

Their charts and the GPU Operator's ClusterPolicy configure those daemons through environment
variables (``MIG_STRATEGY``, ``DEVICE_LIST_STRATEGY``, ``DCGM_EXPORTER_COLLECTORS``...). A pod
spec written for them carries over when ``kgpu agent`` reads the same names with the same
meaning and the same precedence: upstream parses them with urfave/cli, where a command-line
flag beats its environment variable, and lays both over the config file's ``flags``
(``spec.NewConfig``: flag > environment > config file > default).

:data:`VARIABLES` is the table (docs/agent.md prints it); :func:`read_environment` turns an
environment into :class:`EnvSettings`, every set-but-invalid variable a problem naming it
(``MIG_STRATEGY: 'mix': allowed none, single, mixed``), never silently dropped. Values are
parsed as urfave/cli parses them: booleans by Go's ``strconv.ParseBool``, lists split on commas.
A variable set to the empty string counts as unset (Helm templates often render ``value: ""``).
Variables the upstream daemons read that kgpu has no use for are listed in :data:`UNUSED` and
reported once when set, so nobody believes they took effect.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgpu.config.plugin import DEVICE_LIST_STRATEGIES, MIG_STRATEGIES, host_root
from kgpu.errors import FieldProblem

DEVICE_PLUGIN = "device plugin"
DCGM_EXPORTER = "dcgm-exporter"
DRA_DRIVER = "DRA driver"

_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")


def parse_bool(text: str) -> bool:
    """Go's ``strconv.ParseBool``, which urfave/cli applies to a boolean flag's variable."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false, 1/0, t/f)")


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(f"{text!r}: allowed {', '.join(allowed)}")
        return text

    return parse


def _list_of(*allowed: str) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list, as urfave/cli splits a string-slice flag's variable."""

    def parse(text: str) -> tuple[str, ...]:
        items = tuple(i.strip() for i in text.split(",") if i.strip())
        bad = [i for i in items if i not in allowed]
        if bad or not items:
            raise ValueError(f"{text!r}: each item must be one of {', '.join(allowed)}")
        return items

    return parse


def _path(text: str) -> str:
    """A host or mount path, as the config file's fields take it (:func:`host_root`)."""
    return host_root(text) or text


def _text(text: str) -> str:
    return text


def _checked(check: Callable[[str], object], text: str) -> str:
    """``text`` once ``check`` accepts it; its FieldError's messages as a ValueError (what
    the environment readers report) otherwise."""
    from kgpu.errors import FieldError

    try:
        check(text)
    except FieldError as exc:
        raise ValueError("; ".join(p.message for p in exc.problems)) from None
    return text


def _address(text: str) -> str:
    from kgpu.metrics.server import parse_address

    return _checked(parse_address, text)


def _discovery(text: str) -> str:
    if text == "tegra":
        raise ValueError("'tegra': kgpu discovers GPUs through NVML only; use auto or nvml")
    return _choice("auto", "nvml", "tegra")(text)


def _hooks(text: str) -> frozenset[str]:
    from kgpu.kubelet.nvidia_cdi import HOOKS

    items = frozenset(i.strip() for i in text.split(",") if i.strip())
    bad = sorted(items - {*HOOKS, "all"})
    if bad:
        raise ValueError(f"unknown hook {', '.join(bad)}: allowed all, {', '.join(HOOKS)}")
    return items


def _share_mode(text: str) -> str:
    """A ``--consumable-shares`` mode, as NVIDIA's DRA driver takes ``CONSUMABLE_SHARES``."""
    from kgpu.dra.shares import parse_share_policy

    return _checked(parse_share_policy, text)


@dataclass(frozen=True)
class Variable:
    """One upstream environment variable and what kgpu does with it.

    ``sets`` says where the value goes: ``option:<AgentOptions field>`` for the agent's own
    settings (its flag, ``flag``, wins over the variable), ``flags:<path>`` for a device-plugin
    config flag (it wins over the config file's value, as upstream's flags do)."""

    name: str
    origin: str
    meaning: str
    kgpu: str
    sets: str
    parse: Callable[[str], Any]
    flag: str = ""


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "NODE_NAME",
        DEVICE_PLUGIN + ", " + DCGM_EXPORTER,
        "the node's name (downward API)",
        "`--node-name`",
        "option:node_name",
        _text,
        "--node-name",
    ),
    Variable(
        "CONFIG_FILE",
        DEVICE_PLUGIN,
        "a device-plugin config file (the config manager writes the node's choice there)",
        "one more `--config`",
        "option:config_files",
        _text,
        "--config",
    ),
    Variable(
        "MIG_STRATEGY",
        DEVICE_PLUGIN,
        "how MIG devices are advertised: none, single, mixed",
        "`--mig-strategy`; beats Helm values' `mig.strategy` and `flags.migStrategy`",
        "option:mig_strategy",
        _choice(*MIG_STRATEGIES),
        "--mig-strategy",
    ),
    Variable(
        "FAIL_ON_INIT_ERROR",
        DEVICE_PLUGIN,
        "exit when NVML cannot be initialised (false: log it, serve nothing, keep running)",
        "`--fail-on-init-error`; the same (status `initError` and `/healthz` say why)",
        "option:fail_on_init_error",
        parse_bool,
        "--fail-on-init-error",
    ),
    Variable(
        "NVIDIA_DRIVER_ROOT",
        DEVICE_PLUGIN,
        "where the driver is installed on the host (`/`, `/run/nvidia/driver`)",
        "`flags.nvidiaDriverRoot`: host paths of the driver in CDI specs and device specs",
        "flags:nvidiaDriverRoot",
        _path,
    ),
    Variable(
        "NVIDIA_DEV_ROOT",
        DEVICE_PLUGIN,
        "where the device nodes are on the host (default: the driver root)",
        "`flags.nvidiaDevRoot`: host paths of device nodes",
        "flags:nvidiaDevRoot",
        _path,
    ),
    Variable(
        "DRIVER_ROOT_CTR_PATH",
        DEVICE_PLUGIN,
        "where the driver root is mounted in the plugin's container (also `CONTAINER_DRIVER_ROOT`)",
        "`flags.plugin.containerDriverRoot`: where the agent reads the driver's files",
        "flags:plugin.containerDriverRoot",
        _path,
    ),
    Variable(
        "CONTAINER_DRIVER_ROOT",
        DEVICE_PLUGIN,
        "older name of `DRIVER_ROOT_CTR_PATH`",
        "the same",
        "flags:plugin.containerDriverRoot",
        _path,
    ),
    Variable(
        "PASS_DEVICE_SPECS",
        DEVICE_PLUGIN,
        "Allocate passes the device nodes (DeviceSpecs) to the kubelet",
        "`flags.plugin.passDeviceSpecs`: the same, for non-CDI strategies",
        "flags:plugin.passDeviceSpecs",
        parse_bool,
    ),
    Variable(
        "DEVICE_LIST_STRATEGY",
        DEVICE_PLUGIN,
        "how Allocate names devices: envvar, volume-mounts, cdi-annotations, cdi-cri "
        "(comma-separated)",
        "`flags.plugin.deviceListStrategy`: the same; CDI strategies get a CDI spec",
        "flags:plugin.deviceListStrategy",
        _list_of(*DEVICE_LIST_STRATEGIES),
    ),
    Variable(
        "DEVICE_ID_STRATEGY",
        DEVICE_PLUGIN,
        "uuid or index in the device list",
        "`flags.plugin.deviceIDStrategy`",
        "flags:plugin.deviceIDStrategy",
        _choice("uuid", "index"),
    ),
    Variable(
        "CDI_ANNOTATION_PREFIX",
        DEVICE_PLUGIN,
        "the key prefix of `cdi-annotations` (default `cdi.k8s.io/`)",
        "`flags.plugin.cdiAnnotationPrefix`",
        "flags:plugin.cdiAnnotationPrefix",
        _text,
    ),
    Variable(
        "NVIDIA_CDI_HOOK_PATH",
        DEVICE_PLUGIN,
        "the hook binary CDI specs run (also `NVIDIA_CTK_PATH`)",
        "`flags.plugin.nvidiaCTKPath`: the hooks in CDI specs",
        "flags:plugin.nvidiaCTKPath",
        _path,
    ),
    Variable(
        "NVIDIA_CTK_PATH",
        DEVICE_PLUGIN,
        "older name of `NVIDIA_CDI_HOOK_PATH`",
        "the same",
        "flags:plugin.nvidiaCTKPath",
        _path,
    ),
    Variable(
        "CDI_DISABLE_HOOKS",
        DEVICE_PLUGIN,
        "hooks left out of CDI specs (comma-separated, or `all`)",
        "the same",
        "option:cdi_disabled_hooks",
        _hooks,
    ),
    Variable(
        "SHARED_DEVICES_ALLOCATION_POLICY",
        DEVICE_PLUGIN,
        "distributed or packed replicas in GetPreferredAllocation",
        "`flags.plugin.sharedDevicesAllocationPolicy`",
        "flags:plugin.sharedDevicesAllocationPolicy",
        _choice("distributed", "packed"),
    ),
    Variable(
        "MPS_ROOT",
        DEVICE_PLUGIN,
        "host directory of the MPS daemons' pipes and logs",
        "`flags.mpsRoot`",
        "flags:mpsRoot",
        _path,
    ),
    Variable(
        "GDRCOPY_ENABLED",
        DEVICE_PLUGIN,
        "containers get `NVIDIA_GDRCOPY=enabled`",
        "`flags.gdrcopyEnabled`",
        "flags:gdrcopyEnabled",
        parse_bool,
    ),
    Variable(
        "GDS_ENABLED",
        DEVICE_PLUGIN,
        "containers get `NVIDIA_GDS=enabled`",
        "`flags.gdsEnabled`",
        "flags:gdsEnabled",
        parse_bool,
    ),
    Variable(
        "MOFED_ENABLED",
        DEVICE_PLUGIN,
        "containers get `NVIDIA_MOFED=enabled`",
        "`flags.mofedEnabled`",
        "flags:mofedEnabled",
        parse_bool,
    ),
    Variable(
        "DEVICE_DISCOVERY_STRATEGY",
        DEVICE_PLUGIN,
        "auto, nvml or tegra",
        "auto and nvml accepted (kgpu reads NVML); tegra is an error",
        "flags:deviceDiscoveryStrategy",
        _discovery,
    ),
    Variable(
        "DCGM_EXPORTER_LISTEN",
        DCGM_EXPORTER,
        "the metrics address (`:9400`)",
        "`--metrics-address` (setting it turns metrics on)",
        "option:metrics_address",
        _address,
        "--metrics-address",
    ),
    Variable(
        "DCGM_EXPORTER_COLLECTORS",
        DCGM_EXPORTER,
        "the counters CSV selecting the fields served",
        "`--collectors` / `-f`: the same file format",
        "option:collectors",
        _text,
        "--collectors",
    ),
    Variable(
        "DCGM_EXPORTER_KUBERNETES",
        DCGM_EXPORTER,
        "map metrics to pods (`pod`, `namespace`, `container` labels)",
        "false turns pod attribution off (kgpu's default is on)",
        "option:metrics_pods",
        parse_bool,
    ),
    Variable(
        "CONSUMABLE_SHARES",
        DRA_DRIVER,
        "share whole GPUs between claims: disabled, memory, unlimited or a share count",
        "`--consumable-shares`: the same modes; kgpu enforces `memory` shares through MPS",
        "option:consumable_shares",
        _share_mode,
        "--consumable-shares",
    ),
)

#: Variables the upstream daemons read that kgpu has no counterpart for, with why; set, they are
#: reported once at start (never silently taken for applied).
UNUSED: Mapping[str, str] = {
    "RESTART_ON_DEVICE_UNHEALTHY": "kgpu marks devices Unhealthy and recovers them instead",
    "KUBELET_SOCKET": "use --kubelet-root",
    "CDI_FEATURE_FLAGS": "kgpu's CDI specs have no feature flags",
    "IMEX_CHANNEL_IDS": "IMEX channels come from ComputeDomains (DRA)",
    "IMEX_REQUIRED": "IMEX channels come from ComputeDomains (DRA)",
    "DCGM_EXPORTER_INTERVAL": "kgpu reads NVML on each scrape",
    "DCGM_EXPORTER_NO_HOSTNAME": "use --hostname-label",
    "DCGM_REMOTE_HOSTENGINE_INFO": "kgpu reads NVML, not a DCGM host engine",
    "DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE": "kgpu maps pods by UUID and device name both",
    "DCGM_EXPORTER_USE_OLD_NAMESPACE": "kgpu serves the DCGM_FI_ names only",
    "NVIDIA_MIG_MONITOR_DEVICES": "read by the NVIDIA container runtime, not by the plugin",
}


@dataclass(frozen=True)
class EnvSettings:
    """What the environment says: agent options it sets (by field name, only those its flag did
    not set), device-plugin flag overrides, and notes to log."""

    options: dict[str, Any] = field(default_factory=dict)
    flags: tuple[tuple[str, Any], ...] = ()
    notes: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)  # option or flag path -> variable


def read_environment(
    env: Mapping[str, str], given: Mapping[str, Any]
) -> tuple[EnvSettings, list[FieldProblem]]:
    """The settings ``env`` holds, and a problem for every variable set to a value upstream
    would refuse. ``given`` holds the agent options the command line set: those win."""
    options: dict[str, Any] = {}
    flags: dict[str, Any] = {}
    sources: dict[str, str] = {}
    problems: list[FieldProblem] = []
    for var in VARIABLES:
        text = env.get(var.name, "")
        if not text:
            continue
        try:
            value = var.parse(text)
        except ValueError as exc:
            problems.append(FieldProblem(f"{exc} (set in the environment)", var.name))
            continue
        kind, _, target = var.sets.partition(":")
        if kind == "flags":
            if target not in flags:  # the first variable of a pair wins, as in urfave/cli
                flags[target] = value
                sources[target] = var.name
            continue
        if target == "config_files":
            options[target] = (Path(value),)
        elif target in options or given.get(target) not in (None, ""):
            continue
        else:
            options[target] = value
        sources[target] = var.name
    notes = tuple(
        f"{name}={env[name]} is set but kgpu does not use it: {why}"
        for name, why in UNUSED.items()
        if env.get(name)
    )
    return EnvSettings(options, tuple(flags.items()), notes, sources), problems
