"""Two pods time-sliced on one GPU get their own series, attributed the way a real node does it:
NVML's per-process accounting -> /proc/<pid>/cgroup -> pod UID -> kubelet device checkpoint ->
PodResources (served by a fake kubelet over a real unix socket)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kgpu.config.loader import load_config_strings
from kgpu.drivers.metrics import MetricsComponent
from kgpu.hardware.model import Machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet.podresources import ContainerResources, PodResources
from kgpu.metrics.nvml_source import NvmlTelemetry
from kgpu.node.view import build_node_view
from kgpu.testing.fake_podresources import FakePodResourcesServer

from .conftest import series
from .fake_nvml import MIB, FakeNvml

TIME_SLICING = """version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""

UID_A = "0f1e2d3c-aaaa-4bbb-8ccc-000000000001"
UID_B = "0f1e2d3c-aaaa-4bbb-8ccc-000000000002"
UID_OTHER = "0f1e2d3c-aaaa-4bbb-8ccc-000000000099"


def write_proc(root: Path, pid: int, cgroup: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(cgroup)


@pytest.fixture
def node(tmp_path: Path, h100: Machine):  # type: ignore[no-untyped-def]
    view = build_node_view(h100, load_config_strings({"ts.yaml": TIME_SLICING}), {})
    gpu0 = h100.gpus[0]
    res = view.resources[0]
    ids = [d.id for d in res.devices if d.gpu_uuid == gpu0.uuid]
    assert res.name == "nvidia.com/gpu.shared" and len(ids) == 4
    pods = [
        PodResources(
            "team-a", "infer-a", (ContainerResources("server", ((res.name, (ids[0],)),)),)
        ),
        PodResources(
            "team-b", "infer-b", (ContainerResources("worker", ((res.name, (ids[2],)),)),)
        ),
    ]
    kubelet = tmp_path / "kubelet"
    proc = tmp_path / "proc"
    # cgroup v2 + systemd driver for A, cgroup v1 + cgroupfs driver for B, one stray process.
    write_proc(
        proc,
        101,
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        + UID_A.replace("-", "_")
        + ".slice/cri-containerd-"
        + "a" * 64
        + ".scope\n",
    )
    write_proc(proc, 102, f"12:memory:/kubepods/besteffort/pod{UID_A}/{'b' * 64}\n")
    write_proc(
        proc, 201, f"11:pids:/kubepods/burstable/pod{UID_B}/{'c' * 64}\n10:memory:/kubepods\n"
    )
    write_proc(proc, 301, f"0::/kubepods.slice/kubepods-pod{UID_OTHER.replace('-', '_')}.slice\n")
    nvml = FakeNvml(h100)
    gpu_state = nvml.state[gpu0.uuid]
    gpu_state.processes = [(101, 3000 * MIB), (102, 1000 * MIB), (201, 2500 * MIB)]
    gpu_state.used_bytes = 6500 * MIB
    gpu_state.samples = [(101, 10, 30), (102, 11, 15), (201, 12, 40)]
    gpu_state.util = 85
    server = FakePodResourcesServer(kubelet, pods).start()
    server.write_checkpoint({("team-a", "infer-a"): UID_A, ("team-b", "infer-b"): UID_B})
    component = MetricsComponent(
        "127.0.0.1:0",
        SimulatedBackend(h100),
        kubelet,
        "node-a",
        proc_root=proc,
        source=NvmlTelemetry(nvml),
    )
    component.on_view(view)
    assert component.cache is not None and component.cache.refresh()
    yield component, gpu0.uuid, nvml
    component.stop()
    server.stop()


def test_time_sliced_pods_get_separate_series_summing_to_the_gpu(node) -> None:  # type: ignore[no-untyped-def]
    component, uuid, _ = node
    text = component.scrape()
    mem = {lab["pod"]: v for lab, v in series(text, "kgpu_pod_gpu_memory_used_bytes", UUID=uuid)}
    sm = {lab["pod"]: v for lab, v in series(text, "kgpu_pod_gpu_sm_utilization", UUID=uuid)}
    # Each pod gets its own processes' accounting, not a copy of the GPU's value.
    assert mem == {"infer-a": 4000 * MIB, "infer-b": 2500 * MIB}
    assert sm == {"infer-a": 45.0, "infer-b": 40.0}
    (fb_used,) = series(text, "DCGM_FI_DEV_FB_USED", UUID=uuid)
    (util,) = series(text, "DCGM_FI_DEV_GPU_UTIL", UUID=uuid)
    assert sum(mem.values()) == fb_used[1] * MIB
    assert sum(sm.values()) == util[1]
    labels = {lab["pod"]: lab for lab, _ in series(text, "kgpu_pod_gpu_memory_used_bytes")}
    assert (labels["infer-a"]["namespace"], labels["infer-a"]["container"]) == ("team-a", "server")
    assert (labels["infer-b"]["namespace"], labels["infer-b"]["container"]) == ("team-b", "worker")
    # A GPU shared by several pods keeps one unattributed DCGM series (queries count GPUs).
    assert "pod" not in fb_used[0]
    assert len(series(text, "DCGM_FI_DEV_GPU_UTIL")) == 8


def test_processes_that_are_gone_do_not_break_the_scrape(node) -> None:  # type: ignore[no-untyped-def]
    component, uuid, nvml = node
    nvml.state[uuid].processes.append((999, 10 * MIB))  # no /proc/999: exited meanwhile
    text = component.scrape()
    assert series(text, "kgpu_exporter_errors_total", source="proc", field="cgroup")[0][1] == 1
    assert {lab["pod"] for lab, _ in series(text, "kgpu_pod_gpu_memory_used_bytes")} == {
        "infer-a",
        "infer-b",
    }


def test_an_exclusive_gpu_labels_its_dcgm_series_with_the_pod(
    tmp_path: Path, h100: Machine
) -> None:
    gpu = h100.gpus[3]
    pods = [
        PodResources(
            "ml", "train", (ContainerResources("main", (("nvidia.com/gpu", (gpu.uuid,)),)),)
        )
    ]
    with FakePodResourcesServer(tmp_path, pods):
        component = MetricsComponent("127.0.0.1:0", SimulatedBackend(h100), tmp_path, "node-a")
        assert component.cache is not None and component.cache.refresh()
        text = component.scrape()
        component.stop()
    (util,) = series(text, "DCGM_FI_DEV_GPU_UTIL", UUID=gpu.uuid)
    assert (util[0]["pod"], util[0]["namespace"], util[0]["container"]) == ("train", "ml", "main")
    others = [lab for lab, _ in series(text, "DCGM_FI_DEV_GPU_UTIL") if lab["UUID"] != gpu.uuid]
    assert others and all("pod" not in lab for lab in others)
    # The simulated backend runs the default load where the kubelet says a pod is.
    assert util[1] > 0 and all(
        v == 0 for lab, v in series(text, "DCGM_FI_DEV_GPU_UTIL") if lab["UUID"] != gpu.uuid
    )
