"""The device-plugin config v1: what loads, what upstream rejects, and how errors read."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from kgpu.config.plugin import DeviceSelection, normalize_resource_name, parse_plugin_config
from kgpu.errors import FieldError


def _parse(text: str) -> Any:
    return parse_plugin_config(yaml.safe_load(text), file="time-slicing.yaml", entry="any")


def _error(text: str) -> str:
    with pytest.raises(FieldError) as info:
        _parse(text)
    return str(info.value)


def test_minimal_time_slicing_loads_with_upstream_defaults() -> None:
    parsed = _parse(
        """
        sharing:
          timeSlicing:
            resources:
            - name: gpu
              replicas: 4
        """.replace("        ", "", 1)
    )
    config = parsed.config
    entry = config.sharing.time_slicing.resources[0]  # type: ignore[union-attr,index]
    assert entry.name == "nvidia.com/gpu"  # prefix added as upstream's NewResourceName does
    assert entry.devices == DeviceSelection()  # absent devices means all
    assert config.version == "v1"
    assert config.mig_strategy == "none"
    assert config.device_id_strategy == "uuid"
    assert config.device_list_strategy == ("envvar",)
    assert parsed.warnings == ()


def test_replicas_below_two_is_rejected_with_file_entry_and_path() -> None:
    message = _error("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}")
    assert message == (
        "time-slicing.yaml: any: sharing.timeSlicing.resources[0].replicas: must be >= 2"
    )


def test_replicas_must_be_an_integer_not_a_string() -> None:
    message = _error("sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: '4'}]}}")
    assert "sharing.mps.resources[0].replicas: must be an integer" in message


def test_missing_replicas_and_missing_resources_are_reported() -> None:
    assert "resources[0].replicas: is required" in _error(
        "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu}]}}"
    )
    assert "sharing.timeSlicing: no resources specified" in _error("sharing: {timeSlicing: {}}")


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        ("all", DeviceSelection()),
        ("2", DeviceSelection(all=False, count=2)),
        ('[0, "1", "0:3", "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763"]', None),
    ],
)
def test_devices_accepts_all_count_and_lists(
    devices: str, expected: DeviceSelection | None
) -> None:
    parsed = _parse(
        f"sharing: {{timeSlicing: {{resources: [{{name: gpu, replicas: 2, devices: {devices}}}]}}}}"
    )
    got = parsed.config.sharing.time_slicing.resources[0].devices  # type: ignore[union-attr,index]
    if expected is None:
        assert got.refs == ("0", "1", "0:3", "GPU-b1028956-cfa2-0990-bf4a-5da9abb51763")
    else:
        assert got == expected


@pytest.mark.parametrize(
    ("devices", "needle"),
    [
        ("some", "only valid string input is 'all'"),
        ("0", "a count of devices must be > 0"),
        ('["GPU-not-a-uuid"]', "unsupported device 'GPU-not-a-uuid'"),
        ("{a: 1}", "unrecognized type for devices spec"),
    ],
)
def test_bad_devices_name_what_is_allowed(devices: str, needle: str) -> None:
    message = _error(
        f"sharing: {{timeSlicing: {{resources: [{{name: gpu, replicas: 2, devices: {devices}}}]}}}}"
    )
    assert "sharing.timeSlicing.resources[0].devices" in message
    assert needle in message


def test_unknown_fields_are_warnings_naming_the_field() -> None:
    parsed = _parse(
        "version: v1\n"
        "flags: {migStrategy: none, someNewFlag: true}\n"
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 4, replica: 9}]}}"
    )
    assert any("flags.someNewFlag: unknown field" in w for w in parsed.warnings)
    assert any(
        "sharing.timeSlicing.resources[0].replica: unknown field" in w for w in parsed.warnings
    )


def test_bad_enums_and_versions() -> None:
    assert "flags.migStrategy: must be one of" in _error("flags: {migStrategy: double}")
    assert "unknown version: v2" in _error("version: v2")
    assert "flags.plugin.deviceListStrategy" in _error(
        "flags: {plugin: {deviceListStrategy: [envvar, carrier-pigeon]}}"
    )
    assert "flags.plugin.deviceIDStrategy" in _error("flags: {plugin: {deviceIDStrategy: serial}}")


def test_resource_names_follow_kubernetes_rules() -> None:
    assert "63 characters or less" in _error(
        "sharing: {timeSlicing: {resources: [{name: gpu, rename: " + "x" * 60 + ", replicas: 2}]}}"
    )
    assert "incorrect format for resource name" in _error(
        "sharing: {timeSlicing: {resources: [{name: GPU_Big, replicas: 2}]}}"
    )


def test_rename_by_default_gives_shared_suffix() -> None:
    parsed = _parse(
        "sharing: {timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 3}]}}"
    )
    ts = parsed.config.sharing.time_slicing
    assert ts is not None
    assert ts.advertised_name(ts.resources[0]) == "nvidia.com/gpu.shared"  # type: ignore[index]


def test_a_resource_name_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(ValueError, match="DNS subdomain"):
        normalize_resource_name("gpu\n")
