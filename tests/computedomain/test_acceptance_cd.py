"""Rows 9 and 10 of the acceptance table, built from the seed guides' manifests unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from cd_cluster import RACK_A, RACK_B, load_docs  # type: ignore[import-not-found]

from kgpu.computedomain.api import CLIQUE_LABEL
from kgpu.computedomain.imex import hosts_addresses

CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"


def _cdi_paths(cluster: Any, node: str) -> list[str]:
    specs = list((cluster.kubelet.node_dir(node) / "cdi").glob("*.yaml"))
    paths = []
    for spec in specs:
        data = yaml.safe_load(spec.read_text())
        for dev in data["devices"]:
            paths += [n["path"] for n in dev["containerEdits"].get("deviceNodes", [])]
    return paths


def test_row9_imex_channel_injection(acceptance: Path, cluster_factory: Any) -> None:
    cluster = cluster_factory({RACK_A: 4})
    cluster.apply(load_docs(acceptance / "seed-guides" / "imex-channel-injection.yaml"))
    cluster.run()

    pod = cluster.pod("imex-channel-injection")
    assert pod["status"]["phase"] == "Running"
    node = pod["spec"]["nodeName"]
    devices = cluster.devices["default/imex-channel-injection"]["ctr"]
    assert CHANNEL0 in devices
    assert any(d.startswith("k8s.compute-domain.nvidia.com/claim=") for d in devices)
    assert CHANNEL0 in _cdi_paths(cluster, node)

    cd = cluster.domain("imex-channel-injection")
    assert cd["status"]["status"] == "Ready"
    assert [n["name"] for n in cd["status"]["nodes"]] == [node]
    ip = cluster.store.get("v1", "Node", node)["status"]["addresses"][0]["address"]
    assert cd["status"]["nodes"][0]["ipAddress"] == ip
    assert cd["status"]["nodes"][0]["cliqueID"] == RACK_A

    assert cd["status"]["nodes"][0]["index"] == 0

    # The IMEX daemon's config, as upstream's DNS-name mode writes it: the node list names
    # compute-domain-daemon-0000..0017, and the hosts mapping gives daemon 0 the node's IP.
    handler = cluster.handler(node)
    uid = cd["metadata"]["uid"]
    directory = handler.domain_dir(uid)
    assert (directory / "hosts").read_text() == f"{ip}\tcompute-domain-daemon-0000\n"
    names = (directory / "nodes.cfg").read_text().split()
    assert names[0] == "compute-domain-daemon-0000" and len(names) == 18
    template = (directory / "imexd.cfg.tmpl").read_text()
    assert "IMEX_NODE_CONFIG_FILE={{ .IMEXDaemonNodesConfigPath }}" in template
    (clique,) = cluster.store.list("resource.nvidia.com/v1beta1", "ComputeDomainClique")
    assert clique["metadata"]["name"] == f"{uid}.{RACK_A}"
    assert clique["daemons"] == [
        {"nodeName": node, "ipAddress": ip, "cliqueID": RACK_A, "index": 0, "status": "Ready"}
    ]


def _fill(cluster: Any, nodes: list[str]) -> None:
    """Occupy every GPU of ``nodes`` with an ordinary 4-GPU pod."""
    for node in nodes:
        cluster.store.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"busy-{node}"},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
                },
                "status": {"phase": "Running"},
            }
        )


def test_row10_nvbandwidth_workers_share_one_clique(acceptance: Path, cluster_factory: Any) -> None:
    cluster = cluster_factory({RACK_A: 18, RACK_B: 18})
    # Rack A (listed first, so first-fit would start there) has one free node only: a
    # scheduler blind to cliques would split the two workers across racks.
    _fill(cluster, [f"gb200-{i}" for i in range(17)])
    cluster.apply(load_docs(acceptance / "seed-guides" / "nvbandwidth-test-job.yaml"))
    cluster.run()

    workers = [cluster.pod(f"nvbandwidth-test-worker-{i}") for i in range(2)]
    assert all(w["status"]["phase"] == "Running" for w in workers)
    nodes = [w["spec"]["nodeName"] for w in workers]
    assert len(set(nodes)) == 2
    cliques = {
        cluster.store.get("v1", "Node", n)["metadata"]["labels"][CLIQUE_LABEL] for n in nodes
    }
    assert cliques == {RACK_B}
    for w in workers:
        (container,) = w["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
        assert CHANNEL0 in cluster.devices[f"default/{w['metadata']['name']}"]["mpi-worker"]

    cd = cluster.domain("nvbandwidth-test-compute-domain")
    assert cd["status"]["status"] == "Ready"
    assert sorted(n["name"] for n in cd["status"]["nodes"]) == sorted(nodes)
    ips = sorted(n["ipAddress"] for n in cd["status"]["nodes"])
    uid = cd["metadata"]["uid"]
    for node in nodes:
        text = (cluster.handler(node).domain_dir(uid) / "hosts").read_text()
        assert sorted(hosts_addresses(text)) == ips


def test_row10_explains_when_no_clique_has_room(acceptance: Path, cluster_factory: Any) -> None:
    cluster = cluster_factory({RACK_A: 3, RACK_B: 2})
    _fill(cluster, ["gb200-0", "gb200-1", "gb200-3"])
    cluster.apply(load_docs(acceptance / "seed-guides" / "nvbandwidth-test-job.yaml"))
    cluster.run()

    # the workers' pod affinity keeps the second in the first one's clique: neither binds
    assert not cluster.pod("nvbandwidth-test-worker-0")["spec"].get("nodeName")
    assert not cluster.pod("nvbandwidth-test-worker-1")["spec"].get("nodeName")
    cd = cluster.domain("nvbandwidth-test-compute-domain")
    assert cd["status"]["status"] == "NotReady"
    message = cd["status"]["conditions"][0]["message"]  # the controller says why
    assert message.startswith(
        "no NVLink clique has 2 node(s) with room for ComputeDomain "
        "default/nvbandwidth-test-compute-domain"
    )
    assert f"clique {RACK_A}: 1 node(s)" in message and f"clique {RACK_B}: 1 node(s)" in message
    assert any(e.reason == "NoRoomInClique" for e in cluster.events)
