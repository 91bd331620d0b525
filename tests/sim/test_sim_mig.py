"""The MIG manager on simulated nodes: a layout change goes through its stages as on a real
node (pending, withheld GPUs, drain or eviction, apply, success or failed), on the simulator's
clock, and only the manager changes the GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kgpu.errors import FieldError
from kgpu.sim.scenario import load_scenario, scenario_from_dict
from kgpu.sim.simulation import Simulation

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mig-p4de.yaml"
VALUES = REPO / "examples" / "manifests" / "gpu-operator-values.yaml"
STATE = "nvidia.com/mig.config.state"
LAYOUT = "nvidia.com/mig.config"
HALF = "2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb"


def mig_events(sim: Simulation, since: int = 0) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in sim.events[since:] if e.object == "Node/p4de"]


def reasons(sim: Simulation, since: int = 0) -> list[str]:
    return [r for r, _ in mig_events(sim, since) if r != "NodeReady"]


def gpu_resources(sim: Simulation, node: str = "p4de") -> dict[str, int]:
    n = sim.node(node)
    return {k: v for k, v in n.allocatable.items() if k.startswith("nvidia.com/")}


def pod(name: str, resource: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "cuda", "resources": {"limits": {resource: 1}}}]
        },
    }


def p4de(**extra: Any) -> Simulation:
    scenario = scenario_from_dict(
        {
            "nodes": [
                {
                    "name": "p4de",
                    "machine": "p4de.24xlarge",
                    "labels": {LAYOUT: "p4de-half-balanced"},
                }
            ],
            "configs": [str(VALUES)],
            **extra,
        }
    )
    sim = Simulation(scenario, plugins=False)
    sim.start()
    return sim


def test_the_example_shows_each_stage_of_a_layout_change_while_a_pod_holds_a_slice() -> None:
    sim = Simulation(load_scenario(EXAMPLE), plugins=False)
    sim.start()
    node = sim.node("p4de")
    # the node joined with its GPUs whole; its MIG manager split GPUs 0-3 before any pod ran
    assert mig_events(sim)[1:] == [
        (
            "MigConfigPending",
            f"applying mig config p4de-half-balanced: GPU 0 (MIG disabled -> {HALF}), "
            f"1 (MIG disabled -> {HALF}), 2 (MIG disabled -> {HALF}), 3 (MIG disabled -> {HALF})",
        ),
        ("MigConfigApplied", "mig config p4de-half-balanced is applied"),
    ]
    assert node.labels[STATE] == "success"
    assert gpu_resources(sim) == {
        "nvidia.com/gpu": 4,
        "nvidia.com/mig-1g.10gb": 8,
        "nvidia.com/mig-2g.20gb": 4,
        "nvidia.com/mig-3g.40gb": 4,
    }
    small = sim.pods["default/small"]
    assert small.phase == "Running"
    held = small.devices["cuda"][0]
    assert node.view is not None and node.view.device(held).gpu_index == 0

    label, first_wait, second_wait = load_scenario(EXAMPLE).steps
    seen = len(sim.events)
    sim.step(label)
    # pending: GPUs 0-3 are withheld, their MIG devices leave capacity and allocatable; the pod
    # keeps its slice and the manager waits for it
    assert node.labels[STATE] == "pending"
    assert reasons(sim, seen) == ["MigConfigPending"]
    assert gpu_resources(sim) == {
        "nvidia.com/gpu": 4,
        "nvidia.com/mig-1g.10gb": 0,
        "nvidia.com/mig-2g.20gb": 0,
        "nvidia.com/mig-3g.40gb": 0,
    }
    assert node.capacity["nvidia.com/mig-1g.10gb"] == 0
    assert small.phase == "Running" and node.device_owner[held] == "default/small"
    assert node.mig is not None and node.mig.manager.status()["stage"] == "draining"
    assert "GPU 0 is held by pod default/small" in node.mig.manager.status()["reason"]

    seen = len(sim.events)
    sim.step(first_wait)
    # the drain timed out at 300s: GPU 0 failed naming the pod and kept its layout, GPUs 1-3
    # are whole now
    assert sim.now == 300
    assert node.labels[STATE] == "failed"
    assert mig_events(sim, seen) == [
        (
            "MigConfigFailed",
            "mig config all-disabled: GPU 0: is held by pod default/small after 300s; they "
            "must finish first, or set evictPods to evict them",
        )
    ]
    assert gpu_resources(sim) == {
        "nvidia.com/gpu": 7,
        "nvidia.com/mig-1g.10gb": 2,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-3g.40gb": 1,
    }

    seen = len(sim.events)
    sim.step(second_wait)
    # the retry withheld GPU 0 again; the pod's job ended at 7m and the layout finished
    assert small.phase == "Succeeded"
    assert reasons(sim, seen) == ["MigConfigPending", "MigConfigApplied"]
    assert mig_events(sim, seen)[0][1] == (
        f"applying mig config all-disabled: GPU 0 ({HALF} -> MIG disabled)"
    )
    assert node.labels[STATE] == "success"
    assert gpu_resources(sim) == {"nvidia.com/gpu": 8}
    assert not any(g.mig_enabled for g in node.machine.gpus)  # type: ignore[union-attr]
    # the label went through the API server, as the agent's manager writes it
    stored = sim.store.get("v1", "Node", "p4de")["metadata"]["labels"]
    assert stored[STATE] == "success" and stored[LAYOUT] == "all-disabled"


def test_the_drain_timeout_fires_at_its_time_within_a_longer_wait() -> None:
    """One 10-minute wait: the manager fails at 300s (the pod runs until 420s), retries, and
    applies when the pod ends; had the clock skipped the timeout, only success would show."""
    sim = p4de(runtimes={"small": "7m"}, migManager={"drainTimeout": "5m"})
    sim.apply(pod("small", "nvidia.com/mig-1g.10gb"))
    sim.settle()
    seen = len(sim.events)
    sim.step({"label": {"node": "p4de", "labels": {LAYOUT: "all-disabled"}}})
    sim.step({"advance": "10m"})
    assert reasons(sim, seen) == [
        "MigConfigPending",
        "MigConfigFailed",
        "MigConfigPending",
        "MigConfigApplied",
    ]
    assert gpu_resources(sim) == {"nvidia.com/gpu": 8}


def test_with_evict_pods_the_holder_is_evicted_and_its_replacement_waits() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "infer"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "infer"}},
            "template": {
                "metadata": {"labels": {"app": "infer"}},
                "spec": pod("x", "nvidia.com/mig-1g.10gb")["spec"],
            },
        },
    }
    sim = p4de(migManager={"evictPods": True})
    sim.apply(deployment)
    sim.settle()
    (before,) = [r.key for r in sim.pods.values() if r.phase == "Running"]
    seen = len(sim.events)
    sim.step({"label": {"node": "p4de", "labels": {LAYOUT: "all-disabled"}}})
    assert reasons(sim, seen) == ["MigConfigPending", "MigEvictingPod", "MigConfigApplied"]
    assert f"evicted pod {before}: it holds GPU 0" in mig_events(sim, seen)[1][1]
    assert before not in sim.pods
    # the ReplicaSet made a new pod: no node offers a 1g.10gb slice any more
    (after,) = sim.pods.values()
    assert after.key != before and after.phase == "Pending"
    assert sim.node("p4de").labels[STATE] == "success"
    assert gpu_resources(sim) == {"nvidia.com/gpu": 8}


def test_a_mode_change_needing_a_reset_reboots_with_with_reboot_and_fails_without() -> None:
    for with_reboot in (True, False):
        sim = p4de(migManager={"withReboot": with_reboot})
        node = sim.node("p4de")
        assert node.hardware is not None
        node.hardware.set_needs_reset(4)  # a GPU whose mode change waits for a reset
        seen = len(sim.events)
        sim.step({"label": {"node": "p4de", "labels": {LAYOUT: "all-1g.10gb"}}})
        got = reasons(sim, seen)
        if with_reboot:
            assert got == ["MigConfigPending", "MigConfigRebooting", "Rebooted"]
            assert node.labels[STATE] == "rebooting"
            assert gpu_resources(sim) == {}  # MIG on, no instances yet: nothing to advertise
            # the manager runs again once the node is back (its next poll)
            seen = len(sim.events)
            sim.step({"advance": "5s"})
            assert reasons(sim, seen) == ["MigConfigPending", "MigConfigApplied"]
            assert node.labels[STATE] == "success"
            assert gpu_resources(sim) == {"nvidia.com/mig-1g.10gb": 56}
        else:
            assert got == ["MigConfigPending", "MigConfigFailed"]
            assert "nvidia-smi -r -i 4" in mig_events(sim, seen)[-1][1]
            assert node.labels[STATE] == "failed"
            # the other GPUs got the layout; GPU 4 stays whole and is advertised again
            assert gpu_resources(sim) == {"nvidia.com/gpu": 1, "nvidia.com/mig-1g.10gb": 49}


def test_a_disabled_manager_leaves_the_gpus_and_the_view_only_reports_the_layout() -> None:
    sim = p4de(migManager={"enabled": False})
    node = sim.node("p4de")
    assert node.mig is None and STATE not in node.labels
    assert gpu_resources(sim) == {"nvidia.com/gpu": 8}
    assert node.view is not None and "p4de-half-balanced" in node.view.mig_pending
    assert reasons(sim) == []


def test_a_node_group_setting_overrides_the_scenarios() -> None:
    scenario = scenario_from_dict(
        {
            "nodes": [
                {"name": "a", "machine": "a100-80gb", "labels": {LAYOUT: "all-balanced"}},
                {
                    "name": "b",
                    "machine": "a100-80gb",
                    "labels": {LAYOUT: "all-balanced"},
                    "migManager": {"enabled": True},
                },
                {"name": "t4", "machine": "t4", "labels": {LAYOUT: "all-disabled"}},
            ],
            "migManager": {"enabled": False},
        }
    )
    sim = Simulation(scenario, plugins=False)
    sim.start()
    assert sim.node("a").mig is None and STATE not in sim.node("a").labels
    assert sim.node("b").labels[STATE] == "success"
    assert sim.node("t4").mig is None  # no MIG-capable GPU: no MIG manager runs there


def test_mig_manager_settings_are_checked_with_their_field_paths() -> None:
    with pytest.raises(FieldError) as info:
        scenario_from_dict(
            {
                "nodes": [{"name": "n", "machine": "t4", "migManager": {"drainTimeout": "soon"}}],
                "migManager": {"evictPods": "yes", "reboot": True},
            }
        )
    message = str(info.value)
    assert "nodes[0].migManager.drainTimeout: 'soon' is not a duration" in message
    assert "migManager.evictPods: must be true or false" in message
    assert "migManager.reboot: unknown field 'reboot'" in message


def test_a_node_that_fails_or_leaves_while_its_manager_drains_stops_it_waking() -> None:
    sim = p4de()
    sim.apply(pod("small", "nvidia.com/mig-1g.10gb"))
    sim.settle()
    sim.step({"label": {"node": "p4de", "labels": {LAYOUT: "all-disabled"}}})
    assert sim.node("p4de").labels[STATE] == "pending"
    sim.step({"failNode": "p4de"})  # its pods are evicted; a NotReady node's manager is idle
    sim.step({"advance": "10m"})
    assert sim.node("p4de").labels[STATE] == "pending"
    sim.step({"recoverNode": "p4de"})  # back: the manager finds its GPUs free
    assert sim.node("p4de").labels[STATE] == "success"
    sim.step({"label": {"node": "p4de", "labels": {LAYOUT: "p4de-half-balanced"}}})
    sim.apply(pod("again", "nvidia.com/mig-1g.10gb"))
    sim.settle()
    sim.step({"label": {"node": "p4de", "labels": {LAYOUT: "all-disabled"}}})
    sim.step({"deleteNode": "p4de"})
    sim.step({"advance": "10m"})  # returns: nobody is left to wake
    assert sim.now == 1200 and sim.nodes == []
