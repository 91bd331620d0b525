"""The chart's ValidatingAdmissionPolicies for node-scoped writes (issue 28), evaluated the way
the API server does (matchConditions, then variables in order, then validations) with the CEL
library kgpu's DRA engine runs: an agent may write its own Node's kgpu keys and its own
ResourceSlices, nothing else; every write the agent's code makes passes. The policies' schema
is checked by test_chart.py (kubernetes-validate, strict) with every other rendered object."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import cel
import pytest

from kgpu.computedomain.api import node_label
from kgpu.drivers.computedomain import CHANNELS_ANNOTATION
from kgpu.drivers.migmanager import MIG_STATE_LABEL

from .conftest import KUBE_VERSIONS, NAMESPACE, Rendered

Obj = dict[str, Any]
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"


def _policy(rendered: Rendered, suffix: str) -> Obj:
    (policy,) = [
        p
        for p in rendered.of_kind("ValidatingAdmissionPolicy")
        if p["metadata"]["name"].endswith(suffix)
    ]
    return policy


def _agent_user(rendered: Rendered) -> str:
    (account,) = [
        a
        for a in rendered.of_kind("ServiceAccount")
        if a["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"
    ]
    return f"system:serviceaccount:{NAMESPACE}:{account['metadata']['name']}"


def admit(policy: Obj, request: Obj) -> list[str]:
    """The messages of the validations ``request`` fails ([]: admitted or not matched)."""
    ctx: dict[str, Any] = {
        "request": request,
        "object": request.get("object"),
        "oldObject": request.get("oldObject"),
    }
    spec = policy["spec"]
    if not all(cel.evaluate(c["expression"], ctx) for c in spec.get("matchConditions", [])):
        return []
    variables: dict[str, Any] = {}
    for var in spec.get("variables", []):
        variables[var["name"]] = cel.evaluate(var["expression"], {**ctx, "variables": variables})
    ctx["variables"] = variables
    failed = []
    for check in spec["validations"]:
        if not cel.evaluate(check["expression"], ctx):
            failed.append(
                cel.evaluate(check["messageExpression"], ctx)
                if "messageExpression" in check
                else check["message"]
            )
    return failed


def _node(name: str, labels: Mapping[str, str] = {}, annotations: Mapping[str, str] = {}) -> Obj:
    meta: Obj = {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": {"podCIDR": "10.0.0.0/24"},
    }


def _merge(obj: Obj, patch: Mapping[str, Any]) -> Obj:
    """A JSON merge patch applied, as the API server turns a PATCH into an UPDATE."""
    out = json.loads(json.dumps(obj))
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


@pytest.fixture(scope="module")
def policies(render: Callable[[str, str], Rendered]) -> tuple[Obj, Obj, str]:
    rendered = render(KUBE_VERSIONS[-1], "default")
    return (
        _policy(rendered, "-own-node"),
        _policy(rendered, "-own-resourceslices"),
        _agent_user(rendered),
    )


def _request(user: str, operation: str, obj: Obj | None, old: Obj | None, node: str | None) -> Obj:
    extra = {NODE_NAME_KEY: [node]} if node else {}
    return {
        "operation": operation,
        "userInfo": {"username": user, "extra": extra},
        "object": obj,
        "oldObject": old,
    }


def test_the_agent_may_write_its_own_nodes_kgpu_keys_and_nothing_else(
    policies: tuple[Obj, Obj, str],
) -> None:
    nodes, _, agent = policies
    old = _node("gpu-1")
    # what the agent's code sends: the ComputeDomain driver's label and channel annotation,
    # the MIG manager's state label (merge patches of exactly those keys)
    for patch in (
        {
            "metadata": {
                "labels": {node_label("uid-1"): "true"},
                "annotations": {CHANNELS_ANNOTATION: '{"uid-1": 0}'},
            }
        },
        {"metadata": {"labels": {MIG_STATE_LABEL: "pending"}}},
    ):
        new = _merge(old, patch)
        assert admit(nodes, _request(agent, "UPDATE", new, old, "gpu-1")) == []
    removed = _merge(_merge(old, {"metadata": {"labels": {node_label("u"): "true"}}}), {})
    back = _merge(removed, {"metadata": {"labels": {node_label("u"): None}}})
    assert admit(nodes, _request(agent, "UPDATE", back, removed, "gpu-1")) == []

    denied = {
        "another node": (
            _merge(_node("gpu-2"), {"metadata": {"labels": {MIG_STATE_LABEL: "x"}}}),
            _node("gpu-2"),
            "may not change Node gpu-2",
        ),
        "a taint": (
            _merge(old, {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
            old,
            "spec",
        ),
        "mig.config": (
            _merge(old, {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g"}}}),
            old,
            "labels kgpu owns",
        ),
        "a hostname label": (
            _merge(old, {"metadata": {"labels": {"kubernetes.io/hostname": "x"}}}),
            old,
            "labels kgpu owns",
        ),
        "another annotation": (
            _merge(old, {"metadata": {"annotations": {"nvidia.com/device-plugin.config": "x"}}}),
            old,
            "annotation kgpu owns",
        ),
    }
    for what, (new, before, message) in denied.items():
        failed = admit(nodes, _request(agent, "UPDATE", new, before, "gpu-1"))
        assert failed and message in failed[0], what
    # a token bound to no node writes nothing; other users are not this policy's business
    assert "names no node" in admit(nodes, _request(agent, "UPDATE", old, old, None))[0]
    other = "system:serviceaccount:kube-system:node-controller"
    assert admit(nodes, _request(other, "UPDATE", _node("gpu-2"), old, None)) == []


def test_the_agent_may_write_and_delete_only_its_own_resourceslices(
    policies: tuple[Obj, Obj, str],
) -> None:
    _, slices, agent = policies

    def slice_of(node: str | None) -> Obj:
        spec: Obj = {"driver": "gpu.nvidia.com", "pool": {"name": "p"}}
        if node:
            spec["nodeName"] = node
        else:
            spec["allNodes"] = True
        return {"metadata": {"name": f"{node}-gpu"}, "spec": spec}

    assert admit(slices, _request(agent, "CREATE", slice_of("gpu-1"), None, "gpu-1")) == []
    mine = slice_of("gpu-1")
    assert admit(slices, _request(agent, "UPDATE", mine, mine, "gpu-1")) == []
    assert admit(slices, _request(agent, "DELETE", None, mine, "gpu-1")) == []
    theirs = slice_of("gpu-2")
    for op, obj, old in (
        ("CREATE", theirs, None),
        ("UPDATE", theirs, theirs),
        ("DELETE", None, theirs),
    ):
        failed = admit(slices, _request(agent, op, obj, old, "gpu-1"))
        assert failed == [
            "the agent on node gpu-1 may not write ResourceSlice gpu-2-gpu of node gpu-2"
        ], op
    assert admit(slices, _request(agent, "CREATE", slice_of(None), None, "gpu-1"))
    assert admit(slices, _request(agent, "CREATE", mine, None, None))


def test_the_policies_render_only_where_the_api_serves_them(
    render: Callable[[str, str], Rendered],
) -> None:
    for version in KUBE_VERSIONS:  # all 1.30+
        kinds = [o["kind"] for o in render(version, "default").objects]
        assert kinds.count("ValidatingAdmissionPolicy") == 2
        assert kinds.count("ValidatingAdmissionPolicyBinding") == 2
