"""``kgpu plan --consumable-shares``: the DRA driver's shared GPUs, per GPU, with their
capacities and request policy, in the table and in ``-o json`` (schema-checked); without the
option the plan is what it always was (issue 27)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from kgpu.cli import app, output

runner = CliRunner()


def run(args: list[str]) -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.console, "_width", 160)
        result = runner.invoke(app, args, env={"COLUMNS": "160"})
    return result


def plan_schema() -> Draft202012Validator:
    text = resources.files("kgpu.cli").joinpath("schemas/plan.schema.json").read_text()
    doc = json.loads(text)
    Draft202012Validator.check_schema(doc)
    return Draft202012Validator(doc)


def test_memory_shares_per_gpu_in_json_match_the_schema() -> None:
    result = run(
        ["plan", "-m", "dgx-h100", "--consumable-shares", "memory",
         "--share-memory-minimum-mib", "2048", "--share-memory-step-mib", "4096", "-o", "json"]
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert list(plan_schema().iter_errors(doc)) == []
    assert doc["consumableShares"] == {
        "mode": "memory", "memoryMinimumMiB": 2048, "memoryStepMiB": 4096, "enforced": True,
    }  # fmt: skip
    shared = [g["consumableShares"] for g in doc["gpus"]]
    assert len(shared) == 8
    # 81559 MiB on the grid 2048 + k * 4096: 79872 MiB = 78Gi
    assert shared[0] == {
        "device": "gpu-0",
        "policy": "memory shares (minimum 2048 MiB, step 4096 MiB)",
        "enforced": True,
        "capacity": {
            "computeShares": {"value": "100", "default": "0", "min": "0", "max": "100",
                              "step": "1"},
            "memory": {"value": "78Gi", "default": "78Gi", "min": "2Gi", "max": "78Gi",
                       "step": "4Gi"},
        },
    }  # fmt: skip
    devices = doc["resourceSlices"][0]["spec"]["devices"]  # --dra is implied
    assert all(d["allowMultipleAllocations"] for d in devices)
    # the schema is no formality
    bad = json.loads(result.stdout)
    bad["gpus"][0]["consumableShares"]["capacity"]["memory"]["value"] = 78
    bad["consumableShares"]["enforced"] = "yes"
    assert len(list(plan_schema().iter_errors(bad))) == 2


def test_the_table_shows_each_shared_gpu_and_the_release_gate() -> None:
    result = run(["plan", "-m", "dgx-h100", "--dra", "--consumable-shares", "memory"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    flat = " ".join(text.split())  # titles and notes wrap
    assert "Consumable shares: memory shares (minimum 1024 MiB, step 1024 MiB), enforced" in flat
    rows = [line for line in text.splitlines() if "gpu-3" in line]
    assert any("memory" in r and "79Gi" in r and "1Gi" in r for r in rows), rows
    assert any("computeShares" in r and "100" in r for r in rows), rows
    assert "on by default from Kubernetes 1.36" in flat
    unenforced = run(["plan", "-m", "dgx-h100", "--consumable-shares", "4"]).stdout
    assert "4 shares per GPU, time-sliced, not enforced" in " ".join(unenforced.split())


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_without_shares_the_plan_is_unchanged(fmt: str) -> None:
    plain = run(["plan", "-m", "dgx-h100", "--dra", "-o", fmt])
    disabled = run(
        ["plan", "-m", "dgx-h100", "--dra", "--consumable-shares", "disabled", "-o", fmt]
    )
    assert plain.exit_code == disabled.exit_code == 0
    assert plain.stdout == disabled.stdout
    assert "onsumable" not in plain.stdout and "allowMultipleAllocations" not in plain.stdout


def test_a_bad_mode_is_one_error_naming_the_flag() -> None:
    result = run(["plan", "-m", "dgx-h100", "--consumable-shares", "half",
                  "--share-memory-step-mib", "0"])  # fmt: skip
    assert result.exit_code != 0
    assert "--consumable-shares: 'half' is not a consumable-shares mode" in result.output
    assert "--consumable-shares.memoryStepMiB" in result.output
    assert "Traceback" not in result.output
