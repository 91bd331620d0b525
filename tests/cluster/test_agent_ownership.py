"""One owner per GPU in the agent, through the real gRPC surfaces (issue 21).

An in-process ``kgpu agent`` with both drivers on one A40 (one GPU), the fake kubelet playing the
device manager (registration, ListAndWatch, Allocate), the DRA kubelet (NodePrepareResources)
and PodResources, and the loopback API server holding the ResourceSlices and the claim. First
the device plugin allocates the GPU and a claim for it fails, naming the holder, until the pod
is gone; then the reverse: the claim holds it and Allocate is refused, naming the claim.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.cluster.kube import KubeStore
from kgpu.dra.withhold import OWNER_TAINT_KEY
from kgpu.kubelet.dra.handler import ClaimRef
from kgpu.kubelet.podresources import ContainerResources, PodResources
from kgpu.testing.apiserver import FakeApiServer
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.fake_kubelet_dra import FakeDraKubelet
from kgpu.testing.fake_podresources import FakePodResourcesServer

from .conftest import TEST_CLIENT, TOKEN, write_kubeconfig

NODE = "a40-0"
GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"


def _published(kubeconfig: Path) -> list[str]:
    """The devices DRA offers: published and not tainted as the device plugin's (up to 1.35 a
    held GPU is left out of the slice, from 1.36 it is tainted: kgpu.dra.withhold)."""
    store = KubeStore.from_config(str(kubeconfig), user_agent=TEST_CLIENT)
    try:
        return [
            d["name"]
            for s in store.list("resource.k8s.io/v1", "ResourceSlice")
            if s["spec"]["driver"] == DRIVER
            for d in s["spec"].get("devices", [])
            if not any(t.get("key") == OWNER_TAINT_KEY for t in d.get("taints") or ())
        ]
    finally:
        store.close()


def _wait(predicate: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def _claim(kubeconfig: Path, name: str) -> ClaimRef:
    """A claim the scheduler allocated to ``gpu-0`` of this node, as the API server holds it."""
    store = KubeStore.from_config(str(kubeconfig), user_agent=TEST_CLIENT)
    try:
        claim = store.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]
                    }
                },
            }
        )
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}
                    ]
                }
            }
        }
        claim = store.update(claim)
    finally:
        store.close()
    return ClaimRef("default", claim["metadata"]["uid"], name)


@pytest.fixture(params=["1.35", "1.37"])
def server(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    """A release where a held GPU leaves the slice (1.35) and one where it is tainted (1.37)."""
    started = FakeApiServer(token=TOKEN, release=request.param).start()
    try:
        yield started
    finally:
        started.stop()


def test_device_plugin_then_claim_then_the_reverse(server: FakeApiServer, root: Path) -> None:
    apiserver = server
    kubeconfig = write_kubeconfig(root / "kubeconfig", apiserver.url)
    kubelet_root = root / "kubelet"
    opts = AgentOptions(
        machine="a40",
        node_name=NODE,
        kubelet_root=kubelet_root,
        cdi_root=root / "cdi",
        kubeconfig=kubeconfig,
        dra=True,
        status_file=root / "status.json",
    )
    pods = FakePodResourcesServer(kubelet_root)
    with FakeKubelet(kubelet_root) as kubelet, FakeDraKubelet(kubelet_root) as dra:
        pods.start()
        agent = Agent(opts)
        agent.start()
        try:
            assert agent.ownership is not None and agent.device_plugin is not None
            agent.ownership.grace_s = 0.0  # PodResources answers below are all after Allocate
            dra.wait_registered(DRIVER)
            assert kubelet.wait_for(lambda: len(kubelet.devices(GPU)) == 1)
            uuid = next(iter(kubelet.devices(GPU)))
            assert _wait(lambda: _published(kubeconfig) == ["gpu-0"])

            # 1. the device plugin allocates the GPU: DRA stops offering it
            kubelet.allocate(GPU, [uuid])
            assert _wait(lambda: _published(kubeconfig) == [])
            # a claim the scheduler allocated in the same moment fails, naming the holder
            first = _claim(kubeconfig, "late")
            error = dra.prepare(DRIVER, [first])[first.uid]["error"]
            assert f"GPU {uuid} is held by the device plugin" in error, error
            # PodResources names the pod; the error then does too
            pods.set_pods(
                [PodResources("default", "dp-pod", (ContainerResources("c", ((GPU, (uuid,)),)),))]
            )
            assert agent.device_plugin.release_once()
            error = dra.prepare(DRIVER, [first])[first.uid]["error"]
            assert "pod default/dp-pod" in error, error
            # the pod ends: the kubelet no longer lists it, the GPU is offered through DRA again
            pods.set_pods([])
            assert agent.device_plugin.release_once()
            assert _wait(lambda: _published(kubeconfig) == ["gpu-0"])
            got = dra.prepare(DRIVER, [first])[first.uid]
            assert not got["error"] and got["devices"]

            # 2. the reverse: the claim holds the GPU, the device plugin stops listing it
            assert kubelet.wait_for(lambda: kubelet.devices(GPU) == {})
            with pytest.raises(grpc.RpcError) as refused:
                kubelet.allocate(GPU, [uuid])  # a kubelet that had not seen the new list yet
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "held by DRA claim default/late" in str(refused.value.details())
            # the claim is unprepared: the GPU is listed again and can be allocated
            assert dra.unprepare(DRIVER, [first]) == {first.uid: ""}
            assert kubelet.wait_for(lambda: kubelet.devices(GPU) == {uuid: "Healthy"})
            kubelet.allocate(GPU, [uuid])
            assert agent.ownership.problems() == []
        finally:
            agent.stop()
            pods.stop()
