"""``kgpu allocate FILE``: JSON contract, exit status, field-level input errors."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from kgpu.cli import app

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "dra" / "allocate-gb200.yaml"
runner = CliRunner()


def run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["allocate", *args])
    return result.exit_code, result.output


def test_example_allocates_as_documented() -> None:
    code, out = run(str(EXAMPLE), "-o", "json")
    assert code == 0
    answer = json.loads(out)
    assert answer["error"] is None
    first, second = answer["allocations"]
    # gpu-0 is held by another claim; two GPUs of one clique for the first claim
    assert [r["device"] for r in first["results"]] == ["gpu-1", "gpu-2"]
    assert {r["request"] for r in first["results"]} == {"gpus"}
    # no Hopper GPU: the second alternative of firstAvailable
    assert second["results"] == [
        {
            "request": "gpu/any-new-driver",
            "driver": "gpu.nvidia.com",
            "pool": "gb200-rack1-0",
            "device": "gpu-3",
        }
    ]
    assert first["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
        "gb200-rack1-0"
    ]
    code, table = run(str(EXAMPLE))
    assert code == 0 and "gpu-3" in table


def test_unsatisfiable_claims_give_null_allocations(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["claims"][0]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 4
    f = tmp_path / "in.json"
    f.write_text(json.dumps(data))
    code, out = run(str(f), "-o", "json")
    assert code == 2
    answer = json.loads(out)
    assert answer["allocations"] is None and answer["error"] is None
    # the scheduler's words first, then why, per claim and request
    assert answer["unsatisfiable"].startswith("cannot allocate all claims: claim default/")
    assert "request gpus: wants 4 devices of class gpu.nvidia.com" in answer["unsatisfiable"]


def test_allocation_errors_are_reported(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["claims"][0]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "tpu"
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump(data))
    code, out = run(str(f), "-o", "json")
    assert code == 3
    answer = json.loads(out)
    assert answer["allocations"] is None
    assert "could not retrieve device class tpu" in answer["error"]


def test_bad_input_names_the_field(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(
        yaml.safe_dump(
            {
                "node": {"labels": {}},
                "claims": [
                    {
                        "kind": "ResourceClaim",
                        "metadata": {"name": "c"},
                        "spec": {
                            "devices": {
                                "requests": [
                                    {
                                        "name": "g",
                                        "exactly": {
                                            "deviceClassName": "gpu.nvidia.com",
                                            "allocationMode": "Some",
                                        },
                                    }
                                ]
                            }
                        },
                    }
                ],
                "slices": {"not": "a list"},
                "extra": 1,
            }
        )
    )
    code, out = run(str(f))
    assert code == 1
    assert "Traceback" not in out
    assert "node.name" in out
    assert "claims[0].spec.devices.requests[0].exactly.allocationMode" in out
    assert "slices: must be a list of ResourceSlice objects" in out
    assert "extra: unknown key" in out
