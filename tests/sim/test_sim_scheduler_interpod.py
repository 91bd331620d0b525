"""InterPodAffinity, PodTopologySpread and the ComputeDomain admission step in a running cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kgpu.computedomain.api import WORKLOAD_LABEL
from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.testing.manifests import deployment

RACK_A = "7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.0"
RACK_B = "1f0c0a3e-2c4b-4d8e-9a51-6b8e2f3d4c5a.0"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "computedomain"


def simulate(nodes: list[dict[str, Any]], *objs: dict[str, Any]) -> Simulation:
    sim = Simulation(scenario_from_dict({"nodes": nodes}), plugins=False)
    sim.start()
    for obj in objs:
        sim.apply(obj)
        sim.settle()
    return sim


def placed(sim: Simulation, prefix: str) -> dict[str, str]:
    return {k: r.node for k, r in sim.pods.items() if k.startswith(f"default/{prefix}")}


def test_required_anti_affinity_keeps_one_replica_per_node() -> None:
    one_per_node = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "web"}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        }
    }
    sim = simulate([{"name": "n", "count": 2}], deployment("web", 3, affinity=one_per_node))
    nodes = placed(sim, "web-")
    assert sorted(n for n in nodes.values() if n) == ["n-0", "n-1"]
    (pending,) = [sim.pods[k] for k, n in nodes.items() if not n]
    assert pending.last_message == (
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules. "
        "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    )


def test_required_affinity_follows_the_pods_it_names_into_their_zone() -> None:
    zones = [
        {"name": "a", "count": 2, "labels": {"topology.kubernetes.io/zone": "za"}},
        {"name": "b", "count": 2, "labels": {"topology.kubernetes.io/zone": "zb"}},
    ]
    near_db = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "db"}},
                    "topologyKey": "topology.kubernetes.io/zone",
                }
            ]
        }
    }
    sim = simulate(
        zones,
        deployment("web", 3, affinity=near_db),  # nothing to follow yet, and not self-affine
        deployment("db", 1, nodeSelector={"kubernetes.io/hostname": "b-1"}),
    )
    web = placed(sim, "web-")
    assert len(web) == 3 and all(n.startswith("b-") for n in web.values())


def test_topology_spread_balances_zones_and_stops_at_max_skew() -> None:
    zones = [
        {"name": "a", "count": 1, "labels": {"zone": "za"}, "pods": 2},
        {"name": "b", "count": 3, "labels": {"zone": "zb"}},
    ]
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    sim = simulate(zones, deployment("web", 6, topologySpreadConstraints=spread))
    zone = {n.name: n.labels["zone"] for n in sim.nodes}
    nodes = placed(sim, "web-")
    in_a = sum(1 for n in nodes.values() if n and zone[n] == "za")
    in_b = sum(1 for n in nodes.values() if n and zone[n] == "zb")
    # zone a holds two pods at most; zone b may then run one more than a, no further
    assert (in_a, in_b) == (2, 3)
    (pending,) = [sim.pods[k] for k, n in nodes.items() if not n]
    assert pending.last_message == (
        "0/4 nodes are available: 1 Too many pods, "
        "3 node(s) didn't match pod topology spread constraints. "
        "preemption: 0/4 nodes are available: 4 No preemption victims found for incoming pod."
    )


def test_spread_names_the_missing_topology_label() -> None:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "rack",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    sim = simulate(
        [{"name": "n", "count": 2}], deployment("web", 1, topologySpreadConstraints=spread)
    )
    (rec,) = [r for k, r in sim.pods.items() if k.startswith("default/web-")]
    assert rec.last_message == (
        "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints "
        "(missing required label). "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )


@pytest.mark.slow
def test_admission_puts_a_domains_workers_in_a_clique_with_room(
    acceptance: Path, tmp_path: Path
) -> None:
    """The webhook's mutation as the API server applies it: the workload label, the clique pod
    affinity, and -- no worker being placed yet -- node affinity to the cliques with room for
    numNodes workers (rack A has one node only)."""
    from kgpu.dra.classes import device_classes

    classes = tmp_path / "classes.yaml"
    import yaml

    classes.write_text(yaml.safe_dump_all(device_classes()))
    sim = Simulation(
        scenario_from_dict(
            {
                "nodes": [
                    {"name": "rack-a", "count": 1, "machine": "gb200", "clique": RACK_A},
                    {"name": "rack-b", "count": 2, "machine": "gb200", "clique": RACK_B},
                ],
                "apply": [
                    str(classes),
                    str(acceptance / "seed-guides" / "nvbandwidth-test-job.yaml"),
                ],
            },
            base=tmp_path,
        ),
        work_dir=tmp_path / "work",
    ).run()
    uid = sim.store.get(
        "resource.nvidia.com/v1beta1", "ComputeDomain", "nvbandwidth-test-compute-domain", "default"
    )["metadata"]["uid"]
    workers = [r for k, r in sim.pods.items() if "nvbandwidth-test-worker" in k]
    assert len(workers) == 2
    for w in workers:
        assert w.phase == "Running" and w.node.startswith("rack-b-")
        assert w.obj["metadata"]["labels"][WORKLOAD_LABEL] == uid
        affinity = w.obj["spec"]["affinity"]
        assert affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
            {
                "labelSelector": {"matchLabels": {WORKLOAD_LABEL: uid}},
                "topologyKey": "nvidia.com/gpu.clique",
            }
        ]
        (term,) = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert term["matchExpressions"] == [
            {"key": "nvidia.com/gpu.clique", "operator": "In", "values": [RACK_B]}
        ]


def test_selectors_the_api_server_refuses_are_refused_before_the_run() -> None:
    """The upstream PreFilter cases with an invalid label value cannot reach kube-scheduler: the
    API server refuses such a pod, and so does kgpu, naming the field."""
    from kgpu.manifests import validate_manifest

    bad = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x"},
        "spec": {
            "containers": [{"name": "c", "image": "i"}],
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "labelSelector": {
                                "matchExpressions": [
                                    {
                                        "key": "service",
                                        "operator": "In",
                                        "values": ["{{.bad-value.}}"],
                                    }
                                ]
                            },
                            "topologyKey": "zone",
                        }
                    ]
                }
            },
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "zone",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "minDomains": 2,
                }
            ],
        },
    }
    paths = {p.path for p in validate_manifest(bad)}
    assert paths == {
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
        ".labelSelector.matchExpressions[0].values[0]",
        "spec.topologySpreadConstraints[0].minDomains",
    }
