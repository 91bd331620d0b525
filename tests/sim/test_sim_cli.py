"""``kgpu sim`` on the command line: the quickstart, JSON keys, --watch, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.cli import app

runner = CliRunner()


def test_quickstart_tells_the_story_as_json() -> None:
    result = runner.invoke(app, ["sim", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"nodes", "pods", "events"} <= set(data)
    first = next(e for e in data["events"] if e["reason"] == "FailedScheduling")
    assert first == {
        "type": "Warning",
        "reason": "FailedScheduling",
        "object": "Pod/default/gpu-operator-test",
        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
        "count": 1,
        "firstTimestamp": "2025-01-01T00:00:00Z",
        "lastTimestamp": "2025-01-01T00:00:00Z",
    }
    nodes = {n["name"]: n for n in data["nodes"]}
    assert nodes["node-2080ti"]["allocated"]["nvidia.com/gpu"] == "4"
    assert nodes["node-4090"]["mps"][0]["replicas"] == 8
    assert nodes["node-a100"]["capacity"]["nvidia.com/mig-3g.40gb"] == "4"
    assert nodes["node-a100"]["allocatable"]["nvidia.com/gpu"] == "3"  # after the XID
    mig_pod = next(p for p in data["pods"] if p["name"] == "mig-3g-40gb")
    assert mig_pod["phase"] == "Running" and mig_pod["devices"]["cuda"][0].startswith("MIG-")
    for pod in data["pods"]:
        assert set(pod) >= {"namespace", "name", "phase", "nodeName", "devices", "env"}


def test_watch_prints_a_table_per_step() -> None:
    result = runner.invoke(app, ["sim", "--watch"], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "initial state" in result.stdout
    assert "install the NVIDIA device plugin" in result.stdout


def test_bad_scenario_exits_1_with_field_error(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("nodes:\n  - name: x\n    machine: nope\n")
    result = runner.invoke(app, ["sim", str(path)])
    assert result.exit_code == 1
    assert "nodes[0].machine: unknown machine profile 'nope'" in result.output
    assert "Traceback" not in result.output


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# the simulator's own examples (other parts keep theirs in examples/<area>/)
SCENARIOS = [*sorted(EXAMPLES.glob("*.yaml")), EXAMPLES / "quickstart" / "quickstart.yaml"]


def test_examples_are_there() -> None:
    assert len(SCENARIOS) >= 5


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_example_scenario_runs(path: Path) -> None:
    result = runner.invoke(app, ["sim", str(path), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["pods"], "an example should run something"
    assert not data.get("warnings")


def test_quickstart_copy_under_examples_matches_package_data() -> None:
    from kgpu.sim.quickstart import quickstart_path

    packaged = quickstart_path().parent
    for copy in (Path(__file__).resolve().parents[2] / "examples" / "quickstart").iterdir():
        assert copy.read_text() == (packaged / copy.name).read_text(), copy.name
