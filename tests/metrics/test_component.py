"""The exporter as the agent loads it: start, new node views, HTTP, stop."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from kgpu.agent.components import load_metrics
from kgpu.config.loader import ConfigSet
from kgpu.drivers.component import Component
from kgpu.drivers.metrics import MetricsComponent
from kgpu.hardware.model import Machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet.podresources import ContainerResources, PodResources
from kgpu.node.view import build_node_view
from kgpu.testing.fake_podresources import FakePodResourcesServer

from .conftest import series


def test_agent_loads_serves_and_stops_the_exporter(tmp_path: Path, h100: Machine) -> None:
    gpu = h100.gpus[6]
    pods = [
        PodResources("ml", "job", (ContainerResources("w", (("nvidia.com/gpu", (gpu.uuid,)),)),))
    ]
    with FakePodResourcesServer(tmp_path, pods):
        component = load_metrics("127.0.0.1:0", SimulatedBackend(h100), tmp_path, "node-a")
        assert isinstance(component, Component) and isinstance(component, MetricsComponent)
        component.start()
        try:
            component.on_view(build_node_view(h100, ConfigSet(), {}))
            assert component.cache is not None
            component.cache.refresh()
            port = component.port
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        finally:
            component.stop()
    ((lab, value),) = series(text, "DCGM_FI_DEV_GPU_UTIL", UUID=gpu.uuid)
    assert (lab["pod"], lab["Hostname"]) == ("job", "node-a") and value > 0


def test_agent_can_name_the_node_label_hostname_like_dcgm_exporter_main(
    tmp_path: Path, h100: Machine
) -> None:
    """``kgpu agent --hostname-label hostname`` reaches the exporter it loads."""
    component = load_metrics(
        "127.0.0.1:0", SimulatedBackend(h100), tmp_path, "node-b", hostname_label="hostname"
    )
    assert isinstance(component, MetricsComponent)
    component.start()
    try:
        component.on_view(build_node_view(h100, ConfigSet(), {}))
        with urllib.request.urlopen(f"http://127.0.0.1:{component.port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        component.stop()
    labels = [lab for lab, _ in series(text, "DCGM_FI_DEV_GPU_TEMP")]
    assert labels and all(
        lab.get("hostname") == "node-b" and "Hostname" not in lab for lab in labels
    )


def test_an_xid_injected_into_a_simulated_backend_is_the_last_xid(h100: Machine) -> None:
    """What ``kgpu agent --fault-dir`` does: the XID reaches the simulated backend, and the
    exporter reports it as that GPU's last XID."""
    backend = SimulatedBackend(h100)
    component = MetricsComponent("127.0.0.1:0", backend, None, "node-a")
    backend.inject_xid(3, 94)
    text = component.scrape()
    component.stop()
    xids = {lab["gpu"]: v for lab, v in series(text, "DCGM_FI_DEV_XID_ERRORS")}
    assert xids["3"] == 94 and sum(xids.values()) == 94
