"""Allocator behaviour beyond upstream's table: DeviceTaintRules, feature gates, API versions,
extended resources, prioritized-list scores, CEL limits, the 32-result limit, and the
unsatisfiable explanation."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest

from kgpu.cli.allocate import run
from kgpu.dra.allocator import AllocationError, allocate, build, prioritized_list_score
from kgpu.dra.cel import MAX_EXPRESSION_LENGTH, CelCompileError, compile_selector
from kgpu.dra.extended import class_for_resources, extended_resource_claim
from kgpu.dra.features import DEFAULT, FeatureGateError, Features
from kgpu.dra.versions import VersionError, convert, from_v1, to_v1

API = "resource.k8s.io/v1"
NODE = {"name": "n1", "labels": {"zone": "a"}}


def cls(name: str, driver: str = "gpu.example.com", **spec: Any) -> dict:
    return {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}], **spec},
    }


def rslice(devices: list[dict], name: str = "s1", node: str = "n1", **spec: Any) -> dict:
    body: dict[str, Any] = {
        "driver": "gpu.example.com",
        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
        "devices": devices,
    }
    if node:
        body["nodeName"] = node
    body.update(spec)
    return {"apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": name}, "spec": body}


def claim(name: str, *requests: dict) -> dict:
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": list(requests)}},
    }


def exact(name: str, count: int = 1, cls_name: str = "gpu", **extra: Any) -> dict:
    return {"name": name, "exactly": {"deviceClassName": cls_name, "count": count, **extra}}


GPUS = [{"name": f"gpu-{i}"} for i in range(4)]


def devices_of(result: list[dict] | None) -> list[list[str]]:
    assert result is not None
    return [[r["device"] for r in res["devices"]["results"]] for res in result]


# -- DeviceTaintRules --------------------------------------------------------------------------


def rule(effect: str, device: str | None = None) -> dict:
    sel: dict[str, str] = {"driver": "gpu.example.com"}
    if device:
        sel["device"] = device
    return {
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"r-{effect}"},
        "spec": {"deviceSelector": sel, "taint": {"key": "maintenance", "effect": effect}},
    }


def test_taint_rules_are_merged_into_slices_before_allocation() -> None:
    args = {"classes": [cls("gpu")], "slices": [rslice(GPUS[:2])]}
    c = claim("c", exact("g"))
    tainted = allocate(NODE, [c], **args, taint_rules=[rule("NoSchedule", "gpu-0")])
    assert devices_of(tainted) == [["gpu-1"]]
    everything = allocate(NODE, [c], **args, taint_rules=[rule("NoExecute")])
    assert everything is None
    # None and effects this version does not know never block
    for effect in ("None", "SomeFutureEffect"):
        assert devices_of(allocate(NODE, [c], **args, taint_rules=[rule(effect)])) == [["gpu-0"]]
    # a toleration lets the request use the tainted device, and the result records it
    tolerating = claim("c", exact("g", tolerations=[{"key": "maintenance", "operator": "Exists"}]))
    got = allocate(NODE, [tolerating], **args, taint_rules=[rule("NoExecute")])
    assert got is not None
    assert got[0]["devices"]["results"][0]["tolerations"] == [
        {"key": "maintenance", "operator": "Exists"}
    ]
    # with the gate off the rules are not applied; with DRADeviceTaints off taints are ignored
    off = DEFAULT.with_gates({"DRADeviceTaintRules": False})
    assert allocate(NODE, [c], **args, taint_rules=[rule("NoExecute")], features=off)
    slices = [rslice([{"name": "gpu-0", "taints": [{"key": "k", "effect": "NoSchedule"}]}])]
    assert allocate(NODE, [c], classes=[cls("gpu")], slices=slices) is None
    no_taints = DEFAULT.with_gates({"DRADeviceTaints": False})
    assert allocate(NODE, [c], classes=[cls("gpu")], slices=slices, features=no_taints)


def test_taint_rules_leave_the_callers_slices_alone() -> None:
    slices = [rslice(GPUS[:1])]
    before = copy.deepcopy(slices)
    allocate(NODE, [claim("c", exact("g"))], classes=[cls("gpu")], slices=slices,
             taint_rules=[rule("NoSchedule")])  # fmt: skip
    assert slices == before


# -- feature gates -----------------------------------------------------------------------------


def test_feature_gates_parse_like_kube_scheduler_flags() -> None:
    f = DEFAULT.parse("DRAPrioritizedList=false, DRAConsumableCapacity=true")
    assert not f.prioritized_list and f.consumable_capacity
    assert DEFAULT.gates() == {name: True for name in DEFAULT.gates()}
    for bad, words in (
        ("DRAPrioritizedList", "expected Name=true or Name=false"),
        ("DRAPrioritizedList=maybe", "expected Name=true or Name=false"),
        ("DRANoSuchThing=true", "unknown feature gate 'DRANoSuchThing'; known: DRAAdminAccess"),
    ):
        with pytest.raises(FeatureGateError, match=words):
            DEFAULT.parse(bad)
    assert Features.enabled(["DRAAdminAccess"]).gates()["DRAAdminAccess"]
    assert not Features.enabled(["DRAAdminAccess"]).binding


def test_slices_using_a_disabled_feature_are_ignored() -> None:
    per_device = rslice([{"name": "nic-0", "nodeName": "n1"}], node="", perDeviceNodeSelection=True)
    c = claim("c", exact("g"))
    assert allocate(NODE, [c], classes=[cls("gpu")], slices=[per_device])
    off = DEFAULT.with_gates({"DRAPartitionableDevices": False})
    assert allocate(NODE, [c], classes=[cls("gpu")], slices=[per_device], features=off) is None
    first = claim("c", {"name": "g", "firstAvailable": [{"name": "a", "deviceClassName": "gpu"}]})
    with pytest.raises(AllocationError, match="the DRAPrioritizedList feature is disabled"):
        allocate(NODE, [first], classes=[cls("gpu")], slices=[rslice(GPUS)],
                 features=DEFAULT.with_gates({"DRAPrioritizedList": False}))  # fmt: skip


# -- API versions ------------------------------------------------------------------------------


V1BETA1_SLICE = {
    "apiVersion": "resource.k8s.io/v1beta1",
    "kind": "ResourceSlice",
    "metadata": {"name": "s1"},
    "spec": {
        "driver": "gpu.example.com",
        "nodeName": "n1",
        "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
        "devices": [
            {"name": "gpu-0", "basic": {"attributes": {"model": {"string": "a"}}}},
            {"name": "gpu-1", "basic": {"attributes": {"model": {"string": "b"}}}},
        ],
    },
}
V1BETA1_CLAIM = {
    "apiVersion": "resource.k8s.io/v1beta1",
    "kind": "ResourceClaim",
    "metadata": {"name": "c", "namespace": "ml"},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "g",
                    "deviceClassName": "gpu",
                    "selectors": [
                        {"cel": {"expression": 'device.attributes["gpu.example.com"].model == "b"'}}
                    ],
                }
            ]
        }
    },
}


def test_objects_of_every_served_version_allocate_alike() -> None:
    v1_slice, v1_claim = to_v1(V1BETA1_SLICE), to_v1(V1BETA1_CLAIM)
    assert v1_slice["apiVersion"] == API
    assert v1_slice["spec"]["devices"][1] == {
        "name": "gpu-1",
        "attributes": {"model": {"string": "b"}},
    }
    assert v1_claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu"
    for version in ("v1", "v1beta2", "v1beta1"):
        s, c = convert(V1BETA1_SLICE, version), convert(V1BETA1_CLAIM, version)
        assert s["apiVersion"] == f"resource.k8s.io/{version}"
        # the round trip through v1 loses nothing
        assert convert(s, "v1beta1") == V1BETA1_SLICE and convert(c, "v1beta1") == V1BETA1_CLAIM
        got = allocate(NODE, [to_v1(c)], classes=[cls("gpu")], slices=[to_v1(s)])
        assert devices_of(got) == [["gpu-1"]]
    assert from_v1(v1_claim, "v1beta2")["spec"] == v1_claim["spec"]
    with pytest.raises(VersionError, match=r"kgpu reads resource\.k8s\.io/v1, "):
        to_v1({**V1BETA1_SLICE, "apiVersion": "resource.k8s.io/v1alpha3"})


# -- extended resources ------------------------------------------------------------------------


def test_extended_resource_is_satisfied_through_the_device_class() -> None:
    older = cls("gpu-old", extendedResourceName="nvidia.com/gpu")
    older["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    newer = cls("gpu", extendedResourceName="nvidia.com/gpu")
    newer["metadata"]["creationTimestamp"] = "2025-06-01T00:00:00Z"
    mapping = class_for_resources([older, newer])
    assert mapping["nvidia.com/gpu"]["metadata"]["name"] == "gpu"  # the newest class wins
    assert set(mapping) == {
        "nvidia.com/gpu",
        "deviceclass.resource.kubernetes.io/gpu",
        "deviceclass.resource.kubernetes.io/gpu-old",
    }
    pod = {
        "metadata": {"name": "train", "namespace": "ml", "uid": "u1"},
        "spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "2"}}},
                {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            ]
        },
    }
    # a node whose device plugin advertises the resource needs no claim
    assert extended_resource_claim(pod, mapping, {"nvidia.com/gpu": "8"}) is None
    c = extended_resource_claim(pod, mapping, {"cpu": "64"})
    assert c is not None
    assert c["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-1",  # container 0, 2nd of its sorted resource names
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2},
        }
    ]
    got = allocate(NODE, [c], classes=[older, newer], slices=[rslice(GPUS)])
    assert devices_of(got) == [["gpu-0", "gpu-1"]]


# -- prioritized-list scoring ------------------------------------------------------------------


def test_prioritized_list_score_prefers_the_first_alternative() -> None:
    slices = [rslice([{"name": "gpu-0"}]), rslice([{"name": "x-0"}], name="s2", node="n2")]
    c = claim(
        "c",
        {
            "name": "g",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "gpu", "count": 2},
                {"name": "one", "deviceClassName": "gpu"},
            ],
        },
    )
    got = allocate(NODE, [c], classes=[cls("gpu")], slices=slices)
    assert got is not None and got[0]["devices"]["results"][0]["request"] == "g/one"
    assert prioritized_list_score([c], got) == 8 - 1
    two = allocate(NODE, [c], classes=[cls("gpu")], slices=[rslice(GPUS)])
    assert two is not None and prioritized_list_score([c], two) == 8


# -- limits ------------------------------------------------------------------------------------


def test_selectors_over_the_api_servers_limits_are_refused_before_compiling() -> None:
    long = "device.driver == 'x'" + " || device.driver == 'y'" * 2000  # ~40,000 characters
    with pytest.raises(CelCompileError, match=f"at most {MAX_EXPRESSION_LENGTH}"):
        compile_selector(long)
    chain = "device" + ".a" * 20_000 + " == 1"  # crashed the CEL library's parser
    with pytest.raises(CelCompileError, match="CELSelectorExpressionMaxLength"):
        compile_selector(chain)
    nested = "device.attributes.all(a, " * 4 + "true" + ")" * 4
    with pytest.raises(CelCompileError, match="exceeds the budget"):
        compile_selector(nested)
    with pytest.raises(CelCompileError, match="Syntax error"):
        compile_selector("size(" * 200 + '""' + ")" * 200)  # the library panics on some
    # through kgpu allocate: an error naming the claim, not a crash
    c = claim("c", exact("g", selectors=[{"cel": {"expression": long}}]))
    answer = run({"node": NODE, "classes": [cls("gpu")], "slices": [rslice(GPUS)], "claims": [c]})
    assert answer["allocations"] is None
    assert answer["error"].startswith("claim ml/c: selector #0: CEL compile error: expression is")


def test_more_than_32_devices_is_an_error_and_over_the_limit_fails_fast() -> None:
    many = [{"name": f"gpu-{i}"} for i in range(64)]
    with pytest.raises(AllocationError, match="number of requested devices 33 exceeds the claim"):
        allocate(NODE, [claim("c", exact("g", count=33))], classes=[cls("gpu")],
                 slices=[rslice(many)])  # fmt: skip


def test_a_prioritized_list_over_the_limit_fails_fast() -> None:
    many = [{"name": f"gpu-{i}", "attributes": {"n": {"int": i}}} for i in range(64)]
    odd = 'device.attributes["gpu.example.com"].n % 2 == 1'
    c = claim(
        "c",
        exact("a", count=20),
        {
            "name": "b",
            "firstAvailable": [
                {"name": "more", "deviceClassName": "gpu", "count": 13},  # 33: over the limit
                {"name": "odd", "deviceClassName": "gpu", "count": 12,
                 "selectors": [{"cel": {"expression": odd}}]},
            ],
        },
    )  # fmt: skip
    t0 = time.perf_counter()
    got = allocate(NODE, [c], classes=[cls("gpu")], slices=[rslice(many)])
    assert time.perf_counter() - t0 < 2  # upstream searched for over 30 s before 1.34
    assert got is not None
    assert {r["request"] for r in got[0]["devices"]["results"]} == {"a", "b/odd"}


# -- unsatisfiable explanations ----------------------------------------------------------------


def test_unsatisfiable_says_why_per_claim_and_request() -> None:
    held = claim("held", exact("x"))
    held["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "x", "driver": "gpu.example.com", "pool": "n1", "device": d}
                    for d in ("gpu-0", "gpu-1", "gpu-2")
                ]
            }
        }
    }
    data = {
        "node": NODE,
        "classes": [cls("gpu"), cls("nic", driver="nic.example.com")],
        "slices": [rslice(GPUS)],
        "allocated": [held],
        "claims": [claim("c", exact("gpus", count=2), exact("net", cls_name="nic"))],
    }
    answer = run(data)
    assert answer["allocations"] is None and answer["error"] is None
    assert answer["unsatisfiable"] == (
        "cannot allocate all claims: "
        "claim ml/c, request gpus: wants 2 devices of class gpu; 4 on n1 match, 1 of them free; "
        "claim ml/c, request net: wants 1 device of class nic, but no device on n1 matches its "
        "class and selectors"
    )
    data["claims"] = [claim("c", exact("a")), claim("d", exact("b"))]
    data["allocated"] = [held]
    answer = run(data)
    assert answer["unsatisfiable"].endswith(
        "every request of claims ml/c, ml/d fits on its own on n1, but not all together "
        "(devices, counters or capacity wanted twice, or a constraint)"
    )


def test_build_reuses_one_snapshot_for_many_nodes() -> None:
    slices = [rslice(GPUS[:2], name=f"s{n}", node=n) for n in ("n1", "n2")]
    alloc = build(classes=[cls("gpu")], slices=slices)
    c = claim("c", exact("g", count=2))
    for n in ("n1", "n2"):
        got = alloc.allocate({"name": n}, [c])
        assert got is not None
        assert got[0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [n]
    assert alloc.free_devices({"name": "n1"}) == 2
    taken = {**c, "status": {"allocation": got[0]}}
    changed = alloc.claim_changed(None, taken)
    assert changed == {("gpu.example.com", "n2", "gpu-0"), ("gpu.example.com", "n2", "gpu-1")}
    assert alloc.free_devices({"name": "n2"}) == 0 and alloc.allocate({"name": "n2"}, [c]) is None
    alloc.claim_changed(taken, None)
    assert alloc.free_devices({"name": "n2"}) == 2
