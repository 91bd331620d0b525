"""resource.k8s.io objects convert between kgpu's internal v1 and the versions Kubernetes 1.32 to
1.35 serve, and every converted object is what that release's official schema accepts."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kgpu.computedomain.api import ComputeDomain, ComputeDomainSpec
from kgpu.computedomain.objects import channel_claim_template, daemon_claim_template
from kgpu.computedomain.slices import node_slice
from kgpu.dra.classes import device_classes
from kgpu.dra.slices import resource_slices
from kgpu.dra.versions import UnsupportedVersion, newest, to_internal, to_version
from kgpu.hardware.profiles import load_machine

CASES = yaml.safe_load((Path(__file__).parent / "data" / "versions.yaml").read_text())
#: What each release serves of resource.k8s.io (with DRA enabled).
SERVED = {
    "1.32": ("v1beta1",),
    "1.33": ("v1beta1", "v1beta2"),
    "1.34": ("v1beta1", "v1beta2", "v1"),
    "1.35": ("v1beta1", "v1beta2", "v1"),
}


def _valid(obj: dict[str, Any], release: str) -> None:
    kubernetes_validate.validate(obj, f"{release}.0", strict=True)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case_converts_both_ways(case: dict[str, Any]) -> None:
    v1, beta1 = case["v1"], case["v1beta1"]
    before = copy.deepcopy(v1)
    assert to_version(v1, "v1beta1") == beta1
    assert to_internal(beta1) == v1
    assert v1 == before  # the input is never changed
    beta2 = to_version(v1, "v1beta2")
    assert beta2 == {**v1, "apiVersion": "resource.k8s.io/v1beta2"}
    assert to_internal(beta2) == v1
    assert to_version(v1, "v1") == v1


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case_forms_match_the_official_schemas(case: dict[str, Any]) -> None:
    for release, versions in SERVED.items():
        if release < case["since"]:
            continue
        for version in versions:
            _valid(to_version(case["v1"], version), release)


def _kgpu_objects() -> list[dict[str, Any]]:
    gb200 = load_machine("gb200", hostname="n1", clique="c0ffee00-0000-4000-8000-000000000001.3")
    domain = ComputeDomain(
        name="d",
        namespace="ml",
        uid="5a3c1a2e-0000-4000-8000-000000000009",
        spec=ComputeDomainSpec(num_nodes=2, channel_template="d-channel"),
    )
    return [
        *resource_slices(gb200, "n1"),
        node_slice("n1"),
        *device_classes(),
        channel_claim_template(domain),
        daemon_claim_template(domain),
    ]


@pytest.mark.parametrize("release", sorted(SERVED))
def test_what_kgpu_writes_is_valid_in_every_version_a_release_serves(release: str) -> None:
    for obj in _kgpu_objects():
        for version in SERVED[release]:
            served = to_version(obj, version)
            _valid(served, release)
            expected = obj
            if version != "v1" and obj["kind"] == "DeviceClass":
                # extendedResourceName came with 1.34: releases without v1 do not know it
                expected = {**obj, "spec": {**obj["spec"]}}
                expected["spec"].pop("extendedResourceName", None)
                assert "extendedResourceName" not in served["spec"]
            assert to_internal(served) == expected


def test_a_patch_converts_when_the_kind_is_named() -> None:
    patch = {"spec": {"devices": [{"name": "gpu-0", "attributes": {"index": {"int": 0}}}]}}
    assert to_version(patch, "v1beta1", kind="ResourceSlice") == {
        "spec": {"devices": [{"name": "gpu-0", "basic": {"attributes": {"index": {"int": 0}}}}]}
    }
    status = {"status": {"allocation": None}}
    assert to_version(status, "v1beta1", kind="ResourceClaim") == status


def test_versions_kgpu_does_not_speak_are_refused() -> None:
    with pytest.raises(UnsupportedVersion, match="v1alpha3"):
        to_internal({"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceClass"})
    with pytest.raises(UnsupportedVersion):
        to_version({"kind": "DeviceClass"}, "v2")
    assert newest(["v1alpha3", "v1beta1", "v1beta2"]) == "v1beta2"
    assert newest(["v1alpha3"]) is None
