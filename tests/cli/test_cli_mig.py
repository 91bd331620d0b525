"""``kgpu mig apply``: the MIG manager alone, on simulated machines and on NVML (a fake one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kgpu.hardware
from kgpu.cli import app, output
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.testing.fake_nvml import FakeNvml

runner = CliRunner()
CONFIG = """\
version: v1
mig-configs:
  halves:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  broken:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"7g.80gb": 2}
"""


def run(*args: str) -> tuple[int, str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.console, "_width", 160)
        mp.setattr(output.err_console, "_width", 160)
        result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.fixture
def mig_file(tmp_path: Path) -> str:
    path = tmp_path / "mig.yaml"
    path.write_text(CONFIG)
    return str(path)


def test_dry_run_prints_the_plan_per_gpu_as_json(mig_file: str) -> None:
    code, out = run(
        "mig", "apply", "-m", "a100-80gb", "-f", mig_file, "-s", "halves", "--dry-run", "-o", "json"
    )
    assert code == 0, out
    data = json.loads(out)
    assert data["dryRun"] and "state" not in data
    [gpu] = data["plan"]
    assert (gpu["from"], gpu["to"]) == ("MIG disabled", "2 x 3g.40gb")
    assert [s["description"] for s in gpu["steps"]] == [
        "enable MIG mode",
        "create 3g.40gb at memory slice 0",
        "create 3g.40gb at memory slice 4",
    ]


def test_apply_on_a_simulated_machine_shows_the_result(mig_file: str) -> None:
    code, out = run("mig", "apply", "-m", "a100-80gb", "-f", mig_file, "-s", "halves")
    assert code == 0, out
    assert "Result: success" in out and "GPU 0 now: 3g.40gb, 3g.40gb" in out
    assert "the change lives only in this command" in out


def test_the_acceptance_values_select_their_default(acceptance: Path) -> None:
    values = acceptance / "seed-guides" / "gpu-operator-values.yaml"
    code, out = run("mig", "apply", "-m", "p4de.24xlarge", "-f", str(values), "-o", "json")
    assert code == 0, out
    data = json.loads(out)
    # migManager.config.default is all-disabled, which a fresh p4de already is
    assert data["config"] == "all-disabled" and data["plan"] == [] and data["state"] == "success"


def test_nvml_needs_yes_before_anything_is_opened(
    mig_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    monkeypatch.setattr(kgpu.hardware, "open_backend", lambda spec, **_: opened.append(spec))
    code, out = run("mig", "apply", "-m", "nvml", "-f", mig_file, "-s", "halves")
    assert code == 1 and "add --yes" in out and opened == []


def test_nvml_with_yes_applies_through_nvml(mig_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sim = SimulatedBackend(load_machine("a100-80gb"))
    fake = FakeNvml(sim)
    monkeypatch.setattr(kgpu.hardware, "open_backend", lambda spec, **_: NvmlBackend(fake))
    code, out = run("mig", "apply", "-m", "nvml", "-f", mig_file, "-s", "halves", "--yes")
    assert code == 0, out
    assert "nvmlDeviceCreateGpuInstanceWithPlacement" in fake.calls
    assert [m.profile for m in sim.snapshot().gpus[0].mig_devices] == ["3g.40gb", "3g.40gb"]
    assert "lives only in this command" not in out


def test_a_busy_gpu_fails_with_exit_1_and_says_why(
    mig_file: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = SimulatedBackend(load_machine("a100-80gb"))
    sim.set_processes(0, [4711])
    monkeypatch.setattr(kgpu.hardware, "open_backend", lambda spec, **_: sim)
    code, out = run("mig", "apply", "-m", "a100-80gb", "-f", mig_file, "-s", "halves")
    assert code == 1
    assert "PID 4711" in out and "failed" in out
    assert sim.machine.gpus[0].mig_devices == ()


def test_bad_input_names_the_file_and_the_fix(mig_file: str) -> None:
    code, out = run("mig", "apply", "-m", "a100-80gb", "-f", mig_file, "-s", "broken")
    assert code == 1
    assert "mig.yaml: mig-configs.broken: cannot apply mig config 'broken': GPU 0: 7g.80gb x 2" in (
        out.replace("\n", " ")
    )
    code, out = run("mig", "apply", "-m", "a100-80gb", "-f", mig_file, "-s", "nope")
    assert code == 1 and "names no mig-parted config" in out
    code, out = run("mig", "apply", "-m", "a100-80gb", "-f", mig_file)
    assert code == 1 and "name one with --selected-config" in out
    code, out = run("mig", "apply", "-m", "no-such-machine", "-f", mig_file, "-s", "halves")
    assert code == 1 and "no-such-machine" in out
