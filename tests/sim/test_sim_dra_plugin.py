"""The DynamicResources scheduler plugin on the in-memory store, as the simulator drives it
(with the resourceclaim controller, which makes a pod's template claims before the scheduler
sees the pod)."""

from __future__ import annotations

import kubernetes_validate
import pytest

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


@pytest.fixture
def store() -> MemoryStore:
    st = MemoryStore()
    ensure_classes(st, device_classes())
    for n in ("n1", "n2"):
        publish_slices(
            st, "gpu.nvidia.com", n, resource_slices(load_machine("gb200", hostname=n), n)
        )
    st.create(claim_template("four", 4))
    st.create(claim_template("one", 1))
    return st


NVLINK5 = "device.attributes['gpu.nvidia.com'].nvlinkVersion >= 5"


def pod(store: MemoryStore, name: str, *claims: dict) -> dict:
    return store.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c"}], "resourceClaims": list(claims)},
        }
    )


def node(name: str) -> NodeInfo:
    return NodeInfo(name, {}, {"metadata": {"name": name}})


def schedule(
    plugin: DraSchedulerPlugin, store: MemoryStore, p: dict, claims: ResourceClaimController
) -> str | list[str]:
    """What the simulator does: the resourceclaim controller makes the pod's template claims,
    then prefilter, filter nodes in order, reserve the first that fits."""
    claims.sync_pod(p, store)
    reason = plugin.prefilter(p, store)
    if reason:
        return reason
    reasons = []
    for n in ("n1", "n2"):
        why = plugin.filter(p, node(n), store)
        if why is None:
            plugin.reserve(p, node(n), store)
            return n
        reasons.append(why)
    return reasons


def claims_of(store: MemoryStore) -> dict[str, dict]:
    return {c["metadata"]["name"]: c for c in store.list(API, "ResourceClaim")}


def test_template_claims_are_created_allocated_reserved_and_released(store: MemoryStore) -> None:
    plugin = DraSchedulerPlugin()
    claims = ResourceClaimController()
    p = pod(store, "train-0", {"name": "gpus", "resourceClaimTemplateName": "four"})
    assert schedule(plugin, store, p, claims) == "n1"
    (status,) = p["status"]["resourceClaimStatuses"]
    assert status["name"] == "gpus"
    claim_name = status["resourceClaimName"]
    assert claim_name.startswith("train-0-gpus-") and len(claim_name) == len("train-0-gpus-") + 5
    stored_pod = store.get("v1", "Pod", "train-0", "default")
    assert stored_pod["status"]["resourceClaimStatuses"] == p["status"]["resourceClaimStatuses"]
    claim = claims_of(store)[claim_name]
    kubernetes_validate.validate(claim, "1.34.0", strict=True)
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpus"
    assert claim["metadata"]["ownerReferences"][0]["name"] == "train-0"
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [r["device"] for r in results] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    assert {r["pool"] for r in results} == {"n1"}
    assert claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
        "values"
    ] == ["n1"]
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "train-0", "uid": p["metadata"]["uid"]}
    ]
    # the next 4-GPU pod goes to n2, the third does not fit anywhere
    assert (
        schedule(
            plugin,
            store,
            pod(store, "train-1", {"name": "gpus", "resourceClaimTemplateName": "four"}),
            claims,
        )
        == "n2"
    )
    p3 = pod(store, "train-2", {"name": "gpus", "resourceClaimTemplateName": "four"})
    assert schedule(plugin, store, p3, claims) == ["cannot allocate all claims"] * 2
    # the first pod goes away: its GPUs are free again, and the resourceclaim controller
    # deletes the claim it made for it
    plugin.release(p, store)
    assert "allocation" not in claims_of(store)[claim_name].get("status", {})
    store.delete("v1", "Pod", "train-0", "default")
    claims.collect(store)
    assert claim_name not in claims_of(store)
    assert schedule(plugin, store, p3, claims) == "n1"


def test_shared_claim_deallocated_when_last_consumer_goes(store: MemoryStore) -> None:
    store.create(
        {
            "apiVersion": API,
            "kind": "ResourceClaim",
            "metadata": {"name": "shared", "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
                }
            },
        }
    )
    plugin = DraSchedulerPlugin()
    claims = ResourceClaimController()
    a = pod(store, "a", {"name": "g", "resourceClaimName": "shared"})
    b = pod(store, "b", {"name": "g", "resourceClaimName": "shared"})
    assert schedule(plugin, store, a, claims) == "n1"
    # the claim is allocated on n1: the second consumer can only go there
    assert plugin.prefilter(b, store) is None
    assert plugin.filter(b, node("n2"), store) == "resourceclaim not available on the node"
    assert schedule(plugin, store, b, claims) == "n1"
    shared = claims_of(store)["shared"]
    assert len(shared["status"]["reservedFor"]) == 2
    plugin.release(a, store)
    shared = claims_of(store)["shared"]
    assert [r["name"] for r in shared["status"]["reservedFor"]] == ["b"]
    assert shared["status"]["allocation"]
    plugin.release(b, store)
    shared = claims_of(store)["shared"]
    assert "status" not in shared  # deallocated, but a user's claim is kept


def test_unreserve_undoes_reserve(store: MemoryStore) -> None:
    plugin = DraSchedulerPlugin()
    claims = ResourceClaimController()
    p = pod(store, "p", {"name": "gpus", "resourceClaimTemplateName": "four"})
    assert schedule(plugin, store, p, claims) == "n1"
    plugin.unreserve(p, node("n1"), store)
    (claim,) = claims_of(store).values()
    assert "allocation" not in claim.get("status", {})
    q = pod(store, "q", {"name": "gpus", "resourceClaimTemplateName": "four"})
    assert schedule(plugin, store, q, claims) == "n1"  # the GPUs were given back


def test_pod_stays_pending_with_the_scheduler_message(store: MemoryStore) -> None:
    store.create(claim_template("bad", 1, selector=NVLINK5))
    plugin = DraSchedulerPlugin()
    claims = ResourceClaimController()
    p = pod(store, "p", {"name": "gpus", "resourceClaimTemplateName": "bad"})
    reasons = schedule(plugin, store, p, claims)
    assert isinstance(reasons, list)
    assert reasons[0].startswith("claim default/p-gpus-")
    assert "selector #0: CEL runtime error: no such key: nvlinkVersion" in reasons[0]
    # a template that does not exist: the controller warns, the scheduler waits for the claim
    missing = pod(store, "m", {"name": "gpus", "resourceClaimTemplateName": "nope"})
    (event,) = claims.sync_pod(missing, store)
    assert (event.type, event.reason, event.object) == (
        "Warning",
        "FailedResourceClaimCreation",
        "Pod/default/m",
    )
    assert event.message == (
        'PodResourceClaim gpus: resourceclaimtemplate.resource.k8s.io "nope" not found'
    )
    assert claims.sync_pod(missing, store) == []  # said once
    assert plugin.prefilter(missing, store) == 'pod "default/m": ResourceClaim not created yet'
    direct = pod(store, "d", {"name": "gpus", "resourceClaimName": "nope"})
    assert plugin.prefilter(direct, store) == 'resourceclaim "nope" not found'


def test_pods_without_claims_pass(store: MemoryStore) -> None:
    plugin = DraSchedulerPlugin()
    p = store.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "plain"},
            "spec": {"containers": [{"name": "c"}]},
        }
    )
    assert plugin.prefilter(p, store) is None
    assert plugin.filter(p, node("n1"), store) is None
    plugin.reserve(p, node("n1"), store)
    plugin.release(p, store)


def test_new_slices_are_seen(store: MemoryStore) -> None:
    plugin = DraSchedulerPlugin()
    claims = ResourceClaimController()
    for i in range(2):
        assert schedule(
            plugin,
            store,
            pod(store, f"p{i}", {"name": "g", "resourceClaimTemplateName": "four"}),
            claims,
        ) in ("n1", "n2")
    p = pod(store, "late", {"name": "g", "resourceClaimTemplateName": "one"})
    assert isinstance(schedule(plugin, store, p, claims), list)
    publish_slices(
        store, "gpu.nvidia.com", "n3", resource_slices(load_machine("gb200", hostname="n3"), "n3")
    )
    assert plugin.prefilter(p, store) is None
    assert plugin.filter(p, node("n3"), store) is None


def test_a_retried_pod_gets_one_generated_claim(store: MemoryStore) -> None:
    """The scheduler retries with its own copy of the pod, which may predate the status that
    records the generated claim: no second claim appears."""
    import copy

    plugin = DraSchedulerPlugin()
    claims = ResourceClaimController()
    p = pod(store, "big", {"name": "g", "resourceClaimTemplateName": "four"})
    stale = copy.deepcopy(p)
    for n in ("n1", "n2"):
        publish_slices(store, "gpu.nvidia.com", n, [])  # no GPUs: stays pending
    assert schedule(plugin, store, p, claims) == ["cannot allocate all claims"] * 2
    assert schedule(plugin, store, stale, claims) == ["cannot allocate all claims"] * 2
    assert (
        schedule(DraSchedulerPlugin(), store, copy.deepcopy(stale), ResourceClaimController())
        == ["cannot allocate all claims"] * 2
    )
    assert len(claims_of(store)) == 1


def test_each_pod_gets_an_error_naming_its_own_claim(store: MemoryStore) -> None:
    store.create(claim_template("bad", 1, selector=NVLINK5))
    plugin = DraSchedulerPlugin()
    claims = ResourceClaimController()
    for name in ("a", "b"):
        p = pod(store, name, {"name": "gpus", "resourceClaimTemplateName": "bad"})
        reasons = schedule(plugin, store, p, claims)
        assert isinstance(reasons, list)
        assert all(r.startswith(f"claim default/{name}-gpus-") for r in reasons)
