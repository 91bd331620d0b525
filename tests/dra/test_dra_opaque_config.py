"""GpuConfig / MigDeviceConfig decoding: valid configs give the settings upstream documents,
malformed ones a FieldError naming the exact field."""

from __future__ import annotations

from typing import Any

import pytest

from kgpu.dra import opaque
from kgpu.errors import FieldError

P = "status.allocation.devices.config[0].opaque.parameters"


def cfg(kind: str = "GpuConfig", **sharing: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind}
    if sharing:
        out["sharing"] = sharing
    return out


def test_time_slicing_interval_defaults_and_values() -> None:
    parsed = opaque.parse_config(cfg(strategy="TimeSlicing"), P)
    assert isinstance(parsed, opaque.GpuConfig)
    plan = opaque.sharing_plan(parsed, "uid", ["GPU-a"], P)
    assert plan.settings == {"strategy": "TimeSlicing", "interval": "Default", "timeslice": 0}
    assert plan.env == () and plan.mounts == ()
    long = opaque.parse_config(
        cfg(strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"}), P
    )
    assert opaque.sharing_plan(long, "uid", ["GPU-a"], P).settings["timeslice"] == 3


def test_mps_limits_follow_upstream_normalisation() -> None:
    parsed = opaque.parse_config(
        cfg(
            strategy="MPS",
            mpsConfig={
                "defaultActiveThreadPercentage": 25,
                "defaultPinnedDeviceMemoryLimit": "2Gi",
                "defaultPerDevicePinnedMemoryLimit": {"1": "512Mi", "GPU-c": "1G"},
            },
        ),
        P,
    )
    plan = opaque.sharing_plan(parsed, "claim-1", ["GPU-a", "GPU-b", "GPU-c"], P)
    assert plan.settings["pinnedDeviceMemoryLimits"] == {
        "GPU-a": "2048M",
        "GPU-b": "512M",
        "GPU-c": "953M",  # 10^9 bytes in MiB, rounded down as upstream does
    }
    assert plan.env == (
        "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=2048M,1=512M,2=953M",
    )
    assert plan.mps_id is not None and plan.mps_id.startswith("claim-1-")
    assert len(plan.mps_id) == len("claim-1-") + 5


def test_mig_device_config_accepts_mps_only_fields() -> None:
    parsed = opaque.parse_config(
        cfg("MigDeviceConfig", strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 50}),
        P,
    )
    assert isinstance(parsed, opaque.MigDeviceConfig)
    assert parsed.sharing is not None and parsed.sharing.mps is not None
    assert parsed.sharing.mps.default_active_thread_percentage == 50


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ("not a map", "", "must be an object"),
        ({"kind": "GpuConfig"}, ".apiVersion", "resource.nvidia.com/v1beta1"),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig"},
            ".kind",
            "unknown kind",
        ),
        ({**cfg(strategy="MPS"), "shraing": {}}, ".shraing", "unknown field"),
        (cfg(), "", ""),  # no sharing at all is valid
        (cfg(strategy="Spatial"), ".sharing.strategy", "unknown GPU sharing strategy"),
        (cfg(strategy="Fabric"), ".sharing.strategy", "not enabled"),
        (cfg(timeSlicingConfig={}), ".sharing.strategy", "required"),
        (
            cfg(strategy="TimeSlicing", timeSlicingConfig={"interval": "VeryLong"}),
            ".sharing.timeSlicingConfig.interval",
            "Default, Short, Medium, Long",
        ),
        (
            cfg(strategy="TimeSlicing", mpsConfig={}),
            ".sharing.mpsConfig",
            "cannot be used with the 'TimeSlicing' strategy",
        ),
        (
            cfg(strategy="MPS", timeSlicingConfig={"interval": "Long"}),
            ".sharing.timeSlicingConfig",
            "cannot be used with the 'MPS' strategy",
        ),
        (
            cfg(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": -1}),
            ".sharing.mpsConfig.defaultActiveThreadPercentage",
            "must not be negative",
        ),
        (
            cfg(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": "50"}),
            ".sharing.mpsConfig.defaultActiveThreadPercentage",
            "integer",
        ),
        (
            cfg(strategy="MPS", mpsConfig={"defaultPinnedDeviceMemoryLimit": "lots"}),
            ".sharing.mpsConfig.defaultPinnedDeviceMemoryLimit",
            "quantity",
        ),
        (
            cfg(strategy="MPS", mpsConfig={"defaultPinnedDeviceMemoryLimit": "100Ki"}),
            ".sharing.mpsConfig.defaultPinnedDeviceMemoryLimit",
            "below 1Mi",
        ),
        (
            cfg(strategy="MPS", mpsConfig={"defaultPerDevicePinnedMemoryLimit": {"0": "x"}}),
            ".sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit.0",
            "quantity",
        ),
        (
            cfg(strategy="MPS", mpsConfig={"activeThreads": 10}),
            ".sharing.mpsConfig.activeThreads",
            "unknown field",
        ),
        (
            cfg("MigDeviceConfig", strategy="TimeSlicing", timeSlicingConfig={}),
            ".sharing.timeSlicingConfig",
            "unknown field",
        ),
    ],
)
def test_malformed_configs_name_the_field(params: Any, field: str, words: str) -> None:
    if not words:
        opaque.parse_config(params, P)
        return
    with pytest.raises(FieldError) as info:
        opaque.parse_config(params, P)
    problem = info.value.problems[0]
    assert problem.path == P + field
    assert words in problem.message


def test_per_device_limit_for_a_device_outside_the_claim_is_rejected() -> None:
    parsed = opaque.parse_config(
        cfg(strategy="MPS", mpsConfig={"defaultPerDevicePinnedMemoryLimit": {"3": "1Gi"}}), P
    )
    with pytest.raises(FieldError) as info:
        opaque.sharing_plan(parsed, "uid", ["GPU-a", "GPU-b"], P)
    assert info.value.problems[0].path == (
        P + ".sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit.3"
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [("1Gi", 2**30), ("500M", 500_000_000), (4096, 4096), ("1.5Ki", 1536), ("2e3", 2000)],
)
def test_quantities(text: Any, value: int) -> None:
    assert opaque.parse_quantity(text, "x") == value
