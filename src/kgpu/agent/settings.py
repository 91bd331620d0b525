"""Process-wide settings the agent derives from its options and the node's selected config.

Upstream's device plugin reads a few of its config file's ``flags`` for the whole process, not
per resource: ``failOnInitError`` (may it start without NVML), ``nvidiaDriverRoot`` /
``nvidiaDevRoot`` / ``plugin.containerDriverRoot`` (where the driver is, for CDI specs and
device specs) and ``plugin.nvidiaCTKPath`` (the hook CDI specs run). Here they are worked out
the same way: the config the node selects, its flags overridden by the environment
(:mod:`kgpu.agent.upstream`) and by the agent's own flags.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kgpu.agent.options import AgentOptions
from kgpu.config.loader import ConfigSet, select_plugin_config
from kgpu.config.plugin import DEFAULT_PLUGIN_CONFIG, DevicePluginConfig
from kgpu.errors import KgpuError
from kgpu.kubelet.driver_root import DriverRoot
from kgpu.kubelet.nvidia_cdi import AUTO_HOOK, HookOptions, NodeDriver

#: Where a pod's service account says which namespace the pod runs in.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def plugin_config(
    options: AgentOptions,
    configs: ConfigSet,
    labels: Mapping[str, str],
    name: str | None = None,
) -> DevicePluginConfig:
    """The device-plugin config in force (``name``: the one a view selected; else selected
    from ``labels`` here) with the environment's flags laid over it."""
    if name is not None and name in configs.plugin_configs:
        config = configs.plugin_configs[name].config
    else:
        entry = select_plugin_config(configs, labels, options.config_name)
        config = entry.config if entry is not None else DEFAULT_PLUGIN_CONFIG
    return config.with_flags(options.plugin_flags)


def fail_on_init_error(
    options: AgentOptions, configs: ConfigSet | None, labels: Mapping[str, str]
) -> bool:
    """``--fail-on-init-error`` / ``FAIL_ON_INIT_ERROR``, else the selected config's
    ``flags.failOnInitError``, else upstream's default: true. A config that cannot be read
    counts as not saying (the start fails on it anyway)."""
    if options.fail_on_init_error is not None:
        return options.fail_on_init_error
    if configs is None:
        return True
    try:
        value = plugin_config(options, configs, labels).flags.fail_on_init_error
    except KgpuError:
        return True
    return True if value is None else value


def driver_key(options: AgentOptions, config: DevicePluginConfig) -> tuple[object, ...]:
    """What the node's driver object depends on (a new one only when this changes)."""
    flags = config.flags
    plugin = flags.plugin
    return (
        flags.nvidia_driver_root,
        flags.nvidia_dev_root,
        plugin.container_driver_root if plugin else None,
        plugin.nvidia_ctk_path if plugin else None,
        options.cdi_disabled_hooks,
    )


def node_driver(options: AgentOptions, config: DevicePluginConfig) -> NodeDriver:
    """The driver CDI specs and device specs carry: the roots and hook path of ``config``'s
    flags (host driver root ``/`` by default; read where this process sees it), hooks left out
    per ``CDI_DISABLE_HOOKS`` (``all``: none)."""
    flags = config.flags
    plugin = flags.plugin
    root = DriverRoot.from_plugin_flags(
        flags.nvidia_driver_root,
        plugin.container_driver_root if plugin else None,
        flags.nvidia_dev_root,
    )
    disabled = options.cdi_disabled_hooks or frozenset()
    # the configured hook binary when it exists on the node, else the node's own, else none
    path = (plugin.nvidia_ctk_path if plugin else None) or AUTO_HOOK
    hooks = HookOptions(
        path=None if "all" in disabled else path,
        disabled=HookOptions().disabled | (disabled - {"all"}),
    )
    return NodeDriver(root=root, hooks=hooks)


def agent_namespace(options: AgentOptions) -> str:
    """Where the agent's namespaced objects go: ``--namespace``, else the pod's own (its
    service account's namespace file, or ``POD_NAMESPACE``), else ``default``."""
    if options.namespace:
        return options.namespace
    try:
        found = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
    except OSError:
        found = ""
    return found or os.environ.get("POD_NAMESPACE", "") or "default"
