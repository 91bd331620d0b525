"""``kgpu allocate FILE``: JSON contract, exit status, field-level input errors."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.dra.versions import convert

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


def test_feature_gates_from_flag_and_file(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump(data))
    v136 = ("--kubernetes-version", "1.36")  # DRAPrioritizedList is GA but not yet locked
    # the example's second claim uses firstAvailable: with the gate off it is an error (exit 3)
    code, out = run(str(f), "-o", "json", *v136, "--feature-gates", "DRAPrioritizedList=false")
    assert code == 3
    assert "has subrequests, but the DRAPrioritizedList feature is disabled" in out
    data["featureGates"] = {"DRAPrioritizedList": False}
    f.write_text(yaml.safe_dump(data))
    assert run(str(f), "-o", "json", *v136)[0] == 3
    # the flag wins over the file
    assert run(str(f), "-o", "json", *v136, "--feature-gates", "DRAPrioritizedList=true")[0] == 0
    # 1.37 (the default) locks it on, as kube-scheduler does
    code, out = run(str(f), "-o", "json")
    assert code == 1
    assert "featureGates: DRAPrioritizedList: cannot set it to false in Kubernetes 1.37" in out
    code, out = run(str(f), *v136, "--feature-gates", "DRAPrioritised=false")
    assert code == 1 and "unknown feature gate 'DRAPrioritised'" in out
    data["featureGates"] = {"DRAPrioritizedList": "no"}
    f.write_text(yaml.safe_dump(data))
    code, out = run(str(f))
    assert (
        code == 1 and "featureGates.DRAPrioritizedList: DRAPrioritizedList: must be true or" in out
    )


def _first_devices(out: str) -> list[str]:
    return [r["device"] for r in json.loads(out)["allocations"][0]["results"]]


def test_kubernetes_version_picks_the_release_defaults(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    rule = {
        "apiVersion": "resource.k8s.io/v1",  # DeviceTaintRule is GA (v1) in 1.37
        "kind": "DeviceTaintRule",
        "metadata": {"name": "gpu-1-maintenance"},
        "spec": {
            "deviceSelector": {
                "driver": "gpu.nvidia.com",
                "pool": "gb200-rack1-0",
                "device": "gpu-1",
            },
            "taint": {"key": "maintenance", "value": "true", "effect": "NoSchedule"},
        },
    }
    data["deviceTaintRules"] = [rule]
    data["claims"] = data["claims"][:1]  # 2 GPUs of gpu-1..3 (gpu-0 is in use)
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump(data))
    # 1.37 (the default): DRADeviceTaintRules is GA and on, gpu-1 is avoided
    code, out = run(str(f), "-o", "json")
    assert code == 0 and _first_devices(out) == ["gpu-2", "gpu-3"]
    # 1.36: beta but off (its API version is off by default): the rule counts for nothing
    code, out = run(str(f), "-o", "json", "--kubernetes-version", "v1.36.2")
    assert code == 0 and _first_devices(out) == ["gpu-1", "gpu-2"]
    code, out = run(
        str(f),
        "-o",
        "json",
        "--kubernetes-version",
        "1.36",
        "--feature-gates",
        "DRADeviceTaintRules=true",
    )
    assert code == 0 and "gpu-1" not in _first_devices(out)
    code, out = run(
        str(f), "--kubernetes-version", "1.34", "--feature-gates", "DRADeviceTaintRules=true"
    )
    assert code == 1 and "1.34 has no such feature gate (it exists from 1.35)" in out
    code, out = run(str(f), "--kubernetes-version", "1.31")
    assert code == 1 and "--kubernetes-version" in out and "supports 1.34-1.37" in out


def test_objects_in_older_versions_are_read_in_their_own_shape(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    for key in ("slices", "classes", "claims", "allocated"):
        data[key] = [convert(obj, "v1beta1") for obj in data[key]]
    f = tmp_path / "in.yaml"
    f.write_text(yaml.safe_dump(data))
    code, out = run(str(f), "-o", "json")
    assert code == 0
    first, second = json.loads(out)["allocations"]
    assert [r["device"] for r in first["results"]] == ["gpu-1", "gpu-2"]
    assert second["results"][0]["request"] == "gpu/any-new-driver"
    # problems are reported at v1beta1 paths
    data["claims"][0]["spec"]["devices"]["requests"][0]["count"] = 0
    f.write_text(yaml.safe_dump(data))
    code, out = run(str(f))
    assert code == 1 and "claims[0].spec.devices.requests[0].count: must be at least 1" in out
