"""The permissions docs/cluster.md lists per process are exactly what the process uses: each runs
against the API-server stand-in through its life, every request is recorded, and the recorded
(apiGroup, resource, verb) rules must equal the documented table."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rbac.documented import documented

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.cluster.kube import KubeStore
from kgpu.computedomain.api import API_VERSION as CD_API
from kgpu.computedomain.api import CLIQUE_ID_LABEL, CLIQUE_LABEL, DOMAIN_LABEL, node_label
from kgpu.dra.classes import device_classes
from kgpu.drivers.dra import DraComponent
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet.dra.handler import ClaimRef
from kgpu.testing.apiserver import FakeApiServer
from kgpu.testing.manifests import compute_domain

from .conftest import TOKEN, write_kubeconfig

CLIQUE = "c0ffee00-0000-4000-8000-000000000001.0"
DRA = "resource.k8s.io/v1"
CD_DRIVER = "compute-domain.nvidia.com"
MIG_LABEL = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    fake = FakeApiServer(token=TOKEN).start()
    try:
        yield fake
    finally:
        fake.stop()


def _node(name: str, ip: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {CLIQUE_LABEL: CLIQUE, **labels}},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}],
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _claim(name: str, driver: str, device: str, config: dict[str, Any] | None) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "results": [{"request": "r", "driver": driver, "pool": "tray-0", "device": device}]
    }
    if config is not None:
        opaque = {"driver": driver, "parameters": config}
        devices["config"] = [{"source": "FromClaim", "requests": ["r"], "opaque": opaque}]
    return {
        "apiVersion": DRA,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
        "status": {"allocation": {"devices": devices}},
    }


def test_the_agent_uses_exactly_its_documented_rules(server: FakeApiServer, root: Path) -> None:
    kubeconfig = str(write_kubeconfig(root / "kc", server.url))
    admin = KubeStore.from_config(kubeconfig, qps=None, user_agent="test-admin")
    admin.create(_node("tray-0", "10.0.0.1"))
    admin.create(_node("tray-1", "10.0.0.2"))
    for cls in device_classes():
        admin.create(cls)
    domain = admin.create(compute_domain("job", 2, namespace="ml", channel="c"))
    uid = domain["metadata"]["uid"]
    refs = []
    for name, driver, device, kind in (
        ("ch", CD_DRIVER, "channel-0", "ComputeDomainChannelConfig"),
        ("d", CD_DRIVER, "daemon-0", "ComputeDomainDaemonConfig"),
        ("gpu", "gpu.nvidia.com", "gpu-1", None),
    ):
        config = {"apiVersion": CD_API, "kind": kind, "domainID": uid} if kind else None
        claim = _claim(name, driver, device, config)
        if kind == "ComputeDomainDaemonConfig":  # made from the controller's template
            claim["metadata"]["namespace"] = "kgpu-system"
            claim["metadata"]["labels"] = {"resource.nvidia.com/computeDomain": uid}
        made = admin.create(claim)
        ns = made["metadata"]["namespace"]
        refs.append((driver, ClaimRef(ns, made["metadata"]["uid"], name)))
    # a memory share of gpu-2 (consumableShares: memory): its pod is read for its runAsUser
    pod = admin.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "infer", "namespace": "ml"},
            "spec": {
                "securityContext": {"runAsUser": 1000},
                "containers": [{"name": "main", "image": "x"}],
            },
        }
    )
    share = _claim("share", "gpu.nvidia.com", "gpu-2", None)
    share["status"]["allocation"]["devices"]["results"][0].update(
        shareID="7f1c2a9e-3b4d-4e5f-8a6b-0c1d2e3f4a5b", consumedCapacity={"memory": "20Gi"}
    )
    share["status"]["reservedFor"] = [
        {"resource": "pods", "name": "infer", "uid": pod["metadata"]["uid"]}
    ]
    made = admin.create(share)
    refs.append(("gpu.nvidia.com", ClaimRef("ml", made["metadata"]["uid"], "share")))

    # the whole agent, as the chart runs it: device plugin, NFD labels (a NodeFeature), DRA
    # (both drivers on a fabric tray, memory shares) and the MIG manager, its state on the Node,
    # its events
    admin.patch("v1", "Node", "tray-0", {"metadata": {"labels": {MIG_LABEL: "all-disabled"}}})
    agent = Agent(
        AgentOptions(
            machine="gb200",
            clique=CLIQUE,
            node_name="tray-0",
            kubelet_root=root / "kubelet",
            cdi_root=root / "cdi",
            nfd_features_dir=root / "features.d",
            kubeconfig=Path(kubeconfig),
            namespace="kgpu-system",
            mig_manager=True,
            dra=True,
            consumable_shares="memory",
            status_file=root / "status.json",
        ),
        backend=SimulatedBackend(load_machine("gb200", hostname="tray-0", clique=CLIQUE)),
    )
    agent.start()
    try:
        (component,) = [c for c in agent.components if isinstance(c, DraComponent)]
        for driver, ref in refs:
            assert not component.plugins[driver].prepare([ref])[ref.uid].error
        # the controller lists the domain's daemons in the clique: the daemon's hosts mapping
        # follows from the watch
        daemons = [
            {
                "nodeName": f"tray-{i}",
                "ipAddress": f"10.0.0.{i + 1}",
                "cliqueID": CLIQUE,
                "index": i,
            }
            for i in range(2)
        ]
        admin.create(
            {
                "apiVersion": CD_API,
                "kind": "ComputeDomainClique",
                "metadata": {
                    "name": f"{uid}.{CLIQUE}",
                    "namespace": "kgpu-system",
                    "labels": {DOMAIN_LABEL: uid, CLIQUE_ID_LABEL: CLIQUE},
                },
                "daemons": daemons,
            }
        )
        config = next((root / "kubelet").rglob("hosts"))
        want = "10.0.0.1\tcompute-domain-daemon-0000\n10.0.0.2\tcompute-domain-daemon-0001\n"
        deadline = time.monotonic() + 10
        while config.read_text() != want and time.monotonic() < deadline:
            time.sleep(0.02)
        assert config.read_text() == want
        for driver, ref in refs:
            component.plugins[driver].unprepare([ref])
        assert component.publisher is not None
        component.publisher.publish("gpu.nvidia.com", [])  # a pool that shrank to nothing
        deadline = time.monotonic() + 10
        while (
            admin.get("v1", "Node", "tray-0")["metadata"]["labels"].get(MIG_STATE) != "success"
            and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        events = admin.list("v1", "Event", namespace="default")
        assert [e["reason"] for e in events] == ["MigConfigApplied"]
        assert admin.list("nfd.k8s-sigs.io/v1alpha1", "NodeFeature", namespace="kgpu-system")
    finally:
        agent.stop()
        admin.close()
    assert server.rules("kgpu-agent") == documented("agent")
    _assert_node_scoped(server, "tray-0")


def _assert_node_scoped(server: FakeApiServer, node: str) -> None:
    """Every write the agent made stays inside what the chart's node-scoped admission policies
    allow (docs/security.md; the policies' CEL is evaluated in tests/deploy): its own Node, only
    the keys kgpu owns there, no spec; only ResourceSlices of its node."""
    writes = [
        r
        for r in server.requests
        if r.user_agent.startswith("kgpu-agent")
        and r.verb in ("create", "update", "patch", "delete")
        and r.resource in ("nodes", "resourceslices")
    ]
    assert {r.resource for r in writes} == {"nodes", "resourceslices"}
    for r in writes:
        if r.resource == "nodes":
            assert r.name == node and r.body is not None, r.path
            assert set(r.body) <= {"metadata", "apiVersion", "kind"}, r.body  # no spec
            meta = r.body.get("metadata") or {}
            assert set(meta) <= {"labels", "annotations", "name"}, meta
            for key in meta.get("labels") or {}:
                assert key.startswith("resource.nvidia.com/computeDomain.") or key == MIG_STATE
            assert set(meta.get("annotations") or {}) <= {"resource.nvidia.com/imexChannels"}
        elif r.verb == "delete":
            assert r.name.startswith(f"{node}-"), r.name
        else:
            assert r.body is not None and r.body["spec"]["nodeName"] == node, r.body


def test_the_controller_uses_exactly_its_documented_rules(
    server: FakeApiServer, root: Path
) -> None:
    """``kgpu controller`` through a domain's life (created, nodes joining, daemons listed,
    drift repaired, a node failing, deleted), DeviceClasses deleted and changed, a pod
    admitted by the webhook that names its channel claim, and a clean stop (Lease released)."""
    from kgpu.controller import Controller, ControllerOptions

    kubeconfig = str(write_kubeconfig(root / "kc", server.url))
    admin = KubeStore.from_config(kubeconfig, qps=None, user_agent="test-admin")
    for i in range(3):
        admin.create(_node(f"n{i}", f"10.0.0.{i + 1}"))
    admin.create(compute_domain("job", 2, namespace="ml"))
    store = KubeStore.from_config(kubeconfig, qps=None, user_agent="kgpu-controller/r0")
    options = ControllerOptions(
        namespace="kgpu-system",
        identity="r0",
        lease_duration_s=1.5,
        renew_deadline_s=1.0,
        retry_period_s=0.2,
    )
    ctl = Controller(store, options).start()

    def until(check: Any) -> Any:
        deadline = time.monotonic() + 10
        while not (value := check()) and time.monotonic() < deadline:
            time.sleep(0.02)
        return value

    def cd() -> dict[str, Any]:
        return dict(admin.get(CD_API, "ComputeDomain", "job", "ml"))

    try:
        assert until(lambda: cd().get("status"))
        uid = cd()["metadata"]["uid"]
        (ds,) = admin.list("apps/v1", "DaemonSet", namespace="kgpu-system")
        for i in range(2):  # the agents label the nodes; the daemons run
            admin.patch("v1", "Node", f"n{i}", {"metadata": {"labels": {node_label(uid): "true"}}})
            pod = admin.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"daemon-{i}",
                        "namespace": "kgpu-system",
                        "labels": {DOMAIN_LABEL: uid},
                    },
                    "spec": {"nodeName": f"n{i}", "containers": [{"name": "c", "image": "i"}]},
                }
            )
            pod["status"] = {"phase": "Running", "podIP": f"192.168.0.{i + 1}"}
            admin.update(pod)
        assert until(lambda: cd()["status"]["status"] == "Ready")
        # someone edits the DaemonSet: it is patched back
        ds = admin.get("apps/v1", "DaemonSet", ds["metadata"]["name"], "kgpu-system")
        ds["spec"]["template"]["spec"]["tolerations"] = []
        admin.update(ds)
        assert until(
            lambda: admin.get("apps/v1", "DaemonSet", ds["metadata"]["name"], "kgpu-system")[
                "spec"
            ]["template"]["spec"]["tolerations"]
        )
        # a DeviceClass deleted, another changed
        admin.delete(DRA, "DeviceClass", "gpu.nvidia.com")
        changed = admin.get(DRA, "DeviceClass", "mig.nvidia.com")
        changed["spec"]["selectors"] = [{"cel": {"expression": "true"}}]
        admin.update(changed)
        assert until(lambda: len(admin.list(DRA, "DeviceClass")) == 4)
        assert until(
            lambda: (
                admin.get(DRA, "DeviceClass", "mig.nvidia.com")["spec"]["selectors"][0]["cel"][
                    "expression"
                ]
                != "true"
            )
        )
        # a pod naming a channel claim is admitted (the webhook reads the claim)
        claim = {
            "apiVersion": DRA,
            "kind": "ResourceClaim",
            "metadata": {"name": "mine", "namespace": "ml"},
            "spec": {
                "devices": {
                    "requests": [{"name": "c", "exactly": {"deviceClassName": "x"}}],
                    "config": [
                        {
                            "requests": ["c"],
                            "opaque": {
                                "driver": CD_DRIVER,
                                "parameters": {
                                    "apiVersion": CD_API,
                                    "kind": "ComputeDomainChannelConfig",
                                    "domainID": uid,
                                },
                            },
                        }
                    ],
                }
            },
        }
        admin.create(claim)
        pod = {
            "metadata": {"name": "w"},
            "spec": {"resourceClaims": [{"name": "c", "resourceClaimName": "mine"}]},
        }
        assert ctl.admit(pod, "ml").domain is not None
        # n0 fails: its label is dropped; the daemon pod goes, the clique follows
        admin.patch(
            "v1",
            "Node",
            "n0",
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            subresource="status",
        )
        assert until(
            lambda: node_label(uid) not in admin.get("v1", "Node", "n0")["metadata"]["labels"]
        )
        admin.delete("v1", "Pod", "daemon-0", "kgpu-system")
        assert until(
            lambda: (
                [
                    d["nodeName"]
                    for c in admin.list(CD_API, "ComputeDomainClique")
                    for d in c["daemons"]
                ]
                == ["n1"]
            )
        )
        admin.delete(CD_API, "ComputeDomain", "job", "ml")  # the finalizer holds it for cleanup
        assert until(lambda: admin.list(CD_API, "ComputeDomain") == [])
        assert until(lambda: admin.list("v1", "Pod", namespace="kgpu-system") == [])
    finally:
        ctl.stop()
        store.close()
        admin.close()
    assert server.rules("kgpu-controller") == documented("controller")
