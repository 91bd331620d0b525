"""``kgpu agent --kubeconfig``: per-node configs from its own Node, GFD labels as an NFD
NodeFeature, against the API-server stand-in.

What the GPU Operator's config-manager sidecar does (watch ``nvidia.com/device-plugin.config``,
switch configs) the agent does from one watch of its Node; a label naming no config keeps the
last good view serving. The labels go into a NodeFeature named as gpu-feature-discovery names
its own, owned by the Node, when the API server serves ``nfd.k8s-sigs.io/v1alpha1``; into
NFD's features file otherwise."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from kgpu import __version__
from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.agent.nfd import TIMESTAMP_LABEL
from kgpu.cluster.kube import KubeStore
from kgpu.drivers.dra import DraComponent
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.testing.apiserver import KINDS, FakeApiServer
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.poll import eventually
from kgpu.testing.views import make_machine

from .conftest import TOKEN, write_kubeconfig

NODE = "gpu-node"
NAMESPACE = "kgpu-system"
CONFIGS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: plugin-configs}
data:
  two: |
    version: v1
    sharing:
      timeSlicing:
        resources: [{name: nvidia.com/gpu, replicas: 2}]
  four: |
    version: v1
    sharing:
      timeSlicing:
        resources: [{name: nvidia.com/gpu, replicas: 4}]
"""


def serve(release: str = "1.35", *, node_features: bool = True) -> FakeApiServer:
    kinds = KINDS if node_features else tuple(k for k in KINDS if k.kind != "NodeFeature")
    return FakeApiServer(token=TOKEN, release=release, kinds=kinds).start()


def agent_for(root: Path, server: FakeApiServer, **options: Any) -> tuple[Agent, KubeStore]:
    kubeconfig = write_kubeconfig(root / "kubeconfig", server.url)
    admin = KubeStore.from_config(str(kubeconfig), qps=None, user_agent="test-admin")
    admin.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "labels": {"nvidia.com/device-plugin.config": "two"}},
        }
    )
    (root / "configs.yaml").write_text(CONFIGS)
    opts = AgentOptions(
        machine="test",
        config_files=(root / "configs.yaml",),
        node_name=NODE,
        kubelet_root=root,
        cdi_root=root / "cdi",
        nfd_features_dir=root / "features.d",
        kubeconfig=kubeconfig,
        namespace=NAMESPACE,
        status_file=root / "status.json",
        **options,
    )
    return Agent(opts, backend=SimulatedBackend(make_machine(2))), admin


def relabel(admin: KubeStore, value: str) -> None:
    admin.patch(
        "v1", "Node", NODE, {"metadata": {"labels": {"nvidia.com/device-plugin.config": value}}}
    )


def test_the_nodes_config_label_switches_configs_and_a_bad_one_keeps_the_last_good(
    root: Path,
) -> None:
    server = serve("1.35")
    agent, admin = agent_for(root, server, dra=True)
    try:
        with FakeKubelet(root) as kubelet:
            agent.start()
            try:
                assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 4)
                assert agent.view().config_name == "two"
                relabel(admin, "four")
                assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 8)
                relabel(admin, "nope")  # names no config: the last good view keeps serving
                assert eventually(lambda: "nope" in agent.last_error)
                assert "matches no device-plugin config entry" in agent.last_error
                assert len(kubelet.devices("nvidia.com/gpu")) == 8
                reloads = agent.reloads
                admin.patch("v1", "Node", NODE, {"metadata": {"labels": {"team": "vision"}}})
                time.sleep(0.5)
                assert agent.reloads == reloads  # only the config labels reload
                relabel(admin, "two")
                assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 4)
                assert agent.last_error == ""

                # GFD's labels as a NodeFeature owned by the Node, nothing in features.d
                name = f"nvidia-features-for-{NODE}"
                assert eventually(
                    lambda: (
                        admin.get("nfd.k8s-sigs.io/v1alpha1", "NodeFeature", name, NAMESPACE)[
                            "spec"
                        ]["labels"].get("nvidia.com/gpu.replicas")
                        == "2"
                    )
                )
                feature = admin.get("nfd.k8s-sigs.io/v1alpha1", "NodeFeature", name, NAMESPACE)
                node = admin.get("v1", "Node", NODE)
                assert feature["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": NODE}
                (owner,) = feature["metadata"]["ownerReferences"]
                assert (owner["kind"], owner["name"], owner["uid"]) == (
                    "Node",
                    NODE,
                    node["metadata"]["uid"],
                )
                labels = dict(feature["spec"]["labels"])
                assert labels.pop(TIMESTAMP_LABEL).isdigit()  # GFD's, added when published
                assert labels == agent.view().labels
                assert not (root / "features.d" / "kgpu-features").exists()

                # at idle the agent sends nothing: its watches stay open
                def sent() -> int:
                    return sum(
                        1
                        for r in server.requests
                        if r.user_agent.startswith("kgpu-agent/") and r.verb != "watch"
                    )

                before = sent()
                time.sleep(1.0)
                assert sent() == before

                status = agent.status()
                assert status["kubernetesVersion"] == "v1.35.0"
                assert status["release"] == "1.35"  # in the supported window: itself
                assert status["nodeFeatures"] == f"NodeFeature {NAMESPACE}/{name}"
                (dra,) = [c for c in agent.components if isinstance(c, DraComponent)]
                assert dra.gpu is not None and dra.gpu.kubernetes_version == "1.35"
            finally:
                agent.stop()
        mine = [r for r in server.requests if r.user_agent.startswith("kgpu-agent/")]
        assert {r.user_agent for r in mine} == {f"kgpu-agent/{__version__}"}
        nodes = {(r.verb, r.query.get("fieldSelector", "")) for r in mine if r.resource == "nodes"}
        assert nodes == {("list", f"metadata.name={NODE}"), ("watch", f"metadata.name={NODE}")}
        writes = [r for r in mine if r.resource == "nodefeatures"]
        assert {r.verb for r in writes} == {"patch"}  # server-side apply
        assert len(writes) <= 4  # one per change of the labels, not per view
    finally:
        admin.close()
        server.stop()


def test_without_the_nodefeature_api_the_labels_go_to_the_features_file(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kgpu.agent.daemon")
    server = serve("1.33", node_features=False)
    agent, admin = agent_for(root, server, dra=False, device_plugin=False)
    try:
        agent.start()
        try:
            features = root / "features.d" / "kgpu-features"
            assert eventually(features.exists)
            assert "nvidia.com/gpu.replicas=2\n" in features.read_text()
            assert agent.status()["nodeFeatures"] == str(features)
            assert agent.status()["kubernetesVersion"] == "v1.33.0"
            # 1.33 is past upstream support: one clear line, then 1.34's behaviour, no crash
            assert agent.status()["release"] == "1.34"
            assert (
                "API server v1.33.0: Kubernetes 1.33 is outside kgpu's supported window "
                "1.34-1.37 (past upstream support); kgpu behaves as for 1.34" in caplog.text
            )
            relabel(admin, "four")
            assert eventually(lambda: "nvidia.com/gpu.replicas=4\n" in features.read_text())
        finally:
            agent.stop()
    finally:
        admin.close()
        server.stop()


def test_an_unreachable_api_server_at_start_is_waited_for_then_caught_up(root: Path) -> None:
    server = serve("1.34")
    agent, admin = agent_for(
        root, server, dra=False, device_plugin=False, kube_sync_timeout_s=0.5, config_name="four"
    )
    url = server.url
    server.stop()  # the API server is down while the agent starts
    try:
        agent.start()
        try:
            assert agent.view().config_name == "four"  # no Node labels yet: --config-name
            server.start()
            assert server.url == url
            assert eventually(lambda: agent.view().config_name == "two", timeout_s=20)
        finally:
            agent.stop()
    finally:
        admin.close()
        server.stop()
