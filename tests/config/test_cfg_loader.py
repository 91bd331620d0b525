"""Loading files as users have them: ConfigMaps, Helm values, mig-parted, mixes; selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgpu.config import (
    builtin_mig_configs,
    load_config_files,
    load_config_strings,
    select_mig_config,
    select_plugin_config,
)
from kgpu.errors import FieldError


def test_every_acceptance_yaml_loads_unchanged(acceptance: Path) -> None:
    files = sorted(acceptance.rglob("*.yaml"))
    assert len(files) >= 10
    for path in files:
        configs = load_config_files([path])
        assert configs.kinds, path


def test_configmap_entries_become_named_plugin_configs(acceptance: Path) -> None:
    configs = load_config_files([acceptance / "seed-guides/time-slicing-config-t4-a100.yaml"])
    assert sorted(configs.plugin_configs) == ["a100-40gb", "tesla-t4"]
    assert configs.plugin_configs["tesla-t4"].source.endswith("time-slicing-config-t4-a100.yaml")


def test_operator_values_carry_strategy_default_and_mig_configs(acceptance: Path) -> None:
    configs = load_config_files([acceptance / "seed-guides/gpu-operator-values.yaml"])
    assert configs.mig_strategy == "mixed"
    assert configs.default_mig_config == "all-disabled"
    assert set(configs.mig_configs) == {"all-disabled", "p4de-half-balanced"}
    half = configs.mig_configs["p4de-half-balanced"]
    assert half.entries[0].devices == [0, 1, 2, 3]
    assert half.entries[0].mig_devices == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


def test_selection_label_then_default_then_only_entry(acceptance: Path) -> None:
    configs = load_config_files([acceptance / "vks-samples/multiple-gpu-sharing.yaml"])
    by_label = select_plugin_config(configs, {"nvidia.com/device-plugin.config": "rtx-4090"})
    assert by_label is not None and by_label.name == "rtx-4090"
    by_default = select_plugin_config(configs, {}, "rtx-2080ti")
    assert by_default is not None and by_default.name == "rtx-2080ti"
    # The label wins over the default, as the device plugin's config manager does.
    both = select_plugin_config(
        configs, {"nvidia.com/device-plugin.config": "rtx-4090"}, "rtx-2080ti"
    )
    assert both is not None and both.name == "rtx-4090"
    with pytest.raises(FieldError, match="choices: rtx-2080ti, rtx-4090"):
        select_plugin_config(configs, {})
    with pytest.raises(FieldError, match="matches no device-plugin config entry"):
        select_plugin_config(configs, {"nvidia.com/device-plugin.config": "h100"})
    only = load_config_files([acceptance / "seed-guides/gpu-sharing-config-any.yaml"])
    chosen = select_plugin_config(only, {})
    assert chosen is not None and chosen.name == "any"
    assert select_plugin_config(load_config_files([]), {}) is None


def test_builtin_operator_mig_configs_are_available_without_files() -> None:
    builtin = builtin_mig_configs()
    for name in ("all-disabled", "all-enabled", "all-balanced", "all-1g.10gb", "all-3g.20gb"):
        assert name in builtin
    chosen = select_mig_config(load_config_files([]), {"nvidia.com/mig.config": "all-balanced"})
    assert chosen is not None and len(chosen.entries) >= 6
    with pytest.raises(FieldError, match="names no mig-parted config"):
        select_mig_config(load_config_files([]), {"nvidia.com/mig.config": "all-7g.999gb"})


def test_multi_document_mix_and_bad_documents() -> None:
    configs = load_config_strings(
        {
            "mix.yaml": "version: v1\n"
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}\n"
            "---\nversion: v1\nmig-configs: {half: [{devices: all, mig-enabled: false}]}\n"
        }
    )
    assert list(configs.plugin_configs) == ["mix-0"]
    assert "half" in configs.mig_configs
    with pytest.raises(FieldError, match="not a device-plugin config"):
        load_config_strings({"x.yaml": "hello: world\n"})
    with pytest.raises(FieldError, match=r"x\.yaml: line 2, column 1: not valid YAML"):
        load_config_strings({"x.yaml": "a: [\n"})


def test_mig_parted_rules() -> None:
    with pytest.raises(FieldError, match="mig-devices is set but mig-enabled is false"):
        load_config_strings(
            {
                "m.yaml": "version: v1\nmig-configs: {x: [{devices: all, mig-enabled: false, "
                "mig-devices: {1g.10gb: 1}}]}\n"
            }
        )
    with pytest.raises(FieldError, match=r"mig-configs\.x\[0\]\.devices"):
        load_config_strings(
            {"m.yaml": "version: v1\nmig-configs: {x: [{devices: some, mig-enabled: true}]}\n"}
        )
    with pytest.raises(FieldError, match="not a MIG profile name"):
        load_config_strings(
            {
                "m.yaml": "version: v1\nmig-configs: {x: [{devices: all, mig-enabled: true, "
                "mig-devices: {big: 1}}]}\n"
            }
        )


def test_configmap_entry_errors_name_the_entry() -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n"
        "  any: |\n    version: v1\n    sharing:\n      timeSlicing:\n        resources:\n"
        "        - name: nvidia.com/gpu\n          replicas: 0\n"
    )
    with pytest.raises(FieldError) as info:
        load_config_strings({"time-slicing.yaml": text})
    assert str(info.value) == (
        "time-slicing.yaml: any: sharing.timeSlicing.resources[0].replicas: must be >= 2"
    )


@pytest.mark.parametrize("section", ["migManager", "devicePlugin"])
def test_helm_values_config_data_that_is_not_a_mapping_is_an_error(
    tmp_path: Path, section: str
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(f"{section}:\n  config:\n    data: oops\n")
    with pytest.raises(FieldError, match=f"{section}.config.data: must be a mapping"):
        load_config_files([values])
