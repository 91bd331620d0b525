"""``kgpu machines``: what a user sees before choosing --machine."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.hardware.profiles import profile_names

runner = CliRunner()
SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "h100-nvml-snapshot.json"


def test_json_lists_every_profile() -> None:
    result = runner.invoke(app, ["machines", "-o", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["name"] for r in rows] == profile_names()
    p4de = next(r for r in rows if r["name"] == "p4de.24xlarge")
    assert (p4de["gpus"], p4de["product"], p4de["interconnect"]) == (
        8,
        "NVIDIA A100-SXM4-80GB",
        "NVSwitch",
    )


def test_table_names_profiles_and_products() -> None:
    result = runner.invoke(app, ["machines"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for text in ("dgx-h100", "NVIDIA H100 80GB HBM3", "Tesla T4", "rtx-2080ti"):
        assert text in result.stdout


def test_one_machine_shows_gpus_and_mig_profiles() -> None:
    result = runner.invoke(app, ["machines", "a100-40gb", "--hostname", "n1", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["hostname"] == "n1" and len(data["gpus"]) == 1
    names = [p["name"] for p in data["migGeometry"]["NVIDIA A100-SXM4-40GB"]["profiles"]]
    assert names[0] == "1g.5gb" and "7g.40gb" in names
    table = runner.invoke(app, ["machines", str(SNAPSHOT)], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "7g.80gb" in table.stdout and "H100" in table.stdout


def test_unknown_machine_is_a_clean_error() -> None:
    result = runner.invoke(app, ["machines", "rtx-9090"])
    assert result.exit_code == 1
    assert "unknown machine profile 'rtx-9090'" in result.output
    assert "Traceback" not in result.output
    bad = runner.invoke(app, ["machines", "-o", "xml"])
    assert bad.exit_code == 1 and "allowed: table, wide, json, yaml" in bad.output


def test_save_records_a_snapshot_that_reproduces_the_machine(tmp_path: Path) -> None:
    """``kgpu machines nvml --save FILE`` on a GPU node; here a recorded real node stands in."""
    saved = tmp_path / "node.json"
    result = runner.invoke(app, ["machines", str(SNAPSHOT), "--save", str(saved), "-o", "json"])
    assert result.exit_code == 0, result.output
    again = runner.invoke(app, ["machines", str(saved), "-o", "json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == json.loads(result.stdout)


def test_save_refuses_cleanly(tmp_path: Path) -> None:
    result = runner.invoke(app, ["machines", "--save", str(tmp_path / "x.json")])
    assert result.exit_code != 0 and "--save needs a MACHINE" in result.output
    bad = tmp_path / "no-such-dir" / "x.json"
    result = runner.invoke(app, ["machines", "dgx-h100", "--save", str(bad)])
    assert result.exit_code != 0 and f"--save {bad}: cannot write the snapshot" in result.output
    assert "Traceback" not in result.output
