"""Upstream config formats, loaded unchanged: device-plugin config v1, ConfigMaps of them,
mig-parted configs and GPU Operator Helm values.

Modules: ``plugin`` (the device-plugin config), ``migparted`` (mig-parted configs and the
GPU Operator's defaults), ``loader`` (files, ConfigMaps and Helm values into one
:class:`ConfigSet`; which entry a node's labels select), ``fields`` (YAML reading and the field
rules every format shares).
"""

from kgpu.config.loader import (
    MIG_CONFIG_LABEL,
    PLUGIN_CONFIG_LABEL,
    ConfigSet,
    PluginConfigEntry,
    classify,
    load_config_files,
    load_config_strings,
    select_mig_config,
    select_plugin_config,
)
from kgpu.config.migparted import MigConfig, builtin_mig_configs
from kgpu.config.plugin import (
    DEFAULT_PLUGIN_CONFIG,
    MIG_STRATEGIES,
    DevicePluginConfig,
    parse_plugin_config,
)

__all__ = [
    "DEFAULT_PLUGIN_CONFIG",
    "MIG_CONFIG_LABEL",
    "MIG_STRATEGIES",
    "PLUGIN_CONFIG_LABEL",
    "ConfigSet",
    "DevicePluginConfig",
    "MigConfig",
    "PluginConfigEntry",
    "builtin_mig_configs",
    "classify",
    "load_config_files",
    "load_config_strings",
    "parse_plugin_config",
    "select_mig_config",
    "select_plugin_config",
]
