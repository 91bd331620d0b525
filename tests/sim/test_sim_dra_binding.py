"""Binding conditions in ``kgpu sim``: PreBind waits for the device's conditions, fails on a
failure condition or after upstream's 600 s timeout, with kube-scheduler's events; and
prioritized-list scoring picks the node where the claim gets its first alternative."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kgpu.sim import dra_scheduler
from kgpu.sim.dra_binding import BINDING_TIMEOUT_S, claim_binding, claim_ready
from kgpu.sim.scenario import load_scenario
from kgpu.sim.simulation import Simulation

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dra"
API = "resource.k8s.io/v1"


def messages(sim: Simulation, pod: str) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in sim.events if e.object == f"Pod/default/{pod}"]


def claim_of(sim: Simulation, pod: str) -> dict[str, Any]:
    return next(
        c
        for c in sim.store.list(API, "ResourceClaim")
        if c["metadata"]["name"].startswith(f"{pod}-gpu-")
    )


def test_prebind_waits_fails_retries_and_times_out(tmp_path: Path) -> None:
    scenario = load_scenario(EXAMPLES / "binding-conditions.yaml")
    sim = Simulation(scenario, work_dir=tmp_path)
    sim.start()
    for pod in ("trainer-a", "trainer-b"):
        assert sim.pods[f"default/{pod}"].phase == "Pending"
        assert sim.pods[f"default/{pod}"].node == ""  # not bound while PreBind waits
        reason, message = messages(sim, pod)[-1]
        assert reason == "BindingConditionsPending"
        assert message.startswith("waiting for binding conditions for device on node node-")
    claim = claim_of(sim, "trainer-a")
    allocation = claim["status"]["allocation"]
    assert allocation["allocationTimestamp"] == "2025-01-01T00:00:00Z"
    assert allocation["devices"]["results"][0]["device"] == "fgpu-a0"
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
        "node-0"
    ]  # bindsToNode

    sim.step(scenario.steps[0])  # t=30: fgpu-a0 fails to attach
    name = claim["metadata"]["name"]
    said = messages(sim, "trainer-a")
    assert said[1:] == [
        (
            "FailedScheduling",
            f'running PreBind plugin "DynamicResources": claim {name} binding failed: '
            'reason=AttachFailed, message="attaching fgpu-a0 to node node-0 failed"',
        ),
        (
            "FailedScheduling",
            "0/2 nodes are available: 2 resourceclaim not available on the node. "
            "deallocation of ResourceClaim completed, preemption: 0/2 nodes are available: "
            "2 Preemption is not helpful for scheduling.",
        ),
        ("BindingConditionsPending", "waiting for binding conditions for device on node node-0"),
    ]
    # the failed device is kept from new claims (the stand-in driver taints it)
    assert (
        claim_of(sim, "trainer-a")["status"]["allocation"]["devices"]["results"][0]["device"]
        == "fgpu-a1"
    )
    assert [r["metadata"]["name"] for r in sim.store.list(API, "DeviceTaintRule")] == [
        "attach-failed-switch-a-fgpu-a0"
    ]

    sim.step(scenario.steps[1])  # t=60: fgpu-a1 attached
    rec = sim.pods["default/trainer-a"]
    assert rec.phase == "Running" and rec.node == "node-0"
    assert messages(sim, "trainer-a")[-1] == (
        "Scheduled",
        "Successfully assigned default/trainer-a to node-0",
    )
    conditions = claim_of(sim, "trainer-a")["status"]["devices"][0]["conditions"]
    assert [(c["type"], c["status"]) for c in conditions] == [
        ("fabric.example.com/attached", "True")
    ]

    sim.step(scenario.steps[2])  # t=600: nobody attached fgpu-b0
    b = claim_of(sim, "trainer-b")["metadata"]["name"]
    assert messages(sim, "trainer-b")[1][1] == (
        f'running PreBind plugin "DynamicResources": claim {b} binding timeout'
    )
    assert sim.pods["default/trainer-b"].phase == "Pending"
    assert claim_of(sim, "trainer-b")["status"]["allocation"]["allocationTimestamp"] == (
        "2025-01-01T00:10:00Z"  # allocated afresh, waiting again
    )


def _claim(conditions: list[dict[str, str]] | None) -> dict[str, Any]:
    result = {
        "request": "r",
        "driver": "d",
        "pool": "p",
        "device": "x",
        "bindingConditions": ["ok"],
        "bindingFailureConditions": ["bad"],
    }
    status: dict[str, Any] = {"allocation": {"devices": {"results": [result]}}}
    if conditions is not None:
        status["devices"] = [{"driver": "d", "pool": "p", "device": "x", "conditions": conditions}]
    return {"metadata": {"name": "c"}, "status": status}


@pytest.mark.parametrize(
    ("conditions", "ready", "failure"),
    [
        (None, False, ""),
        ([{"type": "ok", "status": "False"}], False, ""),
        ([{"type": "ok", "status": "True"}], True, ""),
        (
            [{"type": "ok", "status": "True"}, {"type": "bad", "status": "True", "reason": "R"}],
            False,
            'claim c binding failed: reason=R, message=""',
        ),
    ],
)
def test_claim_ready(conditions: Any, ready: bool, failure: str) -> None:
    assert claim_ready(_claim(conditions)) == (ready, failure)


def test_claim_binding_times_out_after_600_seconds() -> None:
    waiting = _claim(None)
    assert BINDING_TIMEOUT_S == 600
    assert claim_binding(waiting, 0.0, 599.0) == ""
    assert claim_binding(waiting, 0.0, 600.0) == "claim c binding timeout"
    assert claim_binding(_claim([{"type": "ok", "status": "True"}]), 0.0, 900.0) is None


def test_prioritized_list_score_picks_the_first_alternative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scenario = load_scenario(EXAMPLES / "prioritized-list.yaml")
    sim = Simulation(scenario, work_dir=tmp_path).run()
    assert sim.pods["default/inference"].node == "h200-node"
    claim = next(iter(sim.store.list(API, "ResourceClaim")))
    assert claim["status"]["allocation"]["devices"]["results"][0]["request"] == "gpu/h200"
    # without the score, the scheduler's own order would have taken the A100 node
    monkeypatch.setattr(dra_scheduler.DraSchedulerPlugin, "score", lambda *_: None)
    plain = Simulation(scenario, work_dir=tmp_path / "plain").run()
    assert plain.pods["default/inference"].node == "a100-node"
