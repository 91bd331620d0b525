"""What the report records of a run: every step's nodes, GPUs, devices and who holds them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.dra.slices import resource_slices
from kgpu.hardware.mig import geometry_for
from kgpu.hardware.profiles import load_machine
from kgpu.sim.html import plan_picture, record_run
from kgpu.sim.html.capture import memory_slices, resolve_claims
from kgpu.sim.html.gpus import gpu_cells
from kgpu.sim.quickstart import quickstart_path
from kgpu.sim.scenario import load_scenario, scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.testing.manifests import deployment

REPO = Path(__file__).resolve().parents[2]
DEPLOYMENT = "Deployment default/time-slicing-verification"


def run(scenario: Any, **kw: Any) -> dict[str, Any]:
    sim = Simulation(scenario)
    try:
        return record_run(sim, **kw)
    finally:
        sim.close()


@pytest.fixture(scope="module")
def quickstart() -> Iterator[dict[str, Any]]:
    yield run(load_scenario(quickstart_path()))


def node(frame: dict[str, Any], name: str) -> dict[str, Any]:
    return next(n for n in frame["nodes"] if n["name"] == name)


def test_a_frame_per_step_with_the_steps_titles(quickstart: dict[str, Any]) -> None:
    frames = quickstart["frames"]
    assert len(frames) == 11
    assert frames[0]["title"] == "initial state"
    assert frames[-1]["title"] == "XID 79 (GPU fell off the bus) on the A100 node's GPU 5"
    # before the device plugin: the GPU is there, nothing advertises it, the pod waits
    first = node(frames[0], "node-2080ti")["gpus"][0]
    assert (first["mode"], first["devices"][0]["slots"]) == ("none", [])
    assert frames[0]["pending"] == [
        {
            "pod": "default/gpu-operator-test",
            "workload": "Pod default/gpu-operator-test",
            "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: "
            "0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
        }
    ]
    assert [e["reason"] for e in frames[0]["events"]] == ["FailedScheduling"]


def test_shared_gpus_are_split_among_the_pods_holding_their_replicas(
    quickstart: dict[str, Any],
) -> None:
    final = quickstart["frames"][-1]
    sliced = node(final, "node-2080ti")["gpus"][0]
    mps = node(final, "node-4090")["gpus"][0]
    assert (sliced["mode"], mps["mode"]) == ("time-slicing", "mps")
    for gpu, replicas in ((sliced, 4), (mps, 8)):
        slots = gpu["devices"][0]["slots"]
        assert len(slots) == replicas and len(set(slots)) == replicas  # one pod per replica
        assert {final["workloads"][s] for s in slots} == {DEPLOYMENT}
    # at step 5 only one pod is an MPS client: seven replicas are free
    step5 = node(quickstart["frames"][5], "node-4090")["gpus"][0]["devices"][0]["slots"]
    assert sum(s is not None for s in step5) == 1


def test_mig_devices_sit_at_their_placements_and_the_xid_marks_gpu_5(
    quickstart: dict[str, Any],
) -> None:
    a100 = node(quickstart["frames"][-1], "node-a100")
    geometry = geometry_for(load_machine("p4de.24xlarge").gpus[0])
    assert geometry is not None and geometry.memory_slices == 8
    assert [g["slices"] for g in a100["gpus"]] == [8] * 4 + [0] * 4  # GPUs 4-7 are whole
    layout = [(d["profile"], d["start"], d["size"]) for d in a100["gpus"][0]["devices"]]
    assert layout == [("2g.20gb", 0, 2), ("1g.10gb", 2, 1), ("1g.10gb", 3, 1), ("3g.40gb", 4, 4)]
    held = [
        (g["index"], d["profile"], s)
        for g in a100["gpus"]
        for d in g["devices"]
        for s in d["slots"]
        if s
    ]
    assert held == [(0, "3g.40gb", "default/mig-3g-40gb")]
    bad = [(g["index"], g.get("xid")) for g in a100["gpus"] if g["unhealthy"]]
    assert bad == [(5, 79)]
    assert a100["migConfig"] == "p4de-half-balanced" and a100["config"] == "mig-mixed"


def test_series_follow_the_clock_replicas_nodes_and_pending() -> None:
    picture = run(
        scenario_from_dict(
            {
                "nodes": [{"name": "t4", "count": 2, "machine": "t4"}],
                "apply": [deployment("web", 1, {"nvidia.com/gpu": 1})],
                "steps": [
                    {"advance": "1m"},
                    {"scale": {"name": "web", "replicas": 3}},
                    {"advance": "5m"},
                    {"addNodes": [{"name": "extra", "machine": "t4"}]},
                ],
            }
        )
    )
    stats = [f["stats"] for f in picture["frames"]]
    web = "Deployment default/web"
    assert [s["time"] for s in stats] == [0, 60, 60, 360, 360]
    assert [s["running"].get(web, 0) for s in stats] == [1, 1, 2, 2, 3]
    assert [s["desired"][web] for s in stats] == [1, 1, 3, 3, 3]
    assert [s["pendingPods"] for s in stats] == [0, 0, 1, 1, 0]
    assert stats[-1]["nodes"] == {"t4": 2, "extra": 1}
    assert [(s["gpus"], s["gpusInUse"]) for s in stats] == [(2, 1), (2, 1), (2, 2), (2, 2), (3, 3)]
    # what the simulated exporter reports: busy GPUs at the default 80 % SM demand, idle at 0
    assert stats[0]["gpuUtilization"] == pytest.approx(40.0)
    assert [g["name"] for g in picture["frames"][-1]["groups"]] == ["t4", "extra"]


def test_a_capped_map_draws_a_quota_per_group_failed_nodes_first() -> None:
    picture = run(
        scenario_from_dict(
            {
                "nodes": [
                    {"name": "big", "count": 12, "machine": "t4"},
                    {"name": "small", "count": 3, "machine": "t4"},
                ],
                "steps": [{"failNode": "big-11"}],
            }
        ),
        max_nodes=5,
    )
    final = picture["frames"][-1]
    assert [n["name"] for n in final["nodes"]] == ["big-0", "big-1", "big-2", "big-11", "small-0"]
    assert [(g["name"], g["nodes"], g["ready"], g["shown"]) for g in final["groups"]] == [
        ("big", 12, 11, 4),
        ("small", 3, 3, 1),
    ]
    assert final["stats"]["gpus"] == 15  # the counts cover every node, drawn or not


def test_compute_domain_channels_per_node() -> None:
    picture = run(load_scenario(REPO / "examples/computedomain/two-domains-one-node.yaml"))
    tray = node(picture["frames"][-1], "tray")
    channels = sorted(
        (c["domain"], c["device"], c["pod"]) for c in tray["channels"] if "channel" in c["device"]
    )
    assert channels == [
        ("default/dom-a", "channel-0", "default/pod-a"),
        ("default/dom-b", "channel-1", "default/pod-b"),
    ]
    assert tray["clique"] == "7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.0"


def claim(name: str, device: str, pool: str = "n1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "r", "driver": "gpu.nvidia.com", "pool": pool, "device": device}
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": f"pod-{name}", "uid": "u"}],
        },
    }


def test_dra_claims_mark_whole_gpus_and_mig_devices_made_on_demand() -> None:
    machine = load_machine("dgx-h100", hostname="n1")
    slices = resource_slices(machine, "n1", partitionable=True)
    mig_name = next(
        d["name"]
        for s in slices
        for d in s["spec"].get("devices", [])
        if d["attributes"].get("profile", {}).get("string") == "3g.40gb"
        and d["attributes"]["parentUUID"]["string"] == machine.gpus[1].uuid
        and 4 in memory_slices(d)
    )
    gpus, channels = resolve_claims([claim("a", "gpu-0"), claim("b", mig_name)], slices, {})
    assert channels == {}
    cells = gpu_cells(machine, None, {}, dra=gpus["n1"])
    whole = cells[0]
    assert (whole["mode"], whole["devices"][0]["slots"], whole["devices"][0]["claim"]) == (
        "whole",
        ["default/pod-a"],
        "default/a",
    )
    made = cells[1]
    assert made["mode"] == "mig" and made["slices"] == 8
    assert [(d["profile"], d["start"], d["size"], d["claim"]) for d in made["devices"]] == [
        ("3g.40gb", 4, 4, "default/b")
    ]
    assert cells[2]["mode"] == "none"  # no device plugin view: nothing else is handed out


def test_plan_picture_is_one_free_node_and_says_when_mig_is_handed_out_whole() -> None:
    from kgpu.config.loader import ConfigSet
    from kgpu.drivers.migpreview import machine_after_mig
    from kgpu.node.view import build_node_view

    # the GPUs as the MIG manager leaves them under all-1g.10gb (the view never applies it)
    machine = machine_after_mig(load_machine("p4de.24xlarge"), ConfigSet(), {}, "all-1g.10gb")
    view = build_node_view(machine, ConfigSet(), {}, mig_config_name="all-1g.10gb")
    picture = plan_picture(view, "n1")
    (frame,) = picture["frames"]
    (only,) = frame["nodes"]
    assert picture["kind"] == "plan" and only["name"] == "n1"
    # migStrategy none: each GPU is advertised whole, the picture says why it looks whole
    assert {g["mode"] for g in only["gpus"]} == {"whole"}
    assert "migStrategy none" in only["gpus"][0]["note"]
    assert all(s is None for g in only["gpus"] for d in g["devices"] for s in d["slots"])
