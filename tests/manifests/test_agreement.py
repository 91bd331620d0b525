"""``kgpu validate`` and ``kgpu sim`` judge manifests alike: one table of good and bad objects
(``agreement.yaml``), each run through both, with the verdict, the field path and the message
they must share. Before, a Pod with an unknown container field failed ``validate`` and ran in
``sim``, and a toleration with ``effect: Bogus`` passed ``validate`` and failed ``sim``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.errors import FieldError, FieldProblem
from kgpu.manifests import schema_validation_available, validate_text
from kgpu.sim.scenario import scenario_from_dict

CASES: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "agreement.yaml").read_text())


def _validate(manifest: dict[str, Any]) -> list[FieldProblem]:
    return validate_text(yaml.safe_dump(manifest), file="m.yaml").problems


def _sim(manifest: dict[str, Any]) -> list[FieldProblem]:
    try:
        scenario_from_dict({"nodes": [], "apply": [manifest]})
    except FieldError as exc:
        return list(exc.problems)
    return []


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_validate_and_sim_agree(case: dict[str, Any]) -> None:
    if case.get("schema") and not schema_validation_available():
        pytest.skip("needs the official schemas (pip install kubernetes-validate)")
    by_validate = _validate(case["manifest"])
    by_sim = _sim(case["manifest"])
    # the same problems at the same fields; the sim names them under the scenario's apply[0]
    assert [(p.path, p.message) for p in by_validate] == [
        (p.path.removeprefix("apply[0]."), p.message) for p in by_sim
    ]
    if case.get("ok"):
        assert by_validate == []
        return
    assert by_validate, "a bad manifest passed"
    first = by_validate[0]
    assert (first.path, case["message"] in first.message) == (case["path"], True), first


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_two_reported_disagreements_now_fail_both_commands(tmp_path: Path) -> None:
    runner = CliRunner()
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        "  containers: [{name: c, image: i%s}]\n%s"
    )
    cases = [
        (", bogus: 1", ""),
        ("", "  tolerations: [{key: k, operator: Exists, effect: Bogus}]\n"),
    ]
    if not schema_validation_available():
        cases = cases[1:]
    for i, (field, tolerations) in enumerate(cases):
        manifest = _write(tmp_path, f"pod{i}.yaml", pod % (field, tolerations))
        scenario = _write(tmp_path, f"s{i}.yaml", f"nodes: []\napply: [pod{i}.yaml]\n")
        checked = runner.invoke(app, ["validate", manifest])
        simulated = runner.invoke(app, ["sim", scenario])
        assert (checked.exit_code, simulated.exit_code) == (1, 1), (
            checked.output,
            simulated.output,
        )
        assert "Traceback" not in checked.output + simulated.output


def test_unknown_kinds_are_an_error_to_validate_and_stored_by_the_sim() -> None:
    """The one stated difference: a kind kgpu has no schema for. ``validate`` cannot check it
    and says so; the simulated cluster stores it (as one with its CRD installed would) and
    warns that nothing simulates it."""
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert "unknown kind Widget" in _validate(widget)[0].message
    assert _sim(widget) == []
