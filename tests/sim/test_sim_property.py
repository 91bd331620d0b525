"""Property: no device is ever given to two pods unless it is a shared replica, and a shared
GPU never serves more pods than its replicas."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation

MACHINES = ["t4", "rtx-2080ti", "dgx-h100", "a100-40gb"]


def config_map(strategy: str, replicas: int) -> dict[str, Any]:
    sharing = (
        ""
        if strategy == "none"
        else (
            f"sharing:\n  {strategy}:\n    resources:\n    - name: nvidia.com/gpu\n"
            f"      replicas: {replicas}\n"
        )
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "dp"},
        "data": {"shared": "version: v1\n" + sharing},
    }


def pod(i: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i}"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
    }


actions = st.lists(
    st.one_of(
        st.tuples(st.just("pod"), st.integers(1, 4)),
        st.tuples(st.just("delete"), st.integers(0, 30)),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    machines=st.lists(st.sampled_from(MACHINES), min_size=1, max_size=3),
    strategy=st.sampled_from(["none", "timeSlicing", "mps"]),
    replicas=st.integers(2, 5),
    steps=actions,
)
def test_devices_never_double_booked(
    machines: list[str], strategy: str, replicas: int, steps: list[tuple[str, int]]
) -> None:
    nodes = [{"name": f"n{i}", "machine": m} for i, m in enumerate(machines)]
    sim = Simulation(scenario_from_dict({"nodes": nodes, "defaultConfig": "shared"}), plugins=False)
    sim.start()
    sim.apply(config_map(strategy, replicas))
    sim.settle()
    for n, (what, arg) in enumerate(steps):
        if what == "pod":
            sim.apply(pod(n, arg))
        else:
            names = sorted(sim.pods)
            if names:
                sim.delete_pod(names[arg % len(names)])
        sim.settle()
        check(sim)


def check(sim: Simulation) -> None:
    holders: dict[str, set[str]] = defaultdict(set)
    gpu_pods: dict[tuple[str, str], set[str]] = defaultdict(set)
    for rec in sim.pods.values():
        if rec.phase != "Running":
            assert not rec.devices
            continue
        node = sim.node(rec.node)
        assert node.view is not None
        for ids in rec.devices.values():
            for device_id in ids:
                holders[f"{rec.node}/{device_id}"].add(rec.key)
                dev = node.view.device(device_id)
                gpu_pods[(rec.node, dev.gpu_uuid)].add(rec.key)
    for device, pods in holders.items():
        assert len(pods) == 1, f"{device} given to {pods}"
    for (node_name, gpu), pods in gpu_pods.items():
        view = sim.node(node_name).view
        assert view is not None
        res = view.resource("nvidia.com/gpu")
        assert len(pods) <= res.replicas, f"{gpu} on {node_name} serves {len(pods)} pods"
    for node in sim.nodes:
        for resource, used in node.requested.items():
            assert used <= node.allocatable.get(resource, 0) or used == 0
