"""kgpu.dra.sharecheck: the memory requests a ``memory`` share policy refuses before the
scheduler would silently round them up, each named by field path with the sizes to ask."""

from __future__ import annotations

from typing import Any

import pytest

from kgpu.dra.classes import SELECTORS
from kgpu.dra.sharecheck import (
    ABOVE_GPU,
    BELOW_MINIMUM,
    OFF_STEP,
    SHARED_CLASSES,
    UNPARSABLE,
    admission_message,
    share_problems,
)
from kgpu.dra.shares import DISABLED_POLICY, SharePolicy, parse_share_policy

Obj = dict[str, Any]
POLICY = parse_share_policy("memory")  # 1Gi minimum, 1Gi step


def claim(*requests: Obj, kind: str = "ResourceClaim") -> Obj:
    devices = {"devices": {"requests": list(requests)}}
    spec = {"spec": devices} if kind == "ResourceClaimTemplate" else devices
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": "c", "namespace": "default"},
        "spec": spec,
    }


def exactly(name: str, memory: object, cls: str = "gpu.nvidia.com") -> Obj:
    return {
        "name": name,
        "exactly": {"deviceClassName": cls, "capacity": {"requests": {"memory": memory}}},
    }


def test_requests_on_the_grid_pass_and_nothing_is_checked_without_memory_shares() -> None:
    good = claim(exactly("a", "1Gi"), exactly("b", "20Gi"), exactly("c", "21504Mi"))
    assert share_problems(good, POLICY) == []
    bad = claim(exactly("a", "512Mi"))
    assert share_problems(bad, DISABLED_POLICY) == []
    assert share_problems(bad, parse_share_policy("unlimited")) == []


def test_below_the_minimum_names_the_path_and_the_minimum() -> None:
    (p,) = share_problems(claim(exactly("gpu", "512Mi")), POLICY)
    assert p.kind == BELOW_MINIMUM
    assert p.path == "spec.devices.requests[0].exactly.capacity.requests.memory"
    assert p.message == (
        "request gpu: memory 512Mi is below the shared GPU minimum 1Gi (the scheduler would "
        "round it up): ask 1Gi or more"
    )


@pytest.mark.parametrize(
    ("policy", "memory", "fix"),
    [
        (POLICY, "20.5Gi", "ask 20Gi or 21Gi"),
        (POLICY, "21474836481", "ask 20Gi or 21Gi"),  # 20Gi + 1 byte
        (
            SharePolicy("memory", memory_minimum_mib=1024, memory_step_mib=512),
            "1100Mi",
            "ask 1Gi or 1536Mi",
        ),
        (POLICY, "1.5000000001Gi", "ask a whole number of bytes on it"),
    ],
)
def test_off_the_step_names_the_two_nearest_sizes(
    policy: SharePolicy, memory: str, fix: str
) -> None:
    (p,) = share_problems(claim(exactly("gpu", memory)), policy)
    assert p.kind == OFF_STEP
    assert p.message.endswith(f"the scheduler would round it up): {fix}"), p.message


def test_template_v1beta1_and_first_available_shapes_are_all_read() -> None:
    template = claim(exactly("gpu", "100Mi"), kind="ResourceClaimTemplate")
    (p,) = share_problems(template, POLICY)
    assert p.path == "spec.spec.devices.requests[0].exactly.capacity.requests.memory"
    v1beta1 = claim(
        {
            "name": "gpu",
            "deviceClassName": "gpu.nvidia.com",
            "capacity": {"requests": {"memory": "100Mi"}},
        }
    )
    v1beta1["apiVersion"] = "resource.k8s.io/v1beta1"
    (p,) = share_problems(v1beta1, POLICY)
    assert p.path == "spec.devices.requests[0].capacity.requests.memory"
    first = claim(
        {
            "name": "gpu",
            "firstAvailable": [
                {
                    "name": "big",
                    "deviceClassName": "gpu.nvidia.com",
                    "capacity": {"requests": {"memory": "40Gi"}},
                },
                {
                    "name": "mig",
                    "deviceClassName": "mig.nvidia.com",
                    "capacity": {"requests": {"memory": "1Mi"}},
                },
                {
                    "name": "small",
                    "deviceClassName": "gpu.nvidia.com",
                    "capacity": {"requests": {"memory": "10.5Gi"}},
                },
            ],
        }
    )
    (p,) = share_problems(first, POLICY)
    assert p.request == "gpu/small"
    assert p.path == "spec.devices.requests[0].firstAvailable[2].capacity.requests.memory"


def test_other_classes_and_requests_without_memory_are_not_checked() -> None:
    other = claim(
        exactly("mig", "1Mi", cls="mig.nvidia.com"),
        {"name": "whole", "exactly": {"deviceClassName": "gpu.nvidia.com"}},
    )
    assert share_problems(other, POLICY) == []


def test_above_the_largest_gpu_and_unparsable_quantities() -> None:
    (p,) = share_problems(claim(exactly("gpu", "100Gi")), POLICY, largest_memory_mib=80 * 1024)
    assert p.kind == ABOVE_GPU
    assert p.message == (
        "request gpu: memory 100Gi is more than the largest shared GPU offers (80Gi): ask at "
        "most 80Gi"
    )
    assert share_problems(claim(exactly("gpu", "80Gi")), POLICY, largest_memory_mib=81920) == []
    (p,) = share_problems(claim(exactly("gpu", "20 GB")), POLICY)
    assert p.kind == UNPARSABLE
    assert "quantities must match the regular expression" in p.message


def test_admission_reports_the_first_failing_check_as_the_api_server_does() -> None:
    problems = share_problems(
        claim(exactly("a", "20.5Gi"), exactly("b", "1Mi"), exactly("c", "2Mi")), POLICY
    )
    assert [p.kind for p in problems] == [OFF_STEP, BELOW_MINIMUM, BELOW_MINIMUM]
    message = admission_message(problems)
    assert message is not None and message.startswith("request b: memory 1Mi is below")


def test_shared_classes_are_the_classes_selecting_whole_gpus() -> None:
    whole = {name for name, sel in SELECTORS.items() if "type == 'gpu'" in sel}
    assert set(SHARED_CLASSES) == whole
