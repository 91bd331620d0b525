"""The compute-domain.nvidia.com node handler: channels per domain, IMEX daemon configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.computedomain.api import API_VERSION, DomainNode, node_label
from kgpu.computedomain.imex import (
    assign_channel,
    hosts_addresses,
    render_hosts,
    render_imex_config_template,
    render_nodes_config,
)
from kgpu.drivers.computedomain import ComputeDomainHandler
from kgpu.kubelet.dra.handler import ClaimError, ClaimRef
from kgpu.kubelet.dra.plugin import DraPlugin, claim_info
from kgpu.store import MemoryStore
from kgpu.testing.manifests import compute_domain

CLIQUE = "7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.0"


def _node(store: MemoryStore, name: str, ip: str) -> None:
    store.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.clique": CLIQUE}},
            "status": {"addresses": [{"type": "InternalIP", "address": ip}]},
        }
    )


def _domain(store: MemoryStore, name: str) -> str:
    obj = store.create(compute_domain(name, 2))
    return str(obj["metadata"]["uid"])


def _clique(
    store: MemoryStore, uid: str, daemons: list[tuple[str, str, int]], clique: str = CLIQUE
) -> None:
    """The domain's ComputeDomainClique as the controller writes it."""
    obj = {
        "apiVersion": API_VERSION,
        "kind": "ComputeDomainClique",
        "metadata": {
            "name": f"{uid}.{clique}",
            "namespace": "nvidia-dra-driver-gpu",
            "labels": {
                "resource.nvidia.com/computeDomain": uid,
                "resource.nvidia.com/computeDomain.cliqueID": clique,
            },
        },
        "daemons": [
            {"nodeName": n, "ipAddress": ip, "cliqueID": clique, "index": i, "status": "Ready"}
            for n, ip, i in daemons
        ],
    }
    store.apply(obj)


def _claim(name: str, uid: str, device: str, domain: str, kind: str) -> dict[str, Any]:
    """A channel claim in the workload's namespace; a daemon claim as the controller's
    template makes it (its namespace, the domain label)."""
    request = device.split("-")[0]
    meta: dict[str, Any] = {"name": name, "namespace": "default", "uid": uid}
    if kind == "ComputeDomainDaemonConfig":
        meta["namespace"] = "nvidia-dra-driver-gpu"
        meta["labels"] = {"resource.nvidia.com/computeDomain": domain}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": request,
                            "driver": "compute-domain.nvidia.com",
                            "pool": "n0",
                            "device": device,
                        }
                    ],
                    "config": [
                        {
                            "source": "FromClaim",
                            "requests": [request],
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": {
                                    "apiVersion": API_VERSION,
                                    "kind": kind,
                                    "domainID": domain,
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


@pytest.fixture
def setup(tmp_path: Path) -> tuple[MemoryStore, DraPlugin, ComputeDomainHandler]:
    store = MemoryStore()
    _node(store, "n0", "10.0.0.1")
    _node(store, "n1", "10.0.0.2")
    handler = ComputeDomainHandler("n0", store, tmp_path / "plugin", clique=CLIQUE)
    plugin = DraPlugin(handler, tmp_path / "plugin", tmp_path / "cdi", store)
    return store, plugin, handler


def _prepare(plugin: DraPlugin, claim: dict[str, Any]) -> Any:
    meta = claim["metadata"]
    ref = ClaimRef(meta["namespace"], meta["uid"], meta["name"])
    return plugin.prepare([ref], {ref.uid: claim})[ref.uid]


def _channel_paths(tmp_path: Path, claim_uid: str) -> list[str]:
    (spec,) = (tmp_path / "cdi").glob(f"*{claim_uid}*")
    data = yaml.safe_load(spec.read_text())
    return [n["path"] for d in data["devices"] for n in d["containerEdits"]["deviceNodes"]]


def test_two_domains_on_one_node_get_distinct_channels_and_daemon_configs(
    setup: Any, tmp_path: Path
) -> None:
    store, plugin, handler = setup
    a, b = _domain(store, "a"), _domain(store, "b")
    ra = _prepare(plugin, _claim("a-ch", "u1", "channel-0", a, "ComputeDomainChannelConfig"))
    rb = _prepare(plugin, _claim("b-ch", "u2", "channel-1", b, "ComputeDomainChannelConfig"))
    assert not ra.error and not rb.error
    assert handler.channels() == {a: 0, b: 1}
    assert _channel_paths(tmp_path, "u1") == ["/dev/nvidia-caps-imex-channels/channel0"]
    assert _channel_paths(tmp_path, "u2") == ["/dev/nvidia-caps-imex-channels/channel1"]
    assert ra.devices[0].cdi_device_ids == ("k8s.compute-domain.nvidia.com/claim=u1-channel-0",)
    labels = store.get("v1", "Node", "n0")["metadata"]["labels"]
    assert labels[node_label(a)] == "true" and labels[node_label(b)] == "true"

    # A second pod of domain a on the node shares a's channel.
    _prepare(plugin, _claim("a-ch2", "u3", "channel-2", a, "ComputeDomainChannelConfig"))
    assert _channel_paths(tmp_path, "u3") == ["/dev/nvidia-caps-imex-channels/channel0"]

    # The controller lists a's daemon on n0 and b's on n0 and n1 (their cliques): each
    # daemon's hosts mapping names its own domain's peers only.
    _clique(store, a, [("n0", "10.0.0.1", 0)])
    _clique(store, b, [("n0", "10.0.0.1", 0), ("n1", "10.0.0.2", 1)])
    _prepare(plugin, _claim("a-d", "u4", "daemon-0", a, "ComputeDomainDaemonConfig"))
    _prepare(plugin, _claim("b-d", "u5", "daemon-1", b, "ComputeDomainDaemonConfig"))
    da, db = handler.domain_dir(a), handler.domain_dir(b)
    assert da != db
    assert (da / "hosts").read_text() == "10.0.0.1\tcompute-domain-daemon-0000\n"
    assert (db / "hosts").read_text() == (
        "10.0.0.1\tcompute-domain-daemon-0000\n10.0.0.2\tcompute-domain-daemon-0001\n"
    )
    assert (da / "nodes.cfg").read_text() == render_nodes_config()
    assert (da / "imexd.cfg.tmpl").read_text() == render_imex_config_template()

    # Channels survive an agent restart (state comes back from the checkpoint).
    again = ComputeDomainHandler("n0", store, tmp_path / "plugin", clique=CLIQUE)
    DraPlugin(again, tmp_path / "plugin", tmp_path / "cdi", store)
    assert again.channels() == {a: 0, b: 1}

    # Unpreparing a's last channel claim drops the node label; b keeps its channel.
    plugin.unprepare([ClaimRef("default", "u1", "a-ch"), ClaimRef("default", "u3", "a-ch2")])
    labels = store.get("v1", "Node", "n0")["metadata"]["labels"]
    assert node_label(a) not in labels and node_label(b) in labels
    assert handler.channels() == {b: 1}


def test_daemon_config_follows_the_domain_clique(setup: Any) -> None:
    store, plugin, handler = setup
    a = _domain(store, "a")
    _prepare(plugin, _claim("a-ch", "u1", "channel-0", a, "ComputeDomainChannelConfig"))
    _prepare(plugin, _claim("a-d", "u2", "daemon-0", a, "ComputeDomainDaemonConfig"))
    assert handler.sync_daemons() == []
    assert (handler.domain_dir(a) / "hosts").read_text() == ""  # no daemon listed yet
    _clique(store, a, [("n0", "10.0.0.1", 0), ("n1", "10.0.0.2", 1)])
    assert handler.sync_daemons() == [a]
    assert hosts_addresses((handler.domain_dir(a) / "hosts").read_text()) == [
        "10.0.0.1",
        "10.0.0.2",
    ]
    # another clique of the same domain is not this daemon's business
    _clique(store, a, [("x0", "10.9.0.1", 0)], clique="other.0")
    assert handler.sync_daemons() == []


def test_bad_opaque_config_fails_only_that_claim(setup: Any) -> None:
    store, plugin, _ = setup
    a = _domain(store, "a")
    bad = _claim("x", "u9", "channel-0", "", "ComputeDomainChannelConfig")
    result = _prepare(plugin, bad)
    assert "status.allocation.devices.config[0].opaque.parameters.domainID" in result.error
    unknown = _claim("y", "u8", "channel-0", a, "GpuConfig")
    assert "must be ComputeDomainChannelConfig or ComputeDomainDaemonConfig" in (
        _prepare(plugin, unknown).error
    )
    missing = _claim("z", "u7", "channel-0", "no-such-uid", "ComputeDomainChannelConfig")
    assert "ComputeDomain with uid no-such-uid not found" in _prepare(plugin, missing).error
    good = _prepare(plugin, _claim("a-ch", "u1", "channel-0", a, "ComputeDomainChannelConfig"))
    assert not good.error


def test_channel_claim_from_another_namespace_is_refused(setup: Any, tmp_path: Path) -> None:
    store, _, handler = setup
    a = _domain(store, "a")
    claim = _claim("a-ch", "u1", "channel-0", a, "ComputeDomainChannelConfig")
    claim["metadata"]["namespace"] = "other"
    with pytest.raises(ClaimError, match="namespace is different"):
        handler.prepare(claim_info(claim, "compute-domain.nvidia.com"))


def test_assign_channel() -> None:
    assert assign_channel({}, "a") == 0
    assert assign_channel({"a": 0}, "a") == 0
    assert assign_channel({"a": 0, "b": 2}, "c") == 1
    with pytest.raises(Exception, match="all 2 IMEX channels"):
        assign_channel({"a": 0, "b": 1}, "c", limit=2)


def test_hosts_mapping_orders_by_index_and_skips_what_no_name_can_hold() -> None:
    daemons = [
        DomainNode("b", "10.0.0.10", CLIQUE, 1),
        DomainNode("a", "10.0.0.9", CLIQUE, 0),
        DomainNode("c", "10.0.0.11", "other.0", 2),  # another clique
        DomainNode("d", "", CLIQUE, 3),  # no address yet
        DomainNode("e", "10.0.0.12", CLIQUE, 18),  # beyond the 18 names
    ]
    assert render_hosts(daemons, CLIQUE) == (
        "10.0.0.9\tcompute-domain-daemon-0000\n10.0.0.10\tcompute-domain-daemon-0001\n"
    )
    assert render_nodes_config(2) == "compute-domain-daemon-0000\ncompute-domain-daemon-0001\n"


def test_all_mode_injects_every_channel(setup: Any, tmp_path: Path) -> None:
    store, plugin, handler = setup
    a = _domain(store, "a")
    claim = _claim("a-ch", "u1", "channel-0", a, "ComputeDomainChannelConfig")
    params = claim["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]
    params["allocationMode"] = "All"
    assert not _prepare(plugin, claim).error
    paths = _channel_paths(tmp_path, "u1")
    assert len(paths) == 2048
    assert paths[0] == "/dev/nvidia-caps-imex-channels/channel0"
    assert paths[-1] == "/dev/nvidia-caps-imex-channels/channel2047"
    assert handler.channels() == {a: 0}
    # every channel of the node is visible to a's pods: no other domain may run here now
    b = _domain(store, "b")
    refused = _prepare(plugin, _claim("b-ch", "u2", "channel-1", b, "ComputeDomainChannelConfig"))
    assert f"every IMEX channel of this node is given to ComputeDomain {a}" in refused.error


def test_all_mode_is_refused_where_another_domain_holds_a_channel(setup: Any) -> None:
    store, plugin, handler = setup
    a, b = _domain(store, "a"), _domain(store, "b")
    assert not _prepare(
        plugin, _claim("a-ch", "u1", "channel-0", a, "ComputeDomainChannelConfig")
    ).error
    claim = _claim("b-ch", "u2", "channel-1", b, "ComputeDomainChannelConfig")
    params = claim["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]
    params["allocationMode"] = "All"
    refused = _prepare(plugin, claim)
    assert "allocationMode: All gives the pod every IMEX channel of the node" in refused.error
    assert a in refused.error
    assert handler.channels() == {a: 0}


def test_a_domain_keeps_its_channel_index_across_its_clique(setup: Any, tmp_path: Path) -> None:
    store, plugin, _ = setup
    a, b = _domain(store, "a"), _domain(store, "b")
    _prepare(plugin, _claim("a-ch", "u1", "channel-0", a, "ComputeDomainChannelConfig"))
    _prepare(plugin, _claim("b-ch", "u2", "channel-1", b, "ComputeDomainChannelConfig"))
    annotations = store.get("v1", "Node", "n0")["metadata"]["annotations"]
    assert annotations["resource.nvidia.com/imexChannels"] == f'{{"{a}": 0, "{b}": 1}}'
    # On n1 channel 0 is free, but b already uses channel 1 in the clique: it keeps 1 there.
    other = ComputeDomainHandler("n1", store, tmp_path / "n1", clique=CLIQUE)
    plugin1 = DraPlugin(other, tmp_path / "n1", tmp_path / "cdi1", store)
    claim = _claim("b-ch2", "u3", "channel-0", b, "ComputeDomainChannelConfig")
    claim["status"]["allocation"]["devices"]["results"][0]["pool"] = "n1"
    assert not _prepare(plugin1, claim).error
    assert other.channels() == {b: 1}


def test_channels_stay_distinct_under_any_prepare_unprepare_order(tmp_path: Path) -> None:
    """Property: whatever order claims of three domains come and go in on one node, two
    domains never hold the same channel and all claims of one domain share its channel."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    ops = st.lists(st.tuples(st.booleans(), st.integers(0, 2), st.integers(0, 3)), max_size=25)

    @settings(max_examples=40, deadline=None)
    @given(ops)
    def run(steps: list[tuple[bool, int, int]]) -> None:
        store = MemoryStore()
        _node(store, "n0", "10.0.0.1")
        uids = [_domain(store, f"d{i}") for i in range(3)]
        handler = ComputeDomainHandler("n0", store, tmp_path / "p", clique=CLIQUE)
        live: dict[str, str] = {}  # claim uid -> domain
        paths: dict[str, str] = {}  # claim uid -> channel device injected
        for add, d, slot in steps:
            claim_uid = f"c{d}-{slot}"
            if add and claim_uid not in live:
                claim = _claim(
                    claim_uid, claim_uid, f"channel-{slot}", uids[d], "ComputeDomainChannelConfig"
                )
                prepared = handler.prepare(claim_info(claim, "compute-domain.nvidia.com"))
                (node,) = prepared.devices[0].edits.device_nodes
                live[claim_uid] = uids[d]
                paths[claim_uid] = node.path
            elif not add and claim_uid in live:
                handler.unprepare(claim_uid, None)
                del live[claim_uid]
            channels = handler.channels()
            assert set(channels) == set(live.values())
            assert len(set(channels.values())) == len(channels)
            for claim_uid, domain in live.items():
                assert paths[claim_uid].endswith(f"/channel{channels[domain]}")

    run()
