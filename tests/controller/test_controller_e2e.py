"""``kgpu controller`` against the API-server stand-in: a domain reconciled end to end from
events, a failed node healed out of the domain, DeviceClasses kept present, and no request
at idle beyond the watches and the Lease."""

from __future__ import annotations

from collections import Counter
from typing import Any

from controller_cluster import (  # type: ignore[import-not-found]
    NAMESPACE,
    RACK_A,
    Cluster,
    domain,
    node,
    wait_for,
)

from kgpu.computedomain.api import API_VERSION, FINALIZER, node_label

RES = "resource.k8s.io/v1"


def _cd(cluster: Cluster, name: str = "train") -> dict[str, Any]:
    return dict(cluster.admin.get(API_VERSION, "ComputeDomain", name, "ml"))


def _daemon_pod(cluster: Cluster, uid: str, node_name: str, ip: str) -> None:
    """What the DaemonSet controller and the kubelet would do: a Running daemon pod."""
    (ds,) = cluster.admin.list("apps/v1", "DaemonSet", namespace=NAMESPACE)
    template = ds["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{ds['metadata']['name']}-{node_name}",
            "namespace": NAMESPACE,
            "labels": template["metadata"]["labels"],
        },
        "spec": {**template["spec"], "nodeName": node_name},
    }
    pod["spec"].pop("nodeSelector")
    created = cluster.admin.create(pod)
    created["status"] = {
        "phase": "Running",
        "podIP": ip,
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    cluster.admin.update(created)


def test_a_domain_is_reconciled_end_to_end_and_heals_when_a_node_fails(cluster: Cluster) -> None:
    admin = cluster.admin
    for i in range(3):
        admin.create(node(f"tray-{i}", RACK_A, f"10.0.0.{i + 1}"))
    ctl = cluster.controller("replica-a")
    assert wait_for(lambda: ctl.leading)
    admin.create(domain("train", num_nodes=2))

    # the domain's objects, its finalizer and a NotReady status, from the ComputeDomain's event
    cd = wait_for(lambda: (c := _cd(cluster)).get("status") and c)
    uid = cd["metadata"]["uid"]
    assert FINALIZER in cd["metadata"]["finalizers"]
    assert cd["status"]["status"] == "NotReady"
    assert cd["status"]["conditions"][0]["reason"] == "WaitingForDaemons"
    assert admin.get(RES, "ResourceClaimTemplate", "train-channel", "ml")
    (ds,) = admin.list("apps/v1", "DaemonSet", namespace=NAMESPACE)
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {node_label(uid): "true"}

    # two nodes join (the agents label them; the daemons start): cliques, status Ready
    for i in range(2):
        admin.patch("v1", "Node", f"tray-{i}", {"metadata": {"labels": {node_label(uid): "true"}}})
        _daemon_pod(cluster, uid, f"tray-{i}", f"192.168.7.{i + 1}")
    cd = wait_for(lambda: (c := _cd(cluster))["status"]["status"] == "Ready" and c)
    assert cd, _cd(cluster)["status"]
    assert [(n["name"], n["ipAddress"], n["index"]) for n in cd["status"]["nodes"]] == [
        ("tray-0", "192.168.7.1", 0),
        ("tray-1", "192.168.7.2", 1),
    ]
    (clique,) = admin.list(API_VERSION, "ComputeDomainClique", namespace=NAMESPACE)
    assert clique["metadata"]["name"] == f"{uid}.{RACK_A}"
    assert [d["nodeName"] for d in clique["daemons"]] == ["tray-0", "tray-1"]
    # the controller records the event after it writes the status: wait for it, not race it
    assert wait_for(
        lambda: (
            "ComputeDomainReady" in [e["reason"] for e in admin.list("v1", "Event", namespace="ml")]
        )
    ), [e["reason"] for e in admin.list("v1", "Event", namespace="ml")]

    # tray-0 fails: its label is dropped (its daemon goes), the domain is NotReady
    admin.patch(
        "v1",
        "Node",
        "tray-0",
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        subresource="status",
    )
    assert wait_for(
        lambda: node_label(uid) not in admin.get("v1", "Node", "tray-0")["metadata"]["labels"]
    )
    cd = wait_for(lambda: (c := _cd(cluster))["status"]["status"] == "NotReady" and c)
    assert cd["status"]["conditions"][0]["reason"] == "NodeNotReady"
    # the DaemonSet controller removes the daemon; a replacement joins on tray-2
    admin.delete("v1", "Pod", f"{ds['metadata']['name']}-tray-0", NAMESPACE)
    admin.patch("v1", "Node", "tray-2", {"metadata": {"labels": {node_label(uid): "true"}}})
    _daemon_pod(cluster, uid, "tray-2", "192.168.7.3")
    cd = wait_for(lambda: (c := _cd(cluster))["status"]["status"] == "Ready" and c)
    assert cd, _cd(cluster)["status"]
    # tray-2 takes the index tray-0 left: every other daemon keeps its DNS name
    assert [(n["name"], n["index"]) for n in cd["status"]["nodes"]] == [
        ("tray-1", 1),
        ("tray-2", 0),
    ]

    # deleted: everything it owned goes, then the finalizer, then the domain
    admin.delete(API_VERSION, "ComputeDomain", "train", "ml")
    assert wait_for(lambda: not admin.list(API_VERSION, "ComputeDomain"))
    assert admin.list("apps/v1", "DaemonSet", namespace=NAMESPACE) == []
    assert admin.list(API_VERSION, "ComputeDomainClique") == []
    assert admin.list(RES, "ResourceClaimTemplate") == []
    labels = [n["metadata"].get("labels") or {} for n in admin.list("v1", "Node")]
    assert not any(node_label(uid) in lab for lab in labels)


def test_at_idle_the_controller_sends_only_lease_renewals(cluster: Cluster) -> None:
    admin = cluster.admin
    for i in range(4):
        admin.create(node(f"tray-{i}", RACK_A, f"10.0.0.{i + 1}"))
    admin.create(domain("train"))
    ctl = cluster.controller("replica-a")
    assert wait_for(lambda: _cd(cluster).get("status"))
    assert wait_for(lambda: len(ctl.queue) == 0 and ctl.queue.waiting() == 0)
    import time

    time.sleep(0.5)  # our own writes' events come back and find nothing to do
    mark = len(cluster.server.requests)
    time.sleep(2.0)
    mine = [r for r in cluster.server.requests[mark:] if r.user_agent.startswith("kgpu-controller")]
    kinds = Counter(f"{r.verb} {r.resource}" for r in mine)
    assert set(kinds) <= {"update leases"}, kinds  # the leader renews with one PUT
    assert 4 <= kinds["update leases"] <= 12  # every 0.2 s retry period, for 2 s


def test_a_users_template_of_the_channel_name_is_left_alone_and_reported(
    cluster: Cluster,
) -> None:
    """The create finds the name taken; the controller reads the object back from its
    informer (not the API server: its role has no ``get`` there) and reports the conflict."""
    admin = cluster.admin
    mine = {
        "apiVersion": RES,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "train-channel", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": []}}},
    }
    admin.create(mine)
    admin.create(domain("train"))
    cluster.controller("replica-a")

    def conflict() -> list[str]:
        return [
            e["message"]
            for e in admin.list("v1", "Event", namespace="ml")
            if e["reason"] == "NameConflict"
        ]

    assert wait_for(conflict), [e["reason"] for e in admin.list("v1", "Event", namespace="ml")]
    assert "ml/train-channel" in conflict()[0]
    kept = admin.get(RES, "ResourceClaimTemplate", "train-channel", "ml")
    assert kept["spec"] == mine["spec"] and "labels" not in kept["metadata"]
    gets = [
        r
        for r in cluster.server.requests
        if r.user_agent.startswith("kgpu-controller")
        and r.verb == "get"
        and r.resource == "resourceclaimtemplates"
    ]
    assert gets == []


def test_a_deleted_device_class_is_created_again(cluster: Cluster) -> None:
    ctl = cluster.controller("replica-a")
    assert wait_for(lambda: len(cluster.admin.list(RES, "DeviceClass")) == 4)
    cluster.admin.delete(RES, "DeviceClass", "compute-domain-daemon.nvidia.com")
    assert wait_for(
        lambda: (
            "compute-domain-daemon.nvidia.com"
            in {c["metadata"]["name"] for c in cluster.admin.list(RES, "DeviceClass")}
        )
    )
    assert ctl.classes.created >= 5


def test_objects_of_a_domain_deleted_while_no_controller_ran_are_removed(cluster: Cluster) -> None:
    admin = cluster.admin
    admin.create(node("tray-0", RACK_A, "10.0.0.1"))
    orphan = {"resource.nvidia.com/computeDomain": "gone-uid"}
    admin.create(
        {
            "apiVersion": API_VERSION,
            "kind": "ComputeDomainClique",
            "metadata": {"name": f"gone-uid.{RACK_A}", "namespace": NAMESPACE, "labels": orphan},
            "daemons": [],
        }
    )
    admin.patch("v1", "Node", "tray-0", {"metadata": {"labels": {node_label("gone-uid"): "true"}}})
    cluster.controller("replica-a")
    assert wait_for(lambda: admin.list(API_VERSION, "ComputeDomainClique") == [])
    assert wait_for(
        lambda: (
            node_label("gone-uid") not in admin.get("v1", "Node", "tray-0")["metadata"]["labels"]
        )
    )


def test_on_kubernetes_1_32_the_controller_speaks_v1beta1(tmp_path: Any) -> None:
    """DeviceClasses and claim templates in the version a 1.32 cluster serves (the stand-in
    refuses a v1 object there, and checks each write against 1.32's schema)."""
    from kgpu.testing.apiserver import FakeApiServer

    server = FakeApiServer(release="1.32").start()
    cluster = Cluster(server, tmp_path)
    try:
        cluster.controller("replica-a")
        cluster.admin.create(domain("old"))
        assert wait_for(lambda: len(cluster.admin.list(RES, "DeviceClass")) == 4)
        assert wait_for(
            lambda: cluster.admin.get(API_VERSION, "ComputeDomain", "old", "ml").get("status")
        )
        assert cluster.admin.get(RES, "ResourceClaimTemplate", "old-channel", "ml")
        served = {r.version for r in server.requests if r.group == "resource.k8s.io" and r.version}
        assert served == {"v1beta1"}
    finally:
        cluster.close()
        server.stop()


def test_the_imex_daemons_run_the_image_the_controller_is_given(cluster: Cluster) -> None:
    """A cluster that cannot reach nvcr.io mirrors the IMEX image; the chart passes
    ``controller.imexDaemonImage`` as ``--imex-daemon-image``."""
    admin = cluster.admin
    admin.create(node("tray-0", RACK_A, "10.0.0.1"))
    mirror = "registry.example.com/nvidia/k8s-dra-driver-gpu@sha256:" + "ab" * 32
    ctl = cluster.controller("replica-a", daemon_image=mirror)
    assert wait_for(lambda: ctl.leading)
    admin.create(domain("train", num_nodes=1))
    ds = wait_for(lambda: next(iter(admin.list("apps/v1", "DaemonSet", namespace=NAMESPACE)), None))
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert container["image"] == mirror
