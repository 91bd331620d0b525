"""kube-scheduler semantics: filters, their order, and the FailedScheduling wording."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kgpu.errors import FieldError
from kgpu.sim.podspec import pod_requirements
from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.scheduler import fit_error
from kgpu.sim.simulation import Simulation


def pod(name: str, **spec: Any) -> dict[str, Any]:
    limits = spec.pop("limits", {"nvidia.com/gpu": 1})
    body = {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}], **spec}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def simulate(nodes: list[dict[str, Any]], *pods: dict[str, Any], **extra: Any) -> Simulation:
    sim = Simulation(scenario_from_dict({"nodes": nodes, **extra}), plugins=False)
    sim.start()
    for p in pods:
        sim.apply(p)
    sim.settle()
    return sim


def message(sim: Simulation, name: str) -> str:
    return sim.pods[f"default/{name}"].last_message


def test_histogram_is_sorted_as_strings_and_joined() -> None:
    reasons = Counter(
        {"node(s) didn't match Pod's node affinity/selector": 2, "Insufficient nvidia.com/gpu": 1}
    )
    assert fit_error(3, reasons) == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "2 node(s) didn't match Pod's node affinity/selector."
    )
    # string sort, as kube-scheduler's sort.Strings: "10 ..." sorts before "2 ..."
    assert fit_error(12, Counter({"b": 2, "a": 10})) == "0/12 nodes are available: 10 a, 2 b."
    assert fit_error(0, Counter()) == "no nodes available to schedule pods"
    assert fit_error(2, Counter(), "cannot allocate all claims") == (
        "0/2 nodes are available: cannot allocate all claims."
    )


NOT_HELPFUL = "Preemption is not helpful for scheduling"


@pytest.mark.parametrize(
    ("version", "taint"),
    [
        ("1.37", "node(s) had untolerated taint(s)"),
        ("1.36", "node(s) had untolerated taint(s)"),
        ("1.35", "node(s) had untolerated taint(s)"),
        ("1.34", "node(s) had untolerated taint(s)"),  # 1.34.2 and later
        ("1.34.1", "node(s) had untolerated taint {nvidia.com/gpu: true}"),
        ("1.32", "node(s) had untolerated taint {nvidia.com/gpu: true}"),
    ],
)
def test_taint_selector_and_resources_counted_per_node(version: str, taint: str) -> None:
    sim = simulate(
        [
            {
                "name": "tainted",
                "machine": "t4",
                "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
            },
            {"name": "other", "machine": "t4", "labels": {"pool": "b"}},
            {"name": "cpu"},
        ],
        pod("p", nodeSelector={"pool": "a"}),
        kubernetesVersion=version,
    )
    assert message(sim, "p") == (
        f"0/3 nodes are available: 1 {taint}, "
        "2 node(s) didn't match Pod's node affinity/selector. "
        f"preemption: 0/3 nodes are available: 3 {NOT_HELPFUL}."
    )


def test_toleration_lets_pod_onto_tainted_node() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    sim = simulate(
        [{"name": "tainted", "machine": "t4", "taints": [taint]}],
        pod(
            "tolerates",
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        ),
        pod(
            "equal",
            tolerations=[
                {
                    "key": "nvidia.com/gpu",
                    "operator": "Equal",
                    "value": "false",
                    "effect": "NoSchedule",
                }
            ],
        ),
    )
    assert sim.pods["default/tolerates"].node == "tainted"
    assert message(sim, "equal") == (
        "0/1 nodes are available: 1 node(s) had untolerated taint(s). "
        f"preemption: 0/1 nodes are available: 1 {NOT_HELPFUL}."
    )


def test_prefer_no_schedule_is_ignored_for_fit() -> None:
    sim = simulate(
        [
            {
                "name": "n",
                "machine": "t4",
                "taints": [{"key": "spot", "value": "yes", "effect": "PreferNoSchedule"}],
            }
        ],
        pod("p"),
    )
    assert sim.pods["default/p"].phase == "Running"


def test_unschedulable_node_and_cpu_memory_pods_fit() -> None:
    sim = simulate(
        [
            {"name": "cordoned", "machine": "t4", "unschedulable": True},
            {"name": "small", "machine": "t4", "cpu": "1", "memory": "1Gi", "pods": 1},
        ],
        pod("big", limits={"cpu": "2", "memory": "2Gi", "nvidia.com/gpu": 2}),
    )
    # the small node could not take the pod even empty: from 1.34 preemption does not try it
    assert message(sim, "big") == (
        "0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory, "
        "1 Insufficient nvidia.com/gpu, 1 node(s) were unschedulable. "
        f"preemption: 0/2 nodes are available: 2 {NOT_HELPFUL}."
    )
    sim2 = simulate(
        [{"name": "one", "machine": "t4", "pods": 1}], pod("a", limits={}), pod("b", limits={})
    )
    assert message(sim2, "b") == (
        "0/1 nodes are available: 1 Too many pods. "
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )


@pytest.mark.parametrize(
    ("expr", "lands"),
    [
        ({"key": "gen", "operator": "In", "values": ["9"]}, "h100"),
        ({"key": "gen", "operator": "NotIn", "values": ["9"]}, "t4"),
        ({"key": "gen", "operator": "Gt", "values": ["8"]}, "h100"),
        ({"key": "gen", "operator": "Lt", "values": ["8"]}, "t4"),
        ({"key": "fast", "operator": "Exists"}, "h100"),
        ({"key": "fast", "operator": "DoesNotExist"}, "t4"),
    ],
)
def test_required_node_affinity_operators(expr: dict[str, Any], lands: str) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expr]}]
            }
        }
    }
    sim = simulate(
        [
            {"name": "t4", "machine": "t4", "labels": {"gen": "7"}},
            {"name": "h100", "machine": "dgx-h100", "labels": {"gen": "9", "fast": "yes"}},
        ],
        pod("p", affinity=affinity),
    )
    assert sim.pods["default/p"].node == lands


def test_affinity_terms_are_ored() -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]},
                ]
            }
        }
    }
    sim = simulate(
        [{"name": "a", "machine": "t4"}, {"name": "b", "machine": "t4"}],
        pod("p", affinity=affinity),
    )
    assert sim.pods["default/p"].node == "b"


def test_hostname_selector_picks_one_of_identical_nodes() -> None:
    sim = simulate(
        [{"name": "n", "count": 5, "machine": "t4"}],
        pod("p", nodeSelector={"kubernetes.io/hostname": "n-3"}),
    )
    assert sim.pods["default/p"].node == "n-3"


def test_limits_only_extended_resource_counts_as_request() -> None:
    req = pod_requirements(pod("p", limits={"nvidia.com/gpu": 2, "cpu": "500m"}))
    assert req.request("nvidia.com/gpu") == 2 and req.request("cpu") == 500


def test_spread_across_equal_nodes_least_allocated() -> None:
    pods = [pod(f"p{i}") for i in range(4)]
    sim = simulate([{"name": "n", "count": 4, "machine": "dgx-h100"}], *pods)
    assert sorted(r.node for r in sim.pods.values()) == ["n-0", "n-1", "n-2", "n-3"]


def test_pending_pod_retried_when_capacity_frees(tmp_path: Path) -> None:
    sim = simulate([{"name": "n", "machine": "t4"}], pod("a"), pod("b"))
    assert sim.pods["default/b"].phase == "Pending"
    sim.delete_pod("default/a")
    sim.settle()
    assert sim.pods["default/b"].phase == "Running" and sim.pods["default/b"].node == "n"


def test_bad_pod_rejected_with_field_path() -> None:
    sim = Simulation(scenario_from_dict({"nodes": []}), plugins=False)
    with pytest.raises(FieldError) as err:
        sim.apply(pod("p", nodeSelector={"a": 1}))
    assert "spec.nodeSelector" in str(err.value)


def test_claims_without_dra_plugin_are_explained() -> None:
    claim_pod = pod("c", limits={})
    claim_pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
    sim = simulate([{"name": "n", "machine": "t4"}], claim_pod)
    assert message(sim, "c") == (
        "0/1 nodes are available: pod uses resource claims but no DRA scheduler plugin is loaded."
    )
