"""Node steps written as in a scenario's ``steps`` do what their kubectl counterparts do."""

from __future__ import annotations

from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation


def gpu_pod(name: str, tolerations: list[dict[str, str]] | None = None) -> dict[str, object]:
    spec: dict[str, object] = {
        "containers": [
            {"name": "c", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": 1}}}
        ]
    }
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def simulation(**node: object) -> Simulation:
    scenario = scenario_from_dict({"nodes": [{"name": "g", "machine": "dgx-h100", **node}]})
    sim = Simulation(scenario, plugins=False)
    sim.start()
    return sim


def test_taint_step_evicts_pods_that_do_not_tolerate_no_execute() -> None:
    sim = simulation()
    sim.apply(gpu_pod("plain"))
    sim.apply(gpu_pod("tolerant", [{"key": "maint", "operator": "Exists"}]))
    sim.settle()
    assert {k: r.phase for k, r in sim.pods.items()} == {
        "default/plain": "Running",
        "default/tolerant": "Running",
    }
    sim.step({"taint": {"node": "g", "taints": [{"key": "maint", "effect": "NoExecute"}]}})
    assert list(sim.pods) == ["default/tolerant"]
    assert sim.node("g").obj["spec"]["taints"] == [{"key": "maint", "effect": "NoExecute"}]
    assert any(e.reason == "TaintManagerEviction" for e in sim.events)
    sim.step({"taint": {"node": "g", "taints": []}})
    assert "taints" not in sim.node("g").obj["spec"]


def test_uncordon_step_lets_a_waiting_pod_schedule() -> None:
    sim = simulation(unschedulable=True)
    sim.apply(gpu_pod("waits"))
    sim.settle()
    assert sim.pods["default/waits"].phase == "Pending"
    sim.step({"uncordon": "g"})
    assert sim.pods["default/waits"].phase == "Running"
    assert "unschedulable" not in sim.node("g").obj["spec"]


def test_recover_node_step_makes_a_failed_node_ready_and_schedulable() -> None:
    sim = simulation()
    sim.step({"failNode": "g"})
    ready = sim.node("g").obj["status"]["conditions"][0]
    assert ready["status"] == "Unknown"
    sim.apply(gpu_pod("after"))
    sim.settle()
    assert sim.pods["default/after"].phase == "Pending"
    sim.step({"recoverNode": "g"})
    assert sim.node("g").obj["status"]["conditions"][0]["status"] == "True"
    assert sim.pods["default/after"].phase == "Running"
    assert [e.reason for e in sim.events if e.object == "Node/g"][-1] == "NodeReady"
