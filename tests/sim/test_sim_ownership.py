"""One owner per GPU in the simulator: the device plugin and the DRA driver of one node never
hand out the same GPU (issue 21), shown the way a user sees it: NVIDIA_VISIBLE_DEVICES of the
pods, node capacity, ResourceSlices and events."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.testing.manifests import claim_template, deployment

API = "resource.k8s.io/v1"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "ownership" / "migrate-dgx-to-dra.yaml"


def claim_pod(name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
            "containers": [
                {"name": "c", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}
            ],
        },
    }


def dp_pod(name: str, gpus: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
            ]
        },
    }


def gpus_in_use(sim: Simulation) -> dict[str, set[str]]:
    """GPU UUID (from NVIDIA_VISIBLE_DEVICES, replica suffix and MIG parent resolved) -> pods."""
    out: dict[str, set[str]] = defaultdict(set)
    for rec in sim.pods.values():
        if rec.phase != "Running":
            continue
        node = sim.node(rec.node)
        assert node.machine is not None
        for env in rec.env.values():
            for ref in filter(None, env.get("NVIDIA_VISIBLE_DEVICES", "").split(",")):
                found = node.machine.by_uuid(ref.split("::")[0])
                gpu = getattr(found, "parent_uuid", None) or found.uuid
                out[gpu].add(rec.key)
    return out


def start(machine: str, extra: dict[str, Any] | None = None) -> Simulation:
    sim = Simulation(
        scenario_from_dict({"nodes": [{"name": "n0", "machine": machine}], **(extra or {})})
    )
    sim.start()
    return sim


def test_dgx_h100_deployment_and_four_gpu_claim_never_share_a_gpu() -> None:
    """The issue's case: 8 device-plugin pods of 1 GPU and a claim for 4 GPUs on one DGX H100
    (8 GPUs). Before the ledger all 9 pods ran and 4 GPUs were in two pods at once."""
    sim = start("dgx-h100")
    sim.apply(claim_template("four", 4))
    sim.apply(claim_pod("trainer", "four"))
    sim.apply(deployment("web", 8, {"nvidia.com/gpu": 1}))
    sim.settle()
    used = gpus_in_use(sim)
    shared = {g: pods for g, pods in used.items() if len(pods) > 1}
    assert not shared, f"GPUs in two pods at once: {shared}"
    running = sorted(k for k, r in sim.pods.items() if r.phase == "Running")
    assert "default/trainer" in running  # the claim got its 4 GPUs (slices came first)
    assert len(running) == 5  # and 4 of the 8 replicas; the other 4 wait
    node = sim.node("n0")
    assert node.allocatable["nvidia.com/gpu"] == 4  # the claim's GPUs left the device plugin
    assert node.capacity["nvidia.com/gpu"] == 4
    assert not sim.context.ownership_dirty
    from kgpu.sim import ownership

    assert ownership.problems(sim.context) == []


@pytest.mark.parametrize("machine", ["a40", "rtx-2080ti"])
def test_single_gpu_node_device_plugin_first_then_claim_waits(machine: str) -> None:
    extra: dict[str, Any] = {}
    sim = start(machine, extra)
    if machine == "rtx-2080ti":  # time-sliced: the replicas and the GPU are one GPU
        sim.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "dp"},
                "data": {
                    "ts": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
                    "    - name: nvidia.com/gpu\n      replicas: 4\n"
                },
            }
        )
        sim.label_node("n0", {"nvidia.com/device-plugin.config": "ts"})
    sim.apply(dp_pod("dp"))
    sim.settle()
    sim.apply(claim_template("one", 1))
    sim.apply(claim_pod("dra", "one"))
    sim.settle()
    assert sim.pods["default/dp"].phase == "Running"
    assert sim.pods["default/dra"].phase == "Pending"
    slices = sim.context.store.list(API, "ResourceSlice")
    assert all(not (s["spec"].get("devices") or []) for s in slices)  # the GPU is not offered
    # the device plugin pod ends: the GPU goes back to DRA and the claim pod starts
    sim.delete_pod("default/dp")
    sim.settle()
    assert sim.pods["default/dra"].phase == "Running"
    node = sim.node("n0")
    assert node.allocatable["nvidia.com/gpu"] == 0  # the claim holds it now
    from kgpu.sim import ownership

    assert ownership.problems(sim.context) == []


def test_migration_example_moves_gpus_to_dra_only_as_their_pods_end(tmp_path: Path) -> None:
    """examples/ownership/migrate-dgx-to-dra.yaml, step by step: a policy change takes no GPU
    from a running pod; each GPU reaches DRA once its device-plugin pod is gone."""
    from kgpu.sim.scenario import load_scenario

    scenario = load_scenario(EXAMPLE)
    sim = Simulation(scenario, work_dir=tmp_path / "work")
    sim.start()
    node = sim.node("dgx-0")

    def running() -> list[str]:
        return sorted(r.name for r in sim.pods.values() if r.phase == "Running")

    def offered() -> list[str]:
        return sorted(
            d["name"]
            for s in sim.context.store.list(API, "ResourceSlice")
            for d in s["spec"].get("devices") or []
        )

    legacy = [f"legacy-{i}" for i in range(8)]
    assert running() == legacy and offered() == []
    seen = []
    for step in scenario.steps:
        sim.step(step)
        seen.append((running(), node.allocatable["nvidia.com/gpu"], offered()))
    # the policy changed with every GPU in use: nothing moved
    assert seen[0] == (legacy, 8, [])
    assert seen[1] == (legacy, 8, [])  # train-a waits
    # GPUs 4-7 freed: they leave the device plugin and train-a gets them through its claim
    assert seen[2] == ([*legacy[:4], "train-a"], 4, ["gpu-4", "gpu-5", "gpu-6", "gpu-7"])
    assert seen[3][:2] == ([*legacy[:4], "train-a"], 4)  # "dra" for all: GPUs 0-3 still held
    assert seen[5] == (["train-a", "train-b"], 0, [f"gpu-{i}" for i in range(8)])
    assert sim.pods["default/train-b"].env["train"]["NVIDIA_VISIBLE_DEVICES"] == ",".join(
        g.uuid
        for g in sorted(node.machine.gpus, key=lambda g: g.index)[:4]  # type: ignore[union-attr]
    )
    from kgpu.sim import ownership

    assert ownership.problems(sim.context) == []


@pytest.mark.parametrize("claim_first", [True, False])
def test_the_race_ends_with_one_holder_and_the_loser_told_who_holds_it(claim_first: bool) -> None:
    """A claim pod and a device-plugin pod scheduled onto the only GPU in the same moment:
    the later one to reach the kubelet fails, as the kubelet reports it."""
    sim = start("a40")
    sim.apply(claim_template("one", 1))
    pods = [claim_pod("dra", "one"), dp_pod("dp")]
    for pod in pods if claim_first else reversed(pods):
        sim.apply(pod)
    sim.settle()
    events = {(e.reason, e.object): e.message for e in sim.context.events}
    if claim_first:
        assert sim.pods["default/dra"].phase == "Running"
        dp = sim.pods["default/dp"]
        assert dp.phase == "Failed"  # admitted against allocatable the kubelet had not lowered
        assert dp.obj["status"]["reason"] == "UnexpectedAdmissionError"
        message = events[("UnexpectedAdmissionError", "Pod/default/dp")]
        assert "is held by DRA claim default/dra-gpus-" in message, message
    else:
        assert sim.pods["default/dp"].phase == "Running"
        assert sim.pods["default/dra"].phase == "Pending"  # the kubelet retries the prepare
        message = events[("FailedPrepareDynamicResources", "Pod/default/dra")]
        assert "is held by the device plugin (pod default/dp, nvidia.com/gpu device GPU-" in (
            message
        ), message
    from kgpu.sim import ownership

    assert ownership.problems(sim.context) == []
    assert len(gpus_in_use(sim)) == 1 and all(len(p) == 1 for p in gpus_in_use(sim).values())
