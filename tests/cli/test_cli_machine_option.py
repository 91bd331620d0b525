"""``--machine`` means the same to every command (``kgpu.hardware.open_backend``): ``plan``
refuses ``--clique`` for real GPUs and snapshots as ``agent`` does (it used to ignore it for
``nvml``), and names the option in a clique that does not parse."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.cli import app

runner = CliRunner()
SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "h100-nvml-snapshot.json"


@pytest.mark.parametrize("machine", ["nvml", str(SNAPSHOT)])
@pytest.mark.parametrize("command", ["plan", "agent"])
def test_clique_is_refused_for_real_gpus_and_snapshots(
    command: str, machine: str, tmp_path: Path
) -> None:
    args = [command, "--machine", machine, "--clique", "rack-a.0"]
    if command == "agent":
        args += ["--kubelet-root", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "--clique: applies to built-in profiles only" in result.output
    assert "Traceback" not in result.output


def test_a_bad_clique_names_the_option() -> None:
    result = runner.invoke(app, ["plan", "--machine", "gb200", "--clique", "bad"])
    assert result.exit_code == 1
    assert "--clique: must be <clusterUUID>.<cliqueId>" in result.output
