"""A node of a Ready four-node domain fails: the domain heals inside its clique, or says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cd_cluster import RACK_A, RACK_B, load_docs  # type: ignore[import-not-found]

from kgpu.computedomain.imex import hosts_addresses

EXAMPLE = (
    Path(__file__).resolve().parents[2]
    / "examples"
    / "computedomain"
    / "manifests"
    / "four-node-domain.yaml"
)


def _workers(cluster: Any) -> dict[str, str]:
    return {
        p["metadata"]["name"]: p["spec"].get("nodeName") or ""
        for p in cluster.store.list("v1", "Pod")
        if p["metadata"]["name"].startswith("train-4-worker")
    }


def _nodes_config(cluster: Any, node: str, uid: str) -> list[str]:
    """The peer addresses a node's IMEX daemon resolves (its hosts mapping)."""
    return hosts_addresses((cluster.handler(node).domain_dir(uid) / "hosts").read_text())


def test_failed_node_is_replaced_within_the_clique(cluster_factory: Any) -> None:
    cluster = cluster_factory({RACK_A: 6, RACK_B: 6})
    cluster.apply(load_docs(EXAMPLE))
    cluster.run()
    cd = cluster.domain("train-4")
    assert cd["status"]["status"] == "Ready"
    uid = cd["metadata"]["uid"]
    before = _workers(cluster)
    assert len(set(before.values())) == 4
    victim = sorted(before.values())[0]
    ip = {n["name"]: n["ipAddress"] for n in cd["status"]["nodes"]}
    survivors = sorted(set(before.values()) - {victim})
    assert ip[victim] in _nodes_config(cluster, survivors[0], uid)

    cluster.fail_node(victim)
    cluster.events.clear()
    cluster.events += cluster.controller.reconcile(cluster.store, 1.0)
    assert cluster.domain("train-4")["status"]["status"] == "NotReady"
    assert any(e.reason == "ComputeDomainNotReady" for e in cluster.events)

    cluster.run()
    cd = cluster.domain("train-4")
    assert cd["status"]["status"] == "Ready"
    after = _workers(cluster)
    assert victim not in after.values()
    assert len(set(after.values())) == 4
    clique_of = {
        n["metadata"]["name"]: n["metadata"]["labels"]["nvidia.com/gpu.clique"]
        for n in cluster.store.list("v1", "Node")
    }
    assert {clique_of[n] for n in after.values()} == {clique_of[victim]}
    ips = sorted(n["ipAddress"] for n in cd["status"]["nodes"])
    assert ip[victim] not in ips and len(ips) == 4
    for node in after.values():
        assert sorted(_nodes_config(cluster, node, uid)) == ips
    assert any(e.reason == "IMEXNodesConfigUpdated" for e in cluster.events)
    victim_labels = cluster.store.get("v1", "Node", victim)["metadata"]["labels"]
    assert f"resource.nvidia.com/computeDomain.{uid}" not in victim_labels


def test_full_clique_reports_why_it_cannot_heal(cluster_factory: Any) -> None:
    cluster = cluster_factory({RACK_A: 4, RACK_B: 6})
    cluster.apply(load_docs(EXAMPLE))
    cluster.run()
    cd = cluster.domain("train-4")
    assert cd["status"]["status"] == "Ready"
    placed = sorted(set(_workers(cluster).values()))
    assert placed == [f"gb200-{i}" for i in range(4)]  # rack A is exactly four nodes

    cluster.fail_node("gb200-2")
    cluster.run()
    cd = cluster.domain("train-4")
    assert cd["status"]["status"] == "NotReady"
    message = cd["status"]["conditions"][0]["message"]
    assert (
        f"no node of NVLink clique {RACK_A} has room for ComputeDomain default/train-4" in message
    )
    pending = [n for n, node in _workers(cluster).items() if not node]
    assert len(pending) == 1  # not moved to rack B, which has room but another clique
    assert any(e.reason == "NoRoomInClique" for e in cluster.events)
