"""The permissions docs/cluster.md lists per process are exactly what the process uses: each runs
against the API-server stand-in through its life, every request is recorded, and the recorded
(apiGroup, resource, verb) rules must equal the documented table."""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.cluster.kube import KubeStore
from kgpu.computedomain.api import API_VERSION as CD_API
from kgpu.computedomain.api import CLIQUE_LABEL, node_label
from kgpu.computedomain.reconcile import reconcile
from kgpu.dra.classes import device_classes
from kgpu.drivers.dra import DraComponent
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet.dra.handler import ClaimRef
from kgpu.store import CachedStore
from kgpu.testing.apiserver import FakeApiServer

from .conftest import TOKEN, write_kubeconfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"
CLIQUE = "c0ffee00-0000-4000-8000-000000000001.0"
DRA = "resource.k8s.io/v1"
CD_DRIVER = "compute-domain.nvidia.com"
MIG_LABEL = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"


def documented(name: str) -> set[tuple[str, str, str]]:
    text = DOC.read_text()
    table = text.split(f"<!-- rbac:{name} -->")[1].split(f"<!-- /rbac:{name} -->")[0]
    rules = set()
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        group = cells[0].strip("`").strip('"')
        for verb in re.findall(r"`(\w+)`", cells[2]):
            rules.add((group, cells[1].strip("`"), verb))
    return rules


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="kr", dir="/tmp"))  # unix socket paths stay short
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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
    domain = admin.create(
        {
            "apiVersion": CD_API,
            "kind": "ComputeDomain",
            "metadata": {"name": "job", "namespace": "ml"},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "c"}}},
        }
    )
    uid = domain["metadata"]["uid"]
    refs = []
    for name, driver, device, kind in (
        ("ch", CD_DRIVER, "channel-0", "ComputeDomainChannelConfig"),
        ("d", CD_DRIVER, "daemon-0", "ComputeDomainDaemonConfig"),
        ("gpu", "gpu.nvidia.com", "gpu-1", None),
    ):
        config = {"apiVersion": CD_API, "kind": kind, "domainID": uid} if kind else None
        made = admin.create(_claim(name, driver, device, config))
        refs.append((driver, ClaimRef("ml", made["metadata"]["uid"], name)))

    # the whole agent, as the chart runs it: device plugin, NFD labels (a NodeFeature), DRA
    # (both drivers on a fabric tray) and the MIG manager, its state on the Node, its events
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
            status_file=root / "status.json",
        ),
        backend=SimulatedBackend(load_machine("gb200", hostname="tray-0", clique=CLIQUE)),
    )
    agent.start()
    try:
        (component,) = [c for c in agent.components if isinstance(c, DraComponent)]
        for driver, ref in refs:
            assert not component.plugins[driver].prepare([ref])[ref.uid].error
        # the peer joins the domain: the daemon's config follows from the watch
        admin.patch("v1", "Node", "tray-1", {"metadata": {"labels": {node_label(uid): "true"}}})
        config = next((root / "kubelet").rglob("nodes_config.cfg"))
        deadline = time.monotonic() + 10
        while config.read_text() != "10.0.0.1\n10.0.0.2\n" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert config.read_text() == "10.0.0.1\n10.0.0.2\n"
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


def test_compute_domain_reconcile_uses_exactly_its_documented_rules(
    server: FakeApiServer, root: Path
) -> None:
    kubeconfig = str(write_kubeconfig(root / "kc", server.url))
    admin = KubeStore.from_config(kubeconfig, qps=None, user_agent="test-admin")
    for i in range(3):
        admin.create(_node(f"n{i}", f"10.0.0.{i + 1}"))
    admin.create(
        {
            "apiVersion": CD_API,
            "kind": "ComputeDomain",
            "metadata": {"name": "job", "namespace": "ml"},
            "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "job-ch"}}},
        }
    )
    store = CachedStore(KubeStore.from_config(kubeconfig, qps=None, user_agent="kgpu-controller"))
    for api, kind in (
        (CD_API, "ComputeDomain"),
        ("v1", "Node"),
        ("v1", "Pod"),
        ("apps/v1", "DaemonSet"),
        (DRA, "ResourceClaimTemplate"),
    ):
        store.informers.acquire(api, kind)

    def passes(n: int = 3) -> None:
        for _ in range(n):
            reconcile(store)
            time.sleep(0.1)

    try:
        passes()
        uid = admin.get(CD_API, "ComputeDomain", "job", "ml")["metadata"]["uid"]
        for i in range(2):  # the agents label the nodes their channels landed on
            admin.patch("v1", "Node", f"n{i}", {"metadata": {"labels": {node_label(uid): "true"}}})
        passes()
        status = admin.get(CD_API, "ComputeDomain", "job", "ml").get("status") or {}
        assert status, "reconcile wrote the domain's status"
        admin.delete(CD_API, "ComputeDomain", "job", "ml")  # the finalizer holds it for cleanup
        passes()
        assert admin.list(CD_API, "ComputeDomain") == []
        assert not any(node_label(uid) in n["metadata"]["labels"] for n in admin.list("v1", "Node"))
    finally:
        store.close()
        admin.close()
    assert server.rules("kgpu-controller") == documented("reconcile")
