"""How ``kgpu sim`` tables fold events: identical ones become one row with a count, but a later
different outcome for the same object is never hidden in an earlier row; and the ComputeDomain
status table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.cli import app, output
from kgpu.sim.plugins import Event
from kgpu.sim.report import fold_events

REPO = Path(__file__).resolve().parents[2]
HEAL = REPO / "examples" / "computedomain" / "heal-four-node-domain.yaml"
CD = "ComputeDomain/default/d"
READY = Event("Normal", "ComputeDomainReady", CD, "4 of 4 IMEX daemon(s) Ready")
NOT_READY = Event("Warning", "ComputeDomainNotReady", CD, "node n-0 of the domain is NotReady")


def rows(events: list[Event]) -> list[tuple[str, str, int]]:
    return [(g.reason, g.who(), g.count) for g in fold_events(events)]


def test_ready_after_not_ready_is_the_last_row() -> None:
    # the same Ready message before and after: one row would end the table on NotReady
    assert rows([READY, NOT_READY, READY]) == [
        ("ComputeDomainReady", CD, 1),
        ("ComputeDomainNotReady", CD, 1),
        ("ComputeDomainReady", CD, 1),
    ]


def test_identical_events_aggregate_with_a_count() -> None:
    pending = [
        Event("Warning", "FailedScheduling", f"Pod/default/p{i}", "0/1 nodes are available")
        for i in (0, 1, 2, 0, 1)
    ]
    assert rows(pending) == [("FailedScheduling", "Pod/default/p0 (+2 more)", 5)]
    assert fold_events(pending)[0].objects == ["Pod/default/p0", "Pod/default/p1", "Pod/default/p2"]


def test_another_objects_event_in_between_does_not_split_a_row() -> None:
    other = Event("Warning", "ComputeDomainNotReady", "ComputeDomain/default/e", "x")
    assert rows([READY, other, READY]) == [
        ("ComputeDomainReady", CD, 2),
        ("ComputeDomainNotReady", "ComputeDomain/default/e", 1),
    ]


def test_quiet_reasons_are_left_out() -> None:
    scheduled = Event("Normal", "Scheduled", "Pod/default/p", "assigned")
    assert rows([scheduled, READY]) == [("ComputeDomainReady", CD, 1)]
    assert rows([scheduled]) == []


def _text(args: list[str], columns: int = 160) -> str:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.console, "_width", columns)
        result = CliRunner().invoke(app, args, env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_table_ends_with_the_domain_ready_again() -> None:
    out = _text(["sim", str(HEAL)])
    events = out[out.index("Events") :]
    assert events.index("ComputeDomainNotReady") < events.rindex("ComputeDomainReady")
    assert "(+1 more)" not in events.split("ComputeDomainReady")[1].splitlines()[0]


def test_compute_domain_status_table() -> None:
    out = _text(["sim", str(HEAL)])
    table = out[out.index("ComputeDomains") : out.index("Events")]
    row = next(line for line in table.splitlines() if "default/train-4" in line)
    assert "Ready" in row and "4/4 of 4" in row
    assert "7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.0" in table
    assert "4 of 4 IMEX daemon(s) Ready in clique" in table
    # a cluster without domains has no such table
    assert "ComputeDomains" not in _text(["sim"])


def test_watch_shows_each_steps_events_folded_with_the_outcome_last() -> None:
    out = _text(["sim", str(HEAL), "--watch"])
    final = re.search(r"^heal-four-node-domain\b", out, re.M)  # the final state's title
    assert final is not None, out
    step = out[out.index("steps[0]") : final.start()]
    lines = [line for line in step.splitlines() if line.startswith(("  Normal", "  Warning"))]
    reasons = [line.split()[1] for line in lines]
    assert reasons[-1] == "ComputeDomainReady", lines
    assert "ComputeDomainNotReady" in reasons
    # identical rewrites of one node fold into one row with their count
    assert any(
        re.search(r"IMEXNodesConfigUpdated \(x\d+\) Node/rack-a-1 \(\+\d+ more\)", line)
        for line in lines
    )
