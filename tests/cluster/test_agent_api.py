"""``kgpu agent --kubeconfig``: the DRA drivers talk to a real API server's URLs.

The agent runs in process against the loopback API server of :mod:`.apiserver`: it publishes
both drivers' ResourceSlices there, and prepares a claim it reads back from there, as on a
GB200 tray of a real cluster.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.cluster.kube import KubeStore
from kgpu.kubelet.dra.handler import ClaimRef
from kgpu.testing.apiserver import RELEASES, FakeApiServer
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.fake_kubelet_dra import FakeDraKubelet

from .conftest import TEST_CLIENT, TOKEN, write_kubeconfig

NODE = "tray-0"


def _slices(kubeconfig: Path) -> dict[str, list[str]]:
    """Driver -> device names of the ResourceSlices the API server holds."""
    out: dict[str, list[str]] = {}
    store = KubeStore.from_config(str(kubeconfig), user_agent=TEST_CLIENT)
    try:
        for s in store.list("resource.k8s.io/v1", "ResourceSlice"):
            devices = [d["name"] for d in s["spec"].get("devices", [])]
            out.setdefault(s["spec"]["driver"], []).extend(devices)
    finally:
        store.close()
    return out


@pytest.fixture(params=["1.32", "1.34", "1.37"])
def apiserver(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    """The oldest modelled release (resource.k8s.io/v1beta1 only; outside the supported window,
    the agent runs on as 1.34), the first with v1, and the newest."""
    server = FakeApiServer(token=TOKEN, release=request.param).start()
    try:
        yield server
    finally:
        server.stop()


def test_agent_publishes_slices_and_prepares_claims_through_the_api_server(
    apiserver: FakeApiServer, root: Path
) -> None:
    wire = RELEASES[apiserver.release][0]
    kubeconfig = write_kubeconfig(root / "kubeconfig", apiserver.url)
    opts = AgentOptions(
        machine="gb200",
        clique="rack-a.0",
        node_name=NODE,
        kubelet_root=root / "kubelet",
        cdi_root=root / "cdi",
        kubeconfig=kubeconfig,
        dra=True,
    )
    with FakeKubelet(root / "kubelet"), FakeDraKubelet(root / "kubelet") as dra_kubelet:
        agent = Agent(opts)
        agent.start()
        try:
            dra_kubelet.wait_registered("gpu.nvidia.com")
            deadline = time.monotonic() + 10
            slices = _slices(kubeconfig)
            while len(slices) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
                slices = _slices(kubeconfig)
            assert sorted(slices["gpu.nvidia.com"]) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
            assert "compute-domain.nvidia.com" in slices
            applied = [
                (c.path, c.headers["content-type"])
                for c in apiserver.requests
                if c.verb == "patch" and c.resource == "resourceslices"
            ]
            assert (
                f"/apis/resource.k8s.io/{wire}/resourceslices/{NODE}-gpu.nvidia.com-0",
                "application/apply-patch+yaml",
            ) in applied

            # the scheduler's allocation, as the API server holds it: the plugin reads it there
            store = KubeStore.from_config(str(kubeconfig), user_agent=TEST_CLIENT)
            claim = store.create(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": "train-gpus", "namespace": "default"},
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
                            ]
                        }
                    },
                }
            )
            claim["status"] = {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpus",
                                "driver": "gpu.nvidia.com",
                                "pool": NODE,
                                "device": "gpu-2",
                            }
                        ]
                    }
                }
            }
            claim = store.update(claim)
            store.close()
            ref = ClaimRef("default", claim["metadata"]["uid"], "train-gpus")
            got = dra_kubelet.prepare_until_done("gpu.nvidia.com", [ref])[ref.uid]
            assert not got.get("error")
            ids = [i for dev in got["devices"] for i in dev["cdiDeviceIDs"]]
            assert ids and all(i.startswith("k8s.gpu.nvidia.com/") for i in ids), ids
            minors = [g.minor for g in agent.backend.snapshot().gpus]
            spec = next((root / "cdi").glob("*.yaml")).read_text()
            # the container gets exactly the allocated GPU's device node
            assert [m for m in minors if f"/dev/nvidia{m}\n" in spec] == [minors[2]]
        finally:
            agent.stop()
