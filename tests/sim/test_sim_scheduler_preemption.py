"""Priority, preemption and the FailedScheduling suffix, as a cluster shows them."""

from __future__ import annotations

from typing import Any

import pytest

from kgpu.errors import FieldError
from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation

NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def pod(name: str, gpus: int = 1, **spec: Any) -> dict[str, Any]:
    body = {
        "containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
        ],
        **spec,
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body}


def priority_class(name: str, value: int, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **extra,
    }


def simulate(
    nodes: list[dict[str, Any]], *objs: dict[str, Any], plugins: bool = False, **extra: Any
) -> Simulation:
    sim = Simulation(scenario_from_dict({"nodes": nodes, **extra}), plugins=plugins)
    sim.start()
    for obj in objs:
        sim.apply(obj)
        sim.settle()
    return sim


def messages(sim: Simulation, name: str, reason: str = "FailedScheduling") -> list[str]:
    return [
        e.message for e in sim.events if e.object == f"Pod/default/{name}" and e.reason == reason
    ]


def test_higher_priority_pod_preempts_the_lowest_priority_pods_on_a_full_node() -> None:
    sim = simulate(
        [{"name": "dgx", "machine": "dgx-h100"}],
        priority_class("low", 5),
        priority_class("mid", 10),
        priority_class("high", 100),
        pod("keep", 6, priorityClassName="mid"),
        pod("low-1", 1, priorityClassName="low"),
        pod("low-2", 1, priorityClassName="low"),
        pod("urgent", 2, priorityClassName="high"),
    )
    urgent = sim.pods["default/urgent"]
    assert urgent.phase == "Running" and urgent.node == "dgx"
    assert urgent.obj["spec"]["priority"] == 100  # the Priority admission plugin set it
    assert "default/keep" in sim.pods and sim.pods["default/keep"].phase == "Running"
    assert "default/low-1" not in sim.pods and "default/low-2" not in sim.pods
    uid = urgent.obj["metadata"]["uid"]
    for victim in ("low-1", "low-2"):
        assert messages(sim, victim, "Preempted") == [f"Preempted by pod {uid} on node dgx"]
    # the attempt that preempted fails with the filters' words alone, then the pod binds
    assert messages(sim, "urgent") == ["0/1 nodes are available: 1 Insufficient nvidia.com/gpu."]
    assert urgent.obj["spec"]["nodeName"] == "dgx"


def test_preemption_picks_the_node_whose_victims_matter_least() -> None:
    sim = simulate(
        [{"name": "n", "count": 2, "machine": "t4"}],
        priority_class("p1", 1),
        priority_class("p5", 5),
        priority_class("high", 100),
        pod("important", nodeSelector={"kubernetes.io/hostname": "n-0"}, priorityClassName="p5"),
        pod("cheap", nodeSelector={"kubernetes.io/hostname": "n-1"}, priorityClassName="p1"),
        pod("urgent", priorityClassName="high"),
    )
    assert sim.pods["default/urgent"].node == "n-1"
    assert "default/cheap" not in sim.pods and sim.pods["default/important"].node == "n-0"


def test_no_lower_priority_pod_means_no_victims() -> None:
    sim = simulate(
        [{"name": "t4", "machine": "t4"}, {"name": "cpu"}],
        pod("first"),
        pod("second"),
    )
    # the T4 is full (resolvable); the CPU node has no GPU at all: from 1.34 preemption skips it
    assert messages(sim, "second") == [
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
        f"preemption: 0/2 nodes are available: 1 {NO_VICTIMS}, 1 {NOT_HELPFUL}."
    ]


def test_before_1_34_preemption_tries_nodes_too_small_for_the_pod() -> None:
    sim = simulate(
        [{"name": "t4", "machine": "t4"}, {"name": "cpu"}],
        pod("first"),
        pod("second"),
        kubernetesVersion="1.33",
    )
    assert messages(sim, "second") == [
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
        f"preemption: 0/2 nodes are available: 2 {NO_VICTIMS}."
    ]


def test_preemption_policy_never_preempts_nothing() -> None:
    sim = simulate(
        [{"name": "t4", "machine": "t4"}],
        priority_class("polite", 100, preemptionPolicy="Never"),
        pod("first"),
        pod("second", priorityClassName="polite"),
    )
    assert sim.pods["default/first"].phase == "Running"
    assert messages(sim, "second") == [
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        "preemption: not eligible due to preemptionPolicy=Never."
    ]
    assert sim.pods["default/second"].obj["spec"]["preemptionPolicy"] == "Never"


def test_victims_that_would_not_make_room_are_left_alone() -> None:
    # the low pod frees one GPU but the pod wants two: the node keeps the filter's reason
    sim = simulate(
        [{"name": "t4", "machine": "t4"}],
        priority_class("high", 100),
        pod("low"),
        pod("big", 2, priorityClassName="high"),
        kubernetesVersion="1.33",
    )
    assert "default/low" in sim.pods
    assert messages(sim, "big") == [
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        "preemption: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    ]


def test_a_deployments_preempted_pod_comes_back_pending() -> None:
    web = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod("x")["spec"]},
        },
    }
    sim = simulate(
        [{"name": "t4", "machine": "t4"}],
        priority_class("high", 100),
        web,
        pod("urgent", priorityClassName="high"),
    )
    assert sim.pods["default/urgent"].node == "t4"
    (replacement,) = [r for k, r in sim.pods.items() if k.startswith("default/web-")]
    assert replacement.phase == "Pending"
    assert replacement.last_message == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        f"preemption: 0/1 nodes are available: 1 {NO_VICTIMS}."
    )


def test_priority_admission() -> None:
    sim = simulate(
        [{"name": "t4", "machine": "t4"}],
        priority_class("everyday", 7, globalDefault=True),
        pod("plain", 0),
        pod("critical", 0, priorityClassName="system-node-critical"),
        pod("typo", 0, priorityClassName="hgih"),
        pod("explicit", 0, priority=3),
    )
    assert sim.pods["default/plain"].obj["spec"]["priority"] == 7
    assert sim.pods["default/plain"].obj["spec"]["priorityClassName"] == "everyday"
    assert sim.pods["default/critical"].obj["spec"]["priority"] == 2000001000
    assert "default/typo" not in sim.pods
    assert messages(sim, "typo", "Forbidden") == [
        'pods "typo" is forbidden: no PriorityClass with name hgih was found'
    ]
    assert messages(sim, "explicit", "Forbidden") == [
        'pods "explicit" is forbidden: the integer value of priority (3) must not be provided '
        "in pod spec; priority admission controller computed 7 from the given PriorityClass name"
    ]


def test_a_controller_whose_pods_are_refused_says_so_once() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "template": {
                "spec": {**pod("x", priorityClassName="missing")["spec"], "restartPolicy": "Never"}
            }
        },
    }
    sim = simulate([{"name": "t4", "machine": "t4"}], job)
    sim.settle()
    refused = [e for e in sim.events if e.reason == "FailedCreate"]
    assert len(refused) == 1 and refused[0].object == "Job/default/train"
    assert refused[0].message.startswith('Error creating: pods "train-')
    assert refused[0].message.endswith("is forbidden: no PriorityClass with name missing was found")
    assert not sim.pods


@pytest.mark.parametrize(
    ("version", "note"),
    [("1.32", "no new claims to deallocate, "), ("1.33", ""), ("1.35", ""), ("1.37", "")],
)
def test_dynamic_resources_post_filter_note(version: str, note: str) -> None:
    sim = simulate(
        [{"name": "t4", "machine": "t4"}],
        pod("a"),
        pod("b"),
        plugins=True,
        kubernetesVersion=version,
    )
    assert messages(sim, "b") == [
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. "
        f"{note}preemption: 0/1 nodes are available: 1 {NO_VICTIMS}."
    ]


@pytest.mark.parametrize("value", ["1.31", "2.0", "latest", 1.3, True])
def test_unsupported_kubernetes_version_is_refused_with_the_range(value: object) -> None:
    with pytest.raises(FieldError) as err:
        scenario_from_dict({"nodes": [], "kubernetesVersion": value})
    text = str(err.value)
    assert "kubernetesVersion" in text
    assert "1.32 to 1.37 (supports 1.34-1.37)" in text or "such as" in text


def test_the_preemption_example_tells_its_story() -> None:
    from pathlib import Path

    from kgpu.sim.scenario import load_scenario

    example = Path(__file__).resolve().parents[2] / "examples" / "priority-and-preemption.yaml"
    sim = Simulation(load_scenario(example)).run()
    phases: dict[str, list[str]] = {}
    for key, rec in sim.pods.items():
        phases.setdefault(key.split("/")[1].rsplit("-", 2)[0], []).append(rec.phase)
    assert phases["inference"] == ["Running"]
    assert sorted(phases["trainer"]) == ["Pending", "Pending", "Running", "Running"]
    assert sum(e.reason == "Preempted" for e in sim.events) == 2
    sim.close()


def test_the_queue_takes_higher_priority_first() -> None:
    sim = simulate(
        [{"name": "t4", "machine": "t4"}],
        priority_class("low", 10),
        priority_class("high", 50),
        pod("busy", priorityClassName="high"),
        pod("early-low", priorityClassName="low"),
        pod("late-high", priorityClassName="high"),
    )
    assert sim.pods["default/early-low"].phase == sim.pods["default/late-high"].phase == "Pending"
    sim.delete_pod("default/busy")
    sim.settle()
    assert sim.pods["default/late-high"].node == "t4"  # created last, scheduled first
    assert sim.pods["default/early-low"].phase == "Pending"
