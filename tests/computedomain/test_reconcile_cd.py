"""The controller as a pure reconcile pass over a MemoryStore, and the objects it emits
validated against the official Kubernetes OpenAPI schemas and the ComputeDomain CRD."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kgpu.computedomain.api import API_VERSION, FINALIZER, node_label, parse_compute_domain
from kgpu.computedomain.crd import crd, validate_object
from kgpu.computedomain.objects import DRIVER_NAMESPACE, daemon_object_name
from kgpu.computedomain.placement import NodeRoom, place
from kgpu.computedomain.reconcile import reconcile
from kgpu.computedomain.slices import node_slice
from kgpu.errors import FieldError
from kgpu.store import MemoryStore, NotFound

REPO = Path(__file__).resolve().parents[2]
K8S = "1.34.0"


def _cd(name: str = "dom", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {
            "numNodes": 2,
            "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}},
            **spec,
        },
    }


def _owned(store: MemoryStore) -> list[dict[str, Any]]:
    return store.list("resource.k8s.io/v1", "ResourceClaimTemplate") + store.list(
        "apps/v1", "DaemonSet"
    )


def test_first_pass_creates_owned_objects_and_finalizer() -> None:
    store = MemoryStore()
    store.create(_cd())
    events = reconcile(store)
    cd = store.get(API_VERSION, "ComputeDomain", "dom", "team")
    uid = cd["metadata"]["uid"]
    assert FINALIZER in cd["metadata"]["finalizers"]
    channel = store.get("resource.k8s.io/v1", "ResourceClaimTemplate", "dom-ch", "team")
    request = channel["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"]["deviceClassName"] == "compute-domain-default-channel.nvidia.com"
    params = channel["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params == {
        "apiVersion": API_VERSION,
        "kind": "ComputeDomainChannelConfig",
        "domainID": uid,
    }
    domain = parse_compute_domain(cd)
    ds = store.get("apps/v1", "DaemonSet", daemon_object_name(domain), DRIVER_NAMESPACE)
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {node_label(uid): "true"}
    daemon = store.get(
        "resource.k8s.io/v1", "ResourceClaimTemplate", daemon_object_name(domain), DRIVER_NAMESPACE
    )
    assert (
        daemon["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]
        == "compute-domain-daemon.nvidia.com"
    )
    assert cd["status"]["status"] == "NotReady"
    assert cd["status"]["conditions"][0]["reason"] == "WaitingForDaemons"
    assert sum(e.reason == "Created" for e in events) == 3


def test_reconcile_is_idempotent() -> None:
    store = MemoryStore()
    store.create(_cd())
    reconcile(store)
    revision = store.revision
    assert reconcile(store) == []
    assert store.revision == revision


def test_all_mode_reaches_the_channel_config() -> None:
    store = MemoryStore()
    store.create(
        _cd(channel={"resourceClaimTemplate": {"name": "dom-ch"}, "allocationMode": "All"})
    )
    reconcile(store)
    channel = store.get("resource.k8s.io/v1", "ResourceClaimTemplate", "dom-ch", "team")
    params = channel["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["allocationMode"] == "All"


def test_delete_removes_everything_the_domain_owns() -> None:
    store = MemoryStore()
    store.create(_cd())
    store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0"}})
    reconcile(store)
    uid = store.get(API_VERSION, "ComputeDomain", "dom", "team")["metadata"]["uid"]
    node = store.get("v1", "Node", "n0")
    node["metadata"]["labels"] = {node_label(uid): "true", "keep": "me"}
    store.update(node)
    store.delete(API_VERSION, "ComputeDomain", "dom", "team")
    assert store.get(API_VERSION, "ComputeDomain", "dom", "team")["metadata"]["deletionTimestamp"]
    reconcile(store)
    with pytest.raises(NotFound):
        store.get(API_VERSION, "ComputeDomain", "dom", "team")
    assert _owned(store) == []
    assert store.get("v1", "Node", "n0")["metadata"]["labels"] == {"keep": "me"}


def test_orphans_of_a_vanished_domain_are_collected() -> None:
    store = MemoryStore()
    store.create(_cd())
    reconcile(store)
    cd = store.get(API_VERSION, "ComputeDomain", "dom", "team")
    cd["metadata"]["finalizers"] = []
    store.update(cd)
    store.delete(API_VERSION, "ComputeDomain", "dom", "team")  # gone while no controller ran
    reconcile(store)
    assert _owned(store) == []


def test_a_users_template_of_the_same_name_is_left_alone() -> None:
    store = MemoryStore()
    mine = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "dom-ch", "namespace": "team"},
        "spec": {"spec": {"devices": {"requests": []}}},
    }
    store.create(mine)
    store.create(_cd())
    events = reconcile(store)
    assert any(e.reason == "NameConflict" and "team/dom-ch" in e.message for e in events)
    kept = store.get("resource.k8s.io/v1", "ResourceClaimTemplate", "dom-ch", "team")
    assert kept["spec"] == mine["spec"]


def test_invalid_domain_is_reported_with_field_paths() -> None:
    bad = _cd()
    bad["spec"]["numNodes"] = -1
    bad["spec"]["channel"]["allocationMode"] = "Some"
    with pytest.raises(FieldError) as info:
        parse_compute_domain(bad)
    paths = {p.path for p in info.value.problems}
    assert paths == {"spec.numNodes", "spec.channel.allocationMode"}
    store = MemoryStore()
    store.create(bad)
    (event,) = reconcile(store)
    assert event.reason == "InvalidSpec" and "spec.numNodes" in event.message
    assert _owned(store) == []


def test_emitted_objects_validate_against_official_schemas() -> None:
    store = MemoryStore()
    store.create(_cd())
    store.create(
        _cd("other", channel={"resourceClaimTemplate": {"name": "o"}, "allocationMode": "All"})
    )
    reconcile(store)
    objects = [*_owned(store), node_slice("gb200-0")]
    assert len(objects) == 7
    for obj in objects:
        kubernetes_validate.validate(obj, K8S, strict=True)
    for cd in store.list(API_VERSION, "ComputeDomain"):
        validate_object(cd)


def test_crd_manifest_is_valid_and_current() -> None:
    chart_crd = REPO / "deploy" / "helm" / "kgpu" / "crds" / "computedomain.yaml"
    manifest = yaml.safe_load(chart_crd.read_text())
    assert manifest == crd()
    kubernetes_validate.validate(manifest, K8S, strict=True)


def test_seed_guide_domains_validate_against_the_crd(acceptance: Path) -> None:
    for name in ("imex-channel-injection.yaml", "nvbandwidth-test-job.yaml"):
        docs = yaml.safe_load_all((acceptance / "seed-guides" / name).read_text())
        (cd,) = [d for d in docs if d and d["kind"] == "ComputeDomain"]
        validate_object(cd)
        assert parse_compute_domain(cd).spec.allocation_mode == "Single"
    broken = _cd()
    broken["status"] = {"status": "Sleeping"}
    with pytest.raises(FieldError, match=r"status\.status"):
        validate_object(broken)


def test_crd_violation_inside_a_list_names_the_item() -> None:
    broken = _cd()
    broken["status"] = {"nodes": [{"name": "n0", "index": "first"}]}
    with pytest.raises(FieldError) as info:
        validate_object(broken)
    assert "status.nodes[0].index" in [p.path for p in info.value.problems]


def test_placement_needs_a_clique_with_room_for_num_nodes() -> None:
    nodes = [
        NodeRoom("a0", "A.0", True),
        NodeRoom("a1", "A.0", False),
        NodeRoom("b0", "B.0", True),
        NodeRoom("b1", "B.0", True),
        NodeRoom("x", None, True),
    ]
    assert place("ns/d", 2, {}, nodes).allowed == frozenset({"b0", "b1"})
    none = place("ns/d", 3, {}, nodes)
    assert none.allowed == frozenset()
    assert none.reason == (
        "no NVLink clique has 3 node(s) with room for ComputeDomain ns/d: "
        "clique B.0: 2 node(s), clique A.0: 1 node(s)"
    )
    grown = place("ns/d", 2, {"a1": "A.0"}, nodes)
    assert grown.allowed == frozenset({"a0", "a1"}) and grown.reason is None
    full = place("ns/d", 1, {"a1": "A.0"}, nodes)
    assert full.allowed == frozenset({"a1"})
    assert full.reason and "already spans 1 of 1 node(s) (a1)" in full.reason
    unbounded = place("ns/d", 0, {"b0": "B.0"}, nodes)
    assert unbounded.allowed == frozenset({"b0", "b1"})


def test_one_rule_decides_which_pods_are_members_of_a_domain() -> None:
    from kgpu.computedomain.api import WORKLOAD_LABEL
    from kgpu.computedomain.members import domain_members, holds_channel, pending_pods

    domain = parse_compute_domain(
        {**_cd(), "metadata": {"name": "dom", "namespace": "team", "uid": "u1"}}
    )

    def pod(name: str, node: str | None = None, ns: str = "team", **extra: Any) -> dict[str, Any]:
        meta = {"name": name, "namespace": ns, **extra.pop("meta", {})}
        spec: dict[str, Any] = {
            "resourceClaims": [{"name": "c", "resourceClaimTemplateName": "dom-ch"}]
        }
        if node:
            spec["nodeName"] = node
        return {"metadata": meta, "spec": spec, **extra}

    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    nodes = {
        "n0": {"metadata": {"name": "n0", "labels": {"nvidia.com/gpu.clique": "A.0"}}, **ready},
        "n1": {"metadata": {"name": "n1", "labels": {"nvidia.com/gpu.clique": "A.0"}}, **ready},
        "n2": {
            "metadata": {"name": "n2"},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]},
        },
    }
    by_label = pod("named-claim", "n1")
    by_label["spec"]["resourceClaims"] = [{"name": "c", "resourceClaimName": "mine"}]
    by_label["metadata"]["labels"] = {WORKLOAD_LABEL: "u1"}
    pods = [
        pod("running", "n0"),
        by_label,  # counted through the webhook's label
        pod("done", "n0", status={"phase": "Succeeded"}),  # finished: not a member
        pod("leaving", "n0", meta={"deletionTimestamp": "2025-01-01T00:00:00Z"}),
        pod("elsewhere", "n0", ns="other"),  # another namespace's template of that name
        pod("on-failed-node", "n2"),  # its node is NotReady
        pod("waiting"),
    ]
    assert [p["metadata"]["name"] for p in pods if holds_channel(p, domain)] == [
        "running",
        "named-claim",
        "on-failed-node",
        "waiting",
    ]
    assert domain_members(domain, pods, nodes.get) == {"n0": "A.0", "n1": "A.0"}
    assert [p["metadata"]["name"] for p in pending_pods(domain, pods)] == ["waiting"]


def test_daemons_are_listed_per_clique_and_status_goes_through_the_status_subresource() -> None:
    store = MemoryStore()
    store.create(_cd())
    for i in range(2):
        store.create(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": f"n{i}", "labels": {"nvidia.com/gpu.clique": "A.0"}},
                "status": {"addresses": [{"type": "InternalIP", "address": f"10.0.0.{i + 1}"}]},
            }
        )
    reconcile(store)
    cd = store.get(API_VERSION, "ComputeDomain", "dom", "team")
    uid = cd["metadata"]["uid"]
    for i in range(2):
        store.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"d{i}",
                    "namespace": DRIVER_NAMESPACE,
                    "labels": {"resource.nvidia.com/computeDomain": uid},
                },
                "spec": {"nodeName": f"n{i}"},
                "status": {"phase": "Running", "podIP": f"192.168.0.{i + 1}"},
            }
        )
    reconcile(store)
    (clique,) = store.list(API_VERSION, "ComputeDomainClique")
    assert clique["metadata"]["name"] == f"{uid}.A.0"
    assert clique["metadata"]["namespace"] == DRIVER_NAMESPACE
    assert [(d["nodeName"], d["ipAddress"], d["index"]) for d in clique["daemons"]] == [
        ("n0", "192.168.0.1", 0),
        ("n1", "192.168.0.2", 1),
    ]
    validate_object(clique)
    cd = store.get(API_VERSION, "ComputeDomain", "dom", "team")
    assert cd["status"]["status"] == "Ready"
    validate_object(cd)
    revision = store.revision
    assert reconcile(store) == [] and store.revision == revision  # nothing changed: no write


def test_num_nodes_is_optional_as_upstream_ships_it_now() -> None:
    upstream = {
        "apiVersion": API_VERSION,
        "kind": "ComputeDomain",
        "metadata": {"name": "d", "namespace": "team"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "d-ch"}, "allocationMode": "All"}},
    }
    validate_object(upstream)
    parsed = parse_compute_domain(upstream)
    assert parsed.spec.num_nodes == 0 and parsed.spec.allocation_mode == "All"
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert schema["required"] == ["channel"]
    assert schema["properties"]["numNodes"]["default"] == 0
    store = MemoryStore()
    store.create(upstream)
    reconcile(store)
    status = store.get(API_VERSION, "ComputeDomain", "d", "team")["status"]
    assert status["conditions"][0]["message"] == "0 of 1 IMEX daemon(s) Ready"
