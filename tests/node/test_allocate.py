"""Preferred allocation and container allocation as the kubelet would see them."""

from __future__ import annotations

import pytest

from kgpu.config import load_config_strings
from kgpu.hardware.profiles import load_machine
from kgpu.node.allocate import (
    AllocationError,
    container_allocation,
    preferred_allocation,
    strip_replica,
)
from kgpu.node.model import NodeView
from kgpu.node.view import build_node_view
from kgpu.testing.views import (
    gpu_uuid,
    make_machine,
    make_view,
    mig_resources,
    mig_uuid,
    replicas,
    whole_gpus,
)

# Two NVLink islands: 0-1 and 2-3 strongly joined, 1-2 weakly; NUMA 0 = {0, 2}, 1 = {1, 3}.
ISLANDS = make_machine(4, nvlink_pairs=[(0, 1, 12), (2, 3, 12), (1, 2, 2)], numa=[0, 1, 0, 1])
P4DE = load_machine("p4de.24xlarge")


def test_whole_gpus_prefer_the_best_nvlink_pair() -> None:
    view = make_view(ISLANDS, [whole_gpus(ISLANDS)])
    avail = [gpu_uuid(i) for i in range(4)]
    got = preferred_allocation(view, "nvidia.com/gpu", avail, [], 2)
    assert sorted(got) == [gpu_uuid(0), gpu_uuid(1)]
    # With GPU 2 required the partner must be 3, its NVLink peer, not the NUMA neighbour 0.
    got = preferred_allocation(view, "nvidia.com/gpu", avail, [gpu_uuid(2)], 2)
    assert got == [gpu_uuid(2), gpu_uuid(3)]


def test_whole_gpus_fall_back_to_numa_without_nvlink() -> None:
    machine = make_machine(4, numa=[0, 1, 0, 1])
    view = make_view(machine, [whole_gpus(machine)])
    got = preferred_allocation(view, "nvidia.com/gpu", [gpu_uuid(i) for i in (1, 2, 3)], [], 2)
    assert sorted(got) == [gpu_uuid(1), gpu_uuid(3)]


def test_replicas_spread_over_gpus_and_honour_must_include() -> None:
    res = replicas(ISLANDS, 4)
    view = make_view(ISLANDS, [res])
    # GPU 0 already has two replicas handed out (not offered as available).
    avail = [d.id for d in res.devices if d.id not in (f"{gpu_uuid(0)}::0", f"{gpu_uuid(0)}::1")]
    got = preferred_allocation(view, "nvidia.com/gpu", avail, [f"{gpu_uuid(1)}::3"], 4)
    assert got[0] == f"{gpu_uuid(1)}::3"
    gpus = [view.device(i).gpu_index for i in got]
    assert sorted(gpus) == [1, 1, 2, 3]  # idle GPUs first, the busy GPU 0 last
    packed = preferred_allocation(view, "nvidia.com/gpu", avail, [], 3, pack_replicas=True)
    assert [view.device(i).gpu_index for i in packed] == [0, 0, 1]


def test_mig_devices_stay_on_one_parent() -> None:
    machine = make_machine(2, mig={0: ["1g.10gb"] * 3, 1: ["1g.10gb"] * 3})
    view = make_view(machine, mig_resources(machine))
    avail = [mig_uuid(0, 0), mig_uuid(1, 0), mig_uuid(1, 1), mig_uuid(1, 2)]
    got = preferred_allocation(view, "nvidia.com/mig-1g.10gb", avail, [], 2)
    assert {view.device(i).gpu_index for i in got} == {1}


def test_visible_devices_strip_replicas_and_deduplicate() -> None:
    res = replicas(ISLANDS, 4)
    view = make_view(ISLANDS, [res])
    ids = [f"{gpu_uuid(0)}::0", f"{gpu_uuid(0)}::2", f"{gpu_uuid(3)}::1"]
    alloc = container_allocation(view, "nvidia.com/gpu", ids)
    assert alloc.envs == {"NVIDIA_VISIBLE_DEVICES": f"{gpu_uuid(0)},{gpu_uuid(3)}"}
    assert alloc.mounts == () and alloc.annotations == {}


def test_mig_visible_devices_are_mig_uuids() -> None:
    machine = make_machine(1, mig={0: ["3g.40gb", "3g.40gb"]})
    view = make_view(machine, mig_resources(machine))
    alloc = container_allocation(view, "nvidia.com/mig-3g.40gb", [mig_uuid(0, 1)])
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == mig_uuid(0, 1)


def test_volume_mounts_and_cdi_strategies() -> None:
    view = make_view(
        ISLANDS,
        [whole_gpus(ISLANDS)],
        device_list_strategy=("volume-mounts", "cdi-annotations", "cdi-cri"),
    )
    alloc = container_allocation(view, "nvidia.com/gpu", [gpu_uuid(1)], response_id="r1")
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
    assert [(m.container_path, m.host_path) for m in alloc.mounts] == [
        (f"/var/run/nvidia-container-devices/{gpu_uuid(1)}", "/dev/null")
    ]
    name = f"k8s.device-plugin.nvidia.com/gpu={gpu_uuid(1)}"
    assert alloc.annotations == {"cdi.k8s.io/nvidia-device-plugin_r1": name}
    assert alloc.cdi_devices == (name,)


def _mps_view(*, fail_requests_greater_than_one: bool = True) -> NodeView:
    """p4de: MPS (4 replicas) on GPUs 2 and 3, time-slicing on GPU 0, the rest whole."""
    flag = "" if fail_requests_greater_than_one else "failRequestsGreaterThanOne: false, "
    text = (
        "sharing:\n"
        "  timeSlicing: {resources: [{name: nvidia.com/gpu, rename: nvidia.com/gpu.ts, "
        "devices: [0], replicas: 2}]}\n"
        f"  mps: {{{flag}resources: [{{name: nvidia.com/gpu, rename: nvidia.com/gpu.mps, "
        "devices: [2, 3], replicas: 4}]}\n"
    )
    return build_node_view(P4DE, load_config_strings({"mps.yaml": text}), {})


def test_mps_replica_mounts_its_own_gpus_daemon_pipe() -> None:
    view = _mps_view()
    for index in (2, 3):
        gpu = P4DE.gpus[index]
        alloc = container_allocation(view, "nvidia.com/gpu.mps", [f"{gpu.uuid}::1"])
        # The container path and env are upstream's, whatever GPU the replica is on...
        assert alloc.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu.mps/pipe"
        assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == gpu.uuid
        assert alloc.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert alloc.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={gpu.memory_mib // 4}M"
        # ...the host side is the pipe of the daemon serving that GPU only.
        hosts = {m.container_path: m.host_path for m in alloc.mounts}
        assert hosts == {
            "/mps/nvidia.com/gpu.mps/pipe": f"/run/nvidia/mps/nvidia.com/gpu.mps/{index}/pipe",
            "/dev/shm": "/run/nvidia/mps/shm",
        }
    ts = container_allocation(view, "nvidia.com/gpu.ts", [f"{P4DE.gpus[0].uuid}::0"])
    assert not ts.mounts and "CUDA_MPS_PIPE_DIRECTORY" not in ts.envs


def test_mps_requests_for_more_than_one_replica() -> None:
    two_gpus = [f"{P4DE.gpus[2].uuid}::0", f"{P4DE.gpus[3].uuid}::0"]
    one_gpu = [f"{P4DE.gpus[2].uuid}::0", f"{P4DE.gpus[2].uuid}::1"]
    # Upstream forces failRequestsGreaterThanOne for MPS: any second replica is refused.
    forced = _mps_view()
    for ids in (two_gpus, one_gpu):
        with pytest.raises(
            AllocationError,
            match=r'^invalid allocation request for "nvidia\.com/gpu\.mps": invalid request: '
            r"maximum request size for shared resources is 1; found 2$",
        ):
            container_allocation(forced, "nvidia.com/gpu.mps", ids)
    # Turned off, replicas of one GPU share its daemon; replicas of two GPUs cannot (a client
    # talks to one daemon), so they are still refused, with upstream's wording first.
    relaxed = _mps_view(fail_requests_greater_than_one=False)
    alloc = container_allocation(relaxed, "nvidia.com/gpu.mps", one_gpu)
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == P4DE.gpus[2].uuid
    with pytest.raises(
        AllocationError, match=r"shared resources is 1; found 2 \(MPS replicas of 2 GPUs"
    ):
        container_allocation(relaxed, "nvidia.com/gpu.mps", two_gpus)
    # The preferred allocation keeps such a request on one GPU instead of spreading it.
    avail = [d.id for d in relaxed.resource("nvidia.com/gpu.mps").devices]
    got = preferred_allocation(relaxed, "nvidia.com/gpu.mps", avail, [], 3)
    assert len({strip_replica(i) for i in got}) == 1
    must = [f"{P4DE.gpus[3].uuid}::2"]
    got = preferred_allocation(relaxed, "nvidia.com/gpu.mps", avail, must, 2)
    assert {strip_replica(i) for i in got} == {P4DE.gpus[3].uuid}


def test_rejections_use_upstream_wording() -> None:
    res = replicas(ISLANDS, 2, fail_requests_greater_than_one=True)
    view = make_view(ISLANDS, [res])
    with pytest.raises(AllocationError, match="maximum request size for shared resources is 1"):
        container_allocation(view, "nvidia.com/gpu", [f"{gpu_uuid(0)}::0", f"{gpu_uuid(1)}::0"])
    assert container_allocation(view, "nvidia.com/gpu", [f"{gpu_uuid(0)}::0"]).envs
    with pytest.raises(AllocationError, match="unknown device: GPU-nope"):
        container_allocation(view, "nvidia.com/gpu", ["GPU-nope"])
    sick = view.with_health(frozenset({gpu_uuid(1)}))
    with pytest.raises(AllocationError, match="unhealthy device"):
        container_allocation(sick, "nvidia.com/gpu", [f"{gpu_uuid(1)}::1"])


def test_index_strategy_on_the_real_node_view() -> None:
    """With deviceIDStrategy: index the container sees GPU indices, CDI names use them too."""
    from kgpu.config import load_config_strings
    from kgpu.hardware.profiles import load_machine
    from kgpu.node.view import build_node_view

    config = """
version: v1
flags:
  plugin:
    deviceIDStrategy: index
    deviceListStrategy: [cdi-cri]
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""
    view = build_node_view(load_machine("dgx-h100"), load_config_strings({"c.yaml": config}), {})
    devices = view.resource("nvidia.com/gpu").devices
    by_gpu = {d.gpu_index: d.id for d in devices if d.replica == 1}
    alloc = container_allocation(view, "nvidia.com/gpu", [by_gpu[3], by_gpu[5]])
    assert "NVIDIA_VISIBLE_DEVICES" not in alloc.envs  # CDI only, as upstream
    assert alloc.cdi_devices == (
        "k8s.device-plugin.nvidia.com/gpu=3",
        "k8s.device-plugin.nvidia.com/gpu=5",
    )
