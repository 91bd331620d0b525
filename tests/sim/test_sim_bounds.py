"""Simulated time and scheduling stay bounded (issue 28): a week of ``advance`` with node groups
autoscaling, a ``scan-interval`` of 1 ms or a ``pollingInterval`` of 1 s is refused with the
limit (up front where the work is known, else when the run reaches it), never minutes of
work; 100,000 replicas that stay Pending cost one filter pass per template, not one per pod."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.errors import FieldError
from kgpu.sim import loops, scenario
from kgpu.sim.scenario import load_scenario
from kgpu.sim.scheduler import Scheduler
from kgpu.sim.simulation import Simulation

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "autoscaling"
runner = CliRunner()


def _keda(tmp_path: Path, advance: str = "20m", ca: dict[str, object] | None = None) -> Path:
    """The t4-keda example in ``tmp_path``, its last advance and CA flags replaced."""
    for name in ("scale-gpu.yaml", "scaling-app.yaml"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    doc = yaml.safe_load((EXAMPLE / "t4-keda.yaml").read_text())
    doc["steps"][-1] = {"advance": advance}
    if ca is not None:
        doc["clusterAutoscaler"] = ca
    path = tmp_path / "t4-keda.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _refused(path: Path) -> str:
    start = time.perf_counter()
    with pytest.raises(FieldError) as info:
        load_scenario(path)
    assert time.perf_counter() - start < 5
    return str(info.value)


def test_a_week_of_autoscaling_is_refused_up_front(tmp_path: Path) -> None:
    # issue 28: a week of advance with an autoscaling group ran for minutes
    message = _refused(_keda(tmp_path, advance="168h"))
    assert "steps[5].advance: the advance steps reach 605400 s of simulated time" in message
    assert f"kgpu sim runs at most {loops.MAX_RUNS:,} in one scenario" in message


def test_a_one_millisecond_scan_interval_is_refused_up_front(tmp_path: Path) -> None:
    message = _refused(_keda(tmp_path, ca={"scan-interval": "1ms"}))
    assert "steps[1].advance" in message
    assert "cluster-autoscaler scans every 0.001 s" in message
    assert "lengthen clusterAutoscaler.scan-interval" in message


def test_validate_refuses_it_too(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(_keda(tmp_path, advance="168h"))])
    assert result.exit_code == 1, result.output
    assert "steps[5].advance" in result.output


def test_ten_hours_at_the_default_intervals_are_within_the_limit(tmp_path: Path) -> None:
    load_scenario(_keda(tmp_path, advance="570m"))  # not run: only the count is checked


def test_work_the_loader_cannot_count_stops_at_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pollingInterval of 1 s: the loader counts polls every 30 s, the run counts each."""
    monkeypatch.setattr(loops, "MAX_RUNS", 2000)
    monkeypatch.setattr(scenario, "MAX_RUNS", 2000)
    path = _keda(tmp_path)
    so = yaml.safe_load((tmp_path / "scale-gpu.yaml").read_text())
    so["spec"]["pollingInterval"] = 1
    (tmp_path / "scale-gpu.yaml").write_text(yaml.safe_dump(so))
    start = time.perf_counter()
    result = runner.invoke(app, ["sim", str(path)])
    assert time.perf_counter() - start < 30
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    err = " ".join(result.output.split())
    assert "error: " in err and "t4-keda.yaml: steps[5].advance: the simulated clock" in err
    assert "after 2,000 periodic runs" in err and "KEDA polls" in err


def test_loops_count_every_run_and_stop_at_their_limit() -> None:
    queue = loops.Loops(limit=3)
    for t in range(5):
        queue.at(float(t), loops.SCRAPE, lambda now: False)
    for _ in range(3):
        queue.pop()
    with pytest.raises(loops.LoopLimitError, match=r"reached 3 s after 3 periodic runs \(3 Pro"):
        queue.pop()


def test_identical_pending_replicas_cost_one_filter_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 28: 100,000 replicas on two T4 nodes took 66.7 s, a filter pass per Pending pod
    (tmp_path / "dep.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "big"},
                "spec": {
                    "replicas": 400,
                    "selector": {"matchLabels": {"app": "big"}},
                    "template": {
                        "metadata": {"labels": {"app": "big"}},
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "x",
                                    "resources": {"limits": {"nvidia.com/gpu": 1}},
                                }
                            ]
                        },
                    },
                },
            }
        )
    )
    (tmp_path / "s.yaml").write_text(
        "nodes: [{name: t4, machine: t4, count: 2}]\napply: [dep.yaml]\nsteps: [{advance: 1m}]\n"
    )
    calls = 0
    original = Scheduler.find_node

    def counted(self: Scheduler, rec: object) -> object:
        nonlocal calls
        calls += 1
        return original(self, rec)  # type: ignore[arg-type]

    monkeypatch.setattr(Scheduler, "find_node", counted)
    sim = Simulation(load_scenario(tmp_path / "s.yaml")).run()
    pods = sim.report()["pods"]
    pending = [p for p in pods if p["phase"] == "Pending"]
    assert len(pods) == 400 and len(pending) == 398
    assert len({p["message"] for p in pending}) == 1  # each says why, as upstream's would
    assert pending[0]["message"].startswith("0/2 nodes are available: 2 Insufficient")
    failed = [e for e in sim.report()["events"] if e["reason"] == "FailedScheduling"]
    assert len(failed) == 398  # every pod still gets its event
    assert calls < 10  # 2 placements, one failed filter pass (was 400)


def test_expect_message_regexes_are_re2_in_linear_time() -> None:
    from kgpu.sim.expect.checks import EventCheck
    from kgpu.sim.plugins import Event
    from kgpu.sim.scenario_parts import Errors

    err = Errors("e.yaml")
    check = EventCheck.parse({"messageRegex": "(a|aa)*c"}, "events[0]", err)
    assert check is not None and not err.problems
    event = Event("Warning", "FailedScheduling", "Pod/default/x", "a" * 5000)
    start = time.perf_counter()
    assert not check.matches(event)  # type: ignore[attr-defined]
    assert time.perf_counter() - start < 1.0  # issue 28: Python's re hung here
    assert check.matches(Event("Normal", "R", "Pod/default/x", "xaac"))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("pattern", "words"),
    [("(a)\\1", "invalid escape sequence"), ("a{1000}{1000}", "bad repetition operator")],
)
def test_expect_regexes_re2_refuses_are_field_errors(pattern: str, words: str) -> None:
    from kgpu.sim.expect.checks import EventCheck
    from kgpu.sim.scenario_parts import Errors

    err = Errors("e.yaml")
    EventCheck.parse({"messageRegex": pattern}, "events[0]", err)
    (problem,) = err.problems
    assert problem.path == "events[0].messageRegex"
    assert "is not a regular expression" in problem.message and words in problem.message
