"""``kgpu sim --expect FILE`` and the scenario key ``expect``: what a CI job sees. The examples
pass; a broken assertion of every kind fails with exit 1 and one line saying where (a step or
final), what was expected and what the cluster had; bad expect files are refused with field
paths before anything runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from kgpu.cli import app, output
from kgpu.testing.manifests import deployment

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
HEAL = EXAMPLES / "computedomain" / "heal-four-node-domain.yaml"
runner = CliRunner()

# a small cluster: one time-sliced T4 (4 slots), 5 pods wanted; a step adds a second T4
SCENARIO: dict[str, Any] = {
    "name": "small",
    "nodes": [{"name": "gpu", "machine": "t4"}],
    "configs": [str(EXAMPLES / "manifests" / "gpu-sharing-config-any-mps.yaml")],
    "apply": [
        deployment("web", 5, {"nvidia.com/gpu": 1}),
    ],
    "steps": [{"name": "more GPUs", "addNodes": {"name": "more", "machine": "t4"}}],
}


def sim(*args: str) -> tuple[int, str, str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.err_console, "_width", 300)
        result = runner.invoke(app, ["sim", *args], env={"COLUMNS": "160"})
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stdout, result.stderr


def scenario_file(tmp_path: Path, expect: object | None = None, **changes: Any) -> Path:
    data = {**SCENARIO, **changes}
    if expect is not None:
        data["expect"] = expect
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def expect_file(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "expect.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def fails(code: int, err: str) -> list[str]:
    assert code == 1, err
    return [line for line in err.splitlines() if line.startswith("FAIL ")]


# -- the examples --------------------------------------------------------------------------


def test_the_ci_gate_example_passes() -> None:
    code, _, err = sim(str(EXAMPLES / "expect" / "time-slicing-gate.yaml"))
    assert code == 0, err
    assert "expect: all 10 assertion(s) hold" in err


def test_the_heal_example_passes_with_expect_file() -> None:
    code, out, err = sim(
        str(HEAL), "--expect", str(EXAMPLES / "expect" / "heal-four-node-domain.expect.yaml")
    )
    assert code == 0, err
    assert "all 14 assertion(s) hold" in err
    assert "ComputeDomains" in out  # the report is printed as without --expect


# -- failures --------------------------------------------------------------------------------


def test_a_failed_assertion_per_kind_is_one_line_with_where_expected_got(tmp_path: Path) -> None:
    path = scenario_file(tmp_path)
    wrong = {
        "steps": [
            {
                "step": "initial",
                "workloads": [{"workload": "Deployment/web", "running": 5}],
                "events": [{"reason": "FailedScheduling", "absent": True}],
            },
            {"step": "more GPUs", "nodes": [{"count": 3}]},
        ],
        "final": {
            "pods": [{"workload": "web", "node": "gpu"}],
            "resources": [{"node": "more", "allocatable": {"nvidia.com/gpu": 8}}],
            "computeDomains": [{"name": "none", "status": "Ready"}],
            "events": [{"reason": "GPUUnhealthy"}],
        },
    }
    code, _, err = sim(str(path), "--expect", str(expect_file(tmp_path, wrong)))
    lines = fails(code, err)
    assert "expect: 7 of 7 assertion(s) failed" in err
    joined = "\n".join(lines)
    assert (
        "initial: Deployment/default/web: running: expected 5, got 4  "
        f"[{tmp_path / 'expect.yaml'}: steps[0].workloads[0]]" in joined
    )
    assert (
        "initial: event FailedScheduling: absent: expected no such event, got 1, first: " in joined
    )
    assert "after steps[0] (more GPUs): all nodes: count: expected 3, got 2" in joined
    assert "final: default/web: node: expected gpu, got default/web-" in joined
    assert "final: node more: allocatable.nvidia.com/gpu: expected 8, got 4" in joined
    assert (
        "final: ComputeDomain default/none: computeDomain: expected to exist, got no such" in joined
    )
    assert "final: event GPUUnhealthy: present: expected at least one, got none" in joined


def test_json_output_carries_the_outcome_and_still_exits_1(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, {"final": {"workloads": [{"workload": "web", "pending": 1}]}})
    code, out, _ = sim(str(path), "-o", "json")
    assert code == 1
    outcome = json.loads(out)["expect"]
    assert outcome["assertions"] == 1 and outcome["passed"] == 0
    assert outcome["failures"] == [
        {
            "where": "final",
            "check": "expect.final.workloads[0]",
            "file": str(path),
            "subject": "default/web",
            "field": "pending",
            "expected": "1",
            "got": "0",
        }
    ]


def test_comparisons_and_every_check_kind_that_holds(tmp_path: Path) -> None:
    expect = {
        "steps": [
            {
                "step": "initial",
                "workloads": [{"workload": "Deployment/web", "running": ">=4", "pending": "!=0"}],
                "events": [{"type": "Warning", "messageRegex": r"^0/1 nodes .* Insufficient"}],
            },
            {
                "step": 0,
                "events": [
                    {"reason": "FailedScheduling", "absent": True},  # only this step's events
                    {"reason": "NodeReady", "object": "Node/more", "count": 1},
                ],
            },
        ],
        "final": {
            "workloads": [{"workload": "web", "pods": 5, "running": 5}],
            "pods": [{"workload": "web", "phase": "Running"}],
            "nodes": [{"group": "more", "count": 1, "ready": 1}, {"count": "<3"}],
            "resources": [
                {
                    "node": "gpu",
                    "capacity": {"nvidia.com/gpu": 4, "memory": ">=64Gi"},
                    "allocated": {"nvidia.com/gpu": "<=4", "cpu": "0"},
                }
            ],
            "events": [{"reason": "FailedScheduling", "count": ">=1"}],
        },
    }
    code, _, err = sim(str(scenario_file(tmp_path, expect)))
    assert code == 0, err
    assert "all 10 assertion(s) hold" in err


def test_expect_file_and_scenario_key_are_both_checked(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, {"final": {"nodes": [{"count": 2}]}})
    extra = expect_file(tmp_path, {"final": {"nodes": [{"count": 5}]}})
    code, _, err = sim(str(path), "--expect", str(extra))
    assert fails(code, err) == [
        f"FAIL final: all nodes: count: expected 5, got 2  [{extra}: final.nodes[0]]"
    ]
    assert "1 of 2 assertion(s) failed" in err


# -- bad expect files --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expect", "problem"),
    [
        ({"finale": {}}, "finale: unknown field 'finale'; allowed: final, steps"),
        ({"final": {"pod": []}}, "final.pod: unknown field 'pod'; allowed: workloads, pods, "),
        (
            {"final": {"workloads": [{"workload": "web"}]}},
            "final.workloads[0]: needs a count: running, pending, succeeded, failed or pods",
        ),
        (
            {"final": {"workloads": [{"workload": "web", "running": "lots"}]}},
            "final.workloads[0].running: 'lots': must be a whole number >= 0",
        ),
        (
            {"final": {"workloads": [{"workload": "web", "runing": 1}]}},
            "final.workloads[0].runing: unknown field 'runing'; allowed: workload, namespace, ",
        ),
        (
            {"steps": [{"step": 3, "nodes": [{"count": 1}]}]},
            "steps[0].step: 3: the scenario has 1 step(s) (indexes 0 to 0)",
        ),
        (
            {"steps": [{"step": "less GPUs", "nodes": [{"count": 1}]}]},
            "steps[0].step: 'less GPUs': no step has this name; named steps: 'more GPUs'",
        ),
        (
            {"final": {"events": [{"messageRegex": "("}]}},
            "final.events[0].messageRegex: '(' is not a regular expression",
        ),
        (
            {"final": {"events": [{"reason": "X", "absent": True, "count": 2}]}},
            "final.events[0]: absent: true and count exclude each other",
        ),
        (
            {"final": {"pods": [{"pod": "a", "workload": "b", "phase": "Running"}]}},
            "final.pods[0]: needs exactly one of pod",
        ),
        (
            {"final": {"pods": [{"pod": "a", "phase": "Runing"}]}},
            "final.pods[0].phase: 'Runing': allowed: Pending, Running, Succeeded, Failed",
        ),
        (
            {"final": {"resources": [{"node": "gpu", "allocatable": {"nvidia.com/gpu": "x"}}]}},
            "final.resources[0].allocatable.nvidia.com/gpu: 'x': ",
        ),
        (
            {"final": {"computeDomains": [{"name": "d", "status": "Healthy"}]}},
            "final.computeDomains[0].status: 'Healthy': allowed: Ready, NotReady",
        ),
        ({"final": {"nodes": []}}, "final.nodes: must be a list of {group, labels, count"),
        ([], "must be a map with final and/or steps"),
    ],
)
def test_bad_expect_file_is_refused_with_its_field_path(
    tmp_path: Path, expect: object, problem: str
) -> None:
    path = expect_file(tmp_path, expect)
    code, out, err = sim(str(scenario_file(tmp_path)), "--expect", str(path))
    assert code == 1
    assert f"error: {path}: {problem}" in err, err
    assert out == ""  # nothing ran


def test_bad_inline_expect_is_reported_at_its_scenario_path(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, {"final": {"nodes": [{"count": -1}]}})
    code, _, err = sim(str(path))
    assert code == 1
    assert f"{path}: expect.final.nodes[0].count: -1: must be a whole number >= 0" in err
    # kgpu validate runs the same checks on the scenario
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1 and "expect.final.nodes[0].count" in result.output


def test_missing_expect_file(tmp_path: Path) -> None:
    code, _, err = sim(str(scenario_file(tmp_path)), "--expect", str(tmp_path / "nope.yaml"))
    assert code == 1
    assert f"{tmp_path / 'nope.yaml'}: cannot read: No such file or directory" in err


def test_validate_checks_an_expect_file_on_its_own(tmp_path: Path) -> None:
    good = runner.invoke(
        app, ["validate", str(EXAMPLES / "expect" / "heal-four-node-domain.expect.yaml")]
    )
    assert good.exit_code == 0, good.output
    assert "kgpu sim expect file (14 assertion(s) at 3 point(s)" in good.output
    bad = expect_file(tmp_path, {"steps": [{"step": -1, "nodes": [{"count": "many"}]}]})
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}: steps[0].step: -1: a step index is 0 or more" in result.output
    assert f"{bad}: steps[0].nodes[0].count: 'many': must be a whole number" in result.output
