"""The DynamicResources plugin's cached answers (per claim shape and node, free devices per
node) follow every allocation and release, including writes made behind its back."""

from __future__ import annotations

from typing import Any

from kgpu.dra.classes import device_classes
from kgpu.dra.slices import resource_slices
from kgpu.drivers.publish import publish_slices
from kgpu.hardware.profiles import load_machine
from kgpu.sim.controllers.resourceclaim import ResourceClaimController
from kgpu.sim.dra_scheduler import DraSchedulerPlugin, ensure_classes
from kgpu.sim.plugins import NodeInfo
from kgpu.store import MemoryStore
from kgpu.testing.manifests import claim_template

API = "resource.k8s.io/v1"
NODES = ("n1", "n2", "n3")


def cluster() -> MemoryStore:
    st = MemoryStore()
    ensure_classes(st, device_classes())
    for n in NODES:
        publish_slices(
            st, "gpu.nvidia.com", n, resource_slices(load_machine("gb200", hostname=n), n)
        )
    for name, count in (("one", 1), ("four", 4)):
        st.create(claim_template(name, count))
    return st


def pod(st: MemoryStore, name: str, template: str) -> dict[str, Any]:
    return st.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "containers": [{"name": "c"}],
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
            },
        }
    )


def node(name: str) -> NodeInfo:
    return NodeInfo(name, {}, {"metadata": {"name": name}})


def feasible(plugin: DraSchedulerPlugin, st: MemoryStore, p: dict[str, Any]) -> list[str]:
    ResourceClaimController().sync_pod(p, st)  # the pod's claims from its templates, first
    assert plugin.prefilter(p, st) is None
    return [n for n in NODES if plugin.filter(p, node(n), st) is None]


def test_answers_follow_allocations_and_releases() -> None:
    st = cluster()
    plugin = DraSchedulerPlugin()
    plugin.sync(st)
    assert [plugin.free_devices(node(n)) for n in NODES] == [4, 4, 4]
    # fill n1 with four one-GPU pods: the answers for n1 change, the others stay
    ones = [pod(st, f"one-{i}", "one") for i in range(4)]
    for i, p in enumerate(ones):
        assert feasible(plugin, st, p) == list(NODES)
        plugin.reserve(p, node("n1"), st)
        assert plugin.free_devices(node("n1")) == 3 - i
    assert [plugin.free_devices(node(n)) for n in NODES] == [0, 4, 4]
    assert feasible(plugin, st, pod(st, "one-4", "one")) == ["n2", "n3"]
    big = pod(st, "four-0", "four")
    assert feasible(plugin, st, big) == ["n2", "n3"]
    plugin.reserve(big, node("n2"), st)
    assert feasible(plugin, st, pod(st, "four-1", "four")) == ["n3"]
    # a pod goes: its GPU is free again, for both claim shapes
    plugin.release(ones[0], st)
    assert plugin.free_devices(node("n1")) == 1
    assert feasible(plugin, st, pod(st, "one-5", "one")) == ["n1", "n3"]
    assert feasible(plugin, st, pod(st, "four-2", "four")) == ["n3"]


def test_a_claim_written_behind_the_plugins_back_is_seen() -> None:
    st = cluster()
    plugin = DraSchedulerPlugin()
    first = pod(st, "four-0", "four")
    assert feasible(plugin, st, first) == list(NODES)
    plugin.reserve(first, node("n1"), st)
    # someone else deallocates the claim (the resourceclaim controller after the pod went)
    claim = st.list(API, "ResourceClaim")[0]
    claim["status"] = {}
    claim["metadata"].pop("resourceVersion")
    st.update(claim)
    assert feasible(plugin, st, pod(st, "four-1", "four")) == list(NODES)
    assert plugin.free_devices(node("n1")) == 4


def test_reserve_rereads_a_claim_changed_since_prefilter() -> None:
    st = cluster()
    plugin = DraSchedulerPlugin()
    p = pod(st, "one-0", "one")
    assert feasible(plugin, st, p) == list(NODES)
    claim = st.list(API, "ResourceClaim")[0]
    claim["metadata"]["labels"] = {"team": "a"}  # written between PreFilter and Reserve
    claim["metadata"].pop("resourceVersion")
    st.update(claim)
    plugin.reserve(p, node("n1"), st)
    stored = st.list(API, "ResourceClaim")[0]
    assert stored["metadata"]["labels"] == {"team": "a"}
    assert stored["status"]["allocation"]["devices"]["results"][0]["pool"] == "n1"
