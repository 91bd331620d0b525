"""cluster-autoscaler's template nodes judged by the cluster's kube-scheduler: its release's
wording in NotTriggerScaleUp, and the inter-pod filters (InterPodAffinity, PodTopologySpread)
over the cluster plus the new nodes of one estimate, as cluster-autoscaler's snapshot has them."""

from __future__ import annotations

from typing import Any

import pytest

from kgpu.sim.plugins import Event
from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.testing.manifests import deployment

ZONE = "topology.kubernetes.io/zone"


def anti_affinity(app: str, topology_key: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": topology_key}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def run(scenario: dict[str, Any]) -> Simulation:
    return Simulation(scenario_from_dict(scenario), plugins=False).run()


def events(sim: Simulation, reason: str) -> list[Event]:
    return [e for e in sim.events if e.reason == reason]


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        ("1.33", "1 node(s) had untolerated taint {dedicated: training}"),
        ("1.35", "1 node(s) had untolerated taint(s)"),
    ],
)
def test_not_trigger_scale_up_speaks_the_clusters_release(version: str, reason: str) -> None:
    taint = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
    sim = run(
        {
            "kubernetesVersion": version,
            "nodes": [
                {
                    "name": "t4",
                    "machine": "t4",
                    "autoscale": {"min": 0, "max": 2},
                    "taints": [taint],
                }
            ],
            "apply": [deployment("app", 1, {"nvidia.com/gpu": 1})],
            "steps": [{"advance": "30s"}],
        }
    )
    [event] = events(sim, "NotTriggerScaleUp")
    assert event.message == f"pod didn't trigger scale-up: {reason}"


def test_hostname_anti_affinity_asks_for_one_new_node_per_pod() -> None:
    """The three pods would fit one T4 node by resources; their anti-affinity keeps them on
    three, so the estimate asks for three."""
    sim = run(
        {
            "nodes": [{"name": "t4", "machine": "t4", "autoscale": {"min": 0, "max": 5}}],
            "apply": [
                deployment(
                    "web", 3, {"cpu": "1"}, affinity=anti_affinity("web", "kubernetes.io/hostname")
                )
            ],
            "steps": [{"advance": "2m"}],
        }
    )
    [scaled] = events(sim, "ScaledUpGroup")
    assert scaled.message == "Scale-up: setting group t4 size to 3 instead of 0 (max: 5)"
    running = sorted(r.node for r in sim.pods.values() if r.phase == "Running")
    assert running == ["t4-0", "t4-1", "t4-2"]


def test_zone_anti_affinity_counts_pods_on_the_other_new_nodes_of_the_estimate() -> None:
    """Every new node of the group is in zone a: one pod per zone means one node, and the
    second pod is told why no new node helps it."""
    sim = run(
        {
            "nodes": [
                {
                    "name": "t4",
                    "machine": "t4",
                    "autoscale": {"min": 0, "max": 3},
                    "labels": {ZONE: "a"},
                }
            ],
            "apply": [deployment("db", 2, {"cpu": "1"}, affinity=anti_affinity("db", ZONE))],
            "steps": [{"advance": "2m"}],
        }
    )
    [scaled] = events(sim, "ScaledUpGroup")
    assert scaled.message == "Scale-up: setting group t4 size to 1 instead of 0 (max: 3)"
    assert [n.name for n in sim.nodes] == ["t4-0"]
    phases = sorted(r.phase for r in sim.pods.values())
    assert phases == ["Pending", "Running"]
    assert events(sim, "NotTriggerScaleUp")[-1].message == (
        "pod didn't trigger scale-up: 1 node(s) didn't match pod anti-affinity rules"
    )


def test_topology_spread_counts_the_template_nodes_zone() -> None:
    """Zone a holds one pod on its one GPU; zone b's group starts empty. With maxSkew 1 the
    estimate puts two pods in zone b (b=2, a=1) and leaves the fourth."""
    spread = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "train"}},
    }
    sim = run(
        {
            "nodes": [
                {"name": "fixed", "machine": "t4", "labels": {ZONE: "a"}},
                {
                    "name": "t4b",
                    "machine": "t4",
                    "autoscale": {"min": 0, "max": 4},
                    "labels": {ZONE: "b"},
                },
            ],
            "apply": [
                deployment("train", 4, {"nvidia.com/gpu": 1}, topologySpreadConstraints=[spread])
            ],
            "steps": [{"advance": "2m"}],
        }
    )
    [scaled] = events(sim, "ScaledUpGroup")
    assert scaled.message == "Scale-up: setting group t4b size to 2 instead of 0 (max: 4)"
    running = sorted(r.node or "" for r in sim.pods.values() if r.phase == "Running")
    assert running == ["fixed", "t4b-0", "t4b-1"]
    assert events(sim, "NotTriggerScaleUp")[-1].message == (
        "pod didn't trigger scale-up: 1 node(s) didn't match pod topology spread constraints"
    )
