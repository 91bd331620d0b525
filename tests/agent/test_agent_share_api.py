"""``kgpu agent --consumable-shares memory`` against an API-server stand-in: the agent's own DRA
component (built by its factory, talking as ``kgpu-agent``) prepares a memory share, finds the
share's pod with a ``get`` on pods, and records a Warning on its Node when the GPU's MPS daemon
cannot run. Every request it makes here is held against the chart's roles at the end of the
session (tests/rbac/plugin.py, with ``consumableShares: memory``), so a role without ``get`` on
pods or ``create`` on events fails the run (issue 27)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.agent import components as comps
from kgpu.agent.node_watch import NodeWatch
from kgpu.agent.options import AgentOptions
from kgpu.cluster.kube import KubeStore
from kgpu.drivers.dra import DraComponent
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet.dra.handler import ClaimRef
from kgpu.store import CachedStore
from kgpu.testing.apiserver import FakeApiServer, write_kubeconfig
from kgpu.testing.manifests import memory_share_claim
from kgpu.testing.views import make_machine

NODE = "node-a"
TEST_CLIENT = "test-client/1.0"  # test code: the RBAC check leaves it out


@pytest.fixture
def root() -> Iterator[Path]:
    """A short root: the plugin's sockets stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ksa", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _pod_and_claim(admin: KubeStore, run_as: int) -> dict[str, Any]:
    """A pod running as ``run_as`` and its claim for 20Gi of gpu-0, allocated and reserved
    as the scheduler leaves it."""
    pod = admin.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "infer-pod", "namespace": "default"},
            "spec": {
                "securityContext": {"runAsUser": run_as},
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "infer"}],
                "containers": [
                    {"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}
                ],
            },
        }
    )
    admin.create(memory_share_claim("infer", "20Gi"))
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": "gpu.nvidia.com",
                        "pool": NODE,
                        "device": "gpu-0",
                        "shareID": "2f6a1d7e-58a4-4c1e-9c9d-0d3c2a8b1f10",
                        "consumedCapacity": {"memory": "20Gi"},
                    }
                ]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "infer-pod", "uid": pod["metadata"]["uid"]}],
    }
    return admin.patch(
        "resource.k8s.io/v1",
        "ResourceClaim",
        "infer",
        {"status": status},
        "default",
        subresource="status",
    )


def test_a_gpu_whose_mode_cannot_be_set_is_a_node_event_through_the_agent(root: Path) -> None:
    server = FakeApiServer(release="1.36").start()  # DRAConsumableCapacity on by default
    kubeconfig = str(write_kubeconfig(root / "kubeconfig", server.url))
    admin = KubeStore.from_config(kubeconfig, user_agent=TEST_CLIENT)
    admin.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    # as the agent talks: one cached store, its Node read from a watch (no get on nodes)
    agent_store = CachedStore(KubeStore.from_config(kubeconfig, user_agent="kgpu-agent/0.1.0"))
    node = NodeWatch(agent_store, NODE, lambda: None)
    assert node.start()
    backend = SimulatedBackend(make_machine(1, memory_mib=81559))
    backend.refuse_compute_mode = "Insufficient Permissions"
    opts = AgentOptions(
        machine="test", node_name=NODE, kubelet_root=root / "k", cdi_root=root / "cdi",
        consumable_shares="memory", device_plugin=False,
    )  # fmt: skip
    ctx = comps.AgentContext(
        options=opts, backend=backend, store=lambda: agent_store, on_change=lambda: None
    )
    component = comps.dra(ctx)
    assert isinstance(component, DraComponent)
    component.start()
    try:
        claim = _pod_and_claim(admin, 1000)
        meta = claim["metadata"]
        out = component.plugins["gpu.nvidia.com"].prepare(
            [ClaimRef(meta["namespace"], meta["uid"], meta["name"])]
        )
        error = out[meta["uid"]].error
        # the pod was found (its user is known), then the GPU refused EXCLUSIVE_PROCESS
        assert "cannot enforce memory shares" in error and "Insufficient Permissions" in error
        events = [
            e
            for e in admin.list("v1", "Event", "default")
            if e["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE}
        ]
        assert [(e["type"], e["reason"]) for e in events] == [("Warning", "MpsNotEnforced")]
        assert events[0]["source"] == {"component": "kgpu-dra", "host": NODE}
        assert "claims for shares of it fail until this is fixed" in events[0]["message"]
        pod_gets = [
            r
            for r in server.requests
            if r.method == "GET" and r.path == "/api/v1/namespaces/default/pods/infer-pod"
        ]
        assert pod_gets and all(r.headers["user-agent"].startswith("kgpu-agent/") for r in pod_gets)
    finally:
        component.stop()
        node.stop()
        agent_store.close()
        admin.close()
        server.stop()
