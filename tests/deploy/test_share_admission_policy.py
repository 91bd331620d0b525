"""The chart's memory-share admission policy (issue 27), rendered by real helm, validated
against the Kubernetes schema, and evaluated with kgpu's CEL engine (kgpu.dra.cel, the library
functions Kubernetes has: quantity, cel.bind) the way the API server runs a policy: match
conditions, variables in order, validations in order, the first failing one's message. It must
refuse exactly what kgpu.dra.sharecheck refuses, with the same words."""

from __future__ import annotations

from functools import cache
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kgpu.dra.cel import compile_admission
from kgpu.dra.sharecheck import SHARED_CLASSES, admission_message, share_problems
from kgpu.dra.shares import SharePolicy, parse_share_policy

from .conftest import KUBE_VERSIONS, helm_template

Obj = dict[str, Any]


@cache
def _rendered(helm: str, version: str, *sets: str) -> list[Obj]:
    args = [a for s in sets for a in ("--set", s)]
    done = helm_template(helm, version, *args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _policy(objects: list[Obj]) -> Obj:
    (policy,) = [
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy"
        and o["metadata"]["name"].endswith("-memory-shares")
    ]
    return policy


def run(expression: str, ctx: dict[str, Any]) -> Any:
    return compile_admission(expression).run(ctx)


def admit(policy: Obj, obj: Obj, old: Obj | None = None) -> str | None:
    """None when admitted, else the message of the first validation that fails."""
    spec = policy["spec"]
    ctx: dict[str, Any] = {
        "request": {"operation": "UPDATE" if old else "CREATE"},
        "object": obj,
        "oldObject": old,
    }
    if not all(run(c["expression"], ctx) for c in spec.get("matchConditions", [])):
        return None
    variables: dict[str, Any] = {}
    for var in spec["variables"]:
        variables[var["name"]] = run(var["expression"], {**ctx, "variables": variables})
    ctx["variables"] = variables
    for check in spec["validations"]:
        if not run(check["expression"], ctx):
            return str(run(check["messageExpression"], ctx))
    return None


def _claim(requests: list[Obj], kind: str = "ResourceClaim", api: str = "v1") -> Obj:
    devices = {"devices": {"requests": requests}}
    return {
        "apiVersion": f"resource.k8s.io/{api}",
        "kind": kind,
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"spec": devices} if kind == "ResourceClaimTemplate" else devices,
    }


def _exactly(name: str, memory: str | None, cls: str = "gpu.nvidia.com") -> Obj:
    entry: Obj = {"deviceClassName": cls}
    if memory is not None:
        entry["capacity"] = {"requests": {"memory": memory}}
    return {"name": name, "exactly": entry}


def _sub(name: str, memory: str, cls: str = "gpu.nvidia.com") -> Obj:
    return {"name": name, "deviceClassName": cls, "capacity": {"requests": {"memory": memory}}}


#: (claim requests, kind, api version): every shape and outcome the two must agree on
TABLE: list[tuple[list[Obj], str, str]] = [
    ([_exactly("gpu", "20Gi")], "ResourceClaim", "v1"),
    ([_exactly("gpu", None)], "ResourceClaim", "v1"),  # no amount: the whole GPU
    ([_exactly("gpu", "512Mi")], "ResourceClaim", "v1"),
    ([_exactly("gpu", "1Gi")], "ResourceClaim", "v1"),
    ([_exactly("gpu", "0")], "ResourceClaim", "v1"),
    ([_exactly("gpu", "20.5Gi")], "ResourceClaim", "v1"),
    ([_exactly("gpu", "21474836481")], "ResourceClaim", "v1"),
    ([_exactly("gpu", "1.5000000001Gi")], "ResourceClaim", "v1"),
    ([_exactly("gpu", "1100Mi")], "ResourceClaim", "v1"),
    ([_exactly("gpu", "2.5G")], "ResourceClaim", "v1"),
    ([_exactly("gpu", "100Gi")], "ResourceClaim", "v1"),  # above any GPU: the allocator's
    ([_exactly("mig", "1Mi", "mig.nvidia.com")], "ResourceClaim", "v1"),
    ([_exactly("a", "20.5Gi"), _exactly("b", "1Mi")], "ResourceClaim", "v1"),
    ([_exactly("a", "20Gi"), _exactly("b", "3.5Gi")], "ResourceClaimTemplate", "v1"),
    ([_exactly("gpu", "100Mi")], "ResourceClaimTemplate", "v1beta2"),
    (
        [
            {
                "name": "gpu",
                "deviceClassName": "gpu.nvidia.com",
                "capacity": {"requests": {"memory": "100Mi"}},
            }
        ],
        "ResourceClaim",
        "v1beta1",
    ),
    (
        [{"name": "gpu", "firstAvailable": [_sub("big", "40Gi"), _sub("small", "10.5Gi")]}],
        "ResourceClaim",
        "v1",
    ),
    (
        [
            {
                "name": "gpu",
                "firstAvailable": [_sub("mig", "1Mi", "mig.nvidia.com"), _sub("ok", "8Gi")],
            }
        ],
        "ResourceClaimTemplate",
        "v1",
    ),
    ([], "ResourceClaim", "v1"),
]
SETTINGS: list[tuple[SharePolicy, tuple[str, ...]]] = [
    (parse_share_policy("memory"), ("consumableShares=memory",)),
    (
        parse_share_policy("memory", memory_minimum_mib=1024, memory_step_mib=512),
        (
            "consumableShares=memory",
            "shareMemoryMinimumMiB=1024",
            "shareMemoryStepMiB=512",
        ),
    ),
    (
        parse_share_policy("memory", memory_minimum_mib=2560, memory_step_mib=1536),
        (
            "consumableShares=memory",
            "shareMemoryMinimumMiB=2560",
            "shareMemoryStepMiB=1536",
        ),
    ),
]


@pytest.mark.parametrize(("policy", "sets"), SETTINGS, ids=["default", "512Mi", "2.5Gi-1.5Gi"])
def test_the_policy_refuses_exactly_what_sharecheck_refuses(
    helm: str, policy: SharePolicy, sets: tuple[str, ...]
) -> None:
    vap = _policy(_rendered(helm, KUBE_VERSIONS[-1], *sets))
    refused = 0
    for requests, kind, api in TABLE:
        obj = _claim(requests, kind, api)
        expected = admission_message(share_problems(obj, policy))
        assert admit(vap, obj) == expected, (kind, api, requests)
        refused += expected is not None
    assert refused >= 8  # the table exercises refusals, not only admissions


def test_an_update_that_keeps_the_spec_passes_one_that_changes_it_is_checked(helm: str) -> None:
    vap = _policy(_rendered(helm, KUBE_VERSIONS[-1], "consumableShares=memory"))
    bad = _claim([_exactly("gpu", "512Mi")])
    finalized = {**bad, "metadata": {**bad["metadata"], "finalizers": ["x"]}}
    assert admit(vap, finalized, old=bad) is None  # e.g. a claim made before the policy
    changed = _claim([_exactly("gpu", "2Gi")])
    assert admit(vap, bad, old=changed) is not None


def test_rendered_only_for_memory_shares_and_valid_for_every_release(helm: str) -> None:
    for mode in ("disabled", "unlimited", "4"):
        objects = _rendered(helm, KUBE_VERSIONS[-1], f"consumableShares={mode}")
        assert not [o for o in objects if o["metadata"]["name"].endswith("-memory-shares")]
    # without the DRA driver the chart refuses the value (tests/deploy/test_chart_shares.py)
    for version in KUBE_VERSIONS:
        objects = [
            o
            for o in _rendered(helm, version, "consumableShares=memory")
            if o["metadata"]["name"].endswith("-memory-shares")
        ]
        assert {o["kind"] for o in objects} == {
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        }
        for obj in objects:
            kubernetes_validate.validate(obj, f"{version}.0", strict=True)
        rules = _policy(objects)["spec"]["matchConstraints"]["resourceRules"]
        assert rules[0]["apiVersions"] == ["*"]
        assert set(rules[0]["resources"]) == {"resourceclaims", "resourceclaimtemplates"}


def test_the_policy_checks_the_classes_sharecheck_checks(helm: str) -> None:
    vap = _policy(_rendered(helm, KUBE_VERSIONS[-1], "consumableShares=memory"))
    (classes,) = [v for v in vap["spec"]["variables"] if v["name"] == "classes"]
    assert run(classes["expression"], {}) == list(SHARED_CLASSES)


def test_bad_share_values_are_refused_by_the_chart_schema(helm: str) -> None:
    done = helm_template(helm, KUBE_VERSIONS[-1], "--set", "consumableShares=memroy")
    assert done.returncode != 0 and "consumableShares" in done.stderr


def test_admission_expressions_refuse_undeclared_variables_as_the_api_server_does() -> None:
    from kgpu.dra.cel import CelCompileError

    assert (
        run("object.spec.x + variables.y", {"object": {"spec": {"x": 1}}, "variables": {"y": 2}})
        == 3
    )
    with pytest.raises(CelCompileError, match="undeclared reference to 'device'"):
        compile_admission("device.driver == 'x'")


def test_the_simulator_names_the_policy_as_the_chart_does(helm: str) -> None:
    from kgpu.sim.admission import SHARE_POLICY

    objects = _rendered(helm, KUBE_VERSIONS[-1], "consumableShares=memory")
    (binding,) = [
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicyBinding"
        and o["spec"]["policyName"] == _policy(objects)["metadata"]["name"]
    ]
    assert binding["metadata"]["name"] == binding["spec"]["policyName"] == SHARE_POLICY
