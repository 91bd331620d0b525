"""``kgpu plan`` and ``kgpu validate`` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kgpu.cli import app

runner = CliRunner()


def _plan(*args: str) -> dict:  # type: ignore[type-arg]
    result = runner.invoke(app, ["plan", *args, "-o", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_plan_json_for_the_2080ti_guide(acceptance: Path) -> None:
    out = _plan(
        "--machine", "rtx-2080ti",
        "--config", str(acceptance / "seed-guides/time-slicing-config-2080ti.yaml"),
        "--config-name", "2080ti-12gb",
    )  # fmt: skip
    assert set(out) == {
        "capacity",
        "allocatable",
        "resources",
        "labels",
        "devices",
        "warnings",
        "gpus",
    }
    assert out["resources"] == {"nvidia.com/gpu": 6}
    assert out["labels"]["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-2080-Ti-SHARED"
    assert set(out["devices"][0]) == {
        "id", "resource", "gpu", "gpuUUID", "migUUID", "migProfile", "replica", "sharing",
        "healthy",
    }  # fmt: skip
    assert [d["replica"] for d in out["devices"]] == list(range(6))
    assert out["gpus"][0]["sharing"] == "time-slicing" and out["gpus"][0]["replicas"] == 6


def test_plan_p4de_from_helm_values_and_label(acceptance: Path) -> None:
    """Row 7: the GPUs of a p4de are not partitioned yet; the plan says what the MIG manager
    would do and what the node advertises after it, without pretending it already does."""
    args = (
        "--machine", "p4de.24xlarge",
        "--config", str(acceptance / "seed-guides/gpu-operator-values.yaml"),
        "--label", "nvidia.com/mig.config=p4de-half-balanced",
    )  # fmt: skip
    out = _plan(*args)
    assert out["resources"] == {"nvidia.com/gpu": 8}
    assert "p4de-half-balanced" in out["migPending"]
    assert "nvidia.com/mig.config.state" not in out["labels"]
    manager = out["migManager"]
    assert manager["config"] == "p4de-half-balanced"
    assert [(row["gpu"], row["from"]) for row in manager["plan"]] == [
        (gpu, "MIG disabled") for gpu in range(4)
    ]
    assert {row["to"] for row in manager["plan"]} == {"2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb"}
    assert [s["description"] for s in manager["plan"][0]["steps"]] == [
        "enable MIG mode",
        "create 3g.40gb at memory slice 4",
        "create 2g.20gb at memory slice 0",
        "create 1g.10gb at memory slice 2",
        "create 1g.10gb at memory slice 3",
    ]
    assert manager["unchanged"] == [4, 5, 6, 7]
    assert manager["labels"] == {"nvidia.com/mig.config.state": "success"}
    after = manager["after"]
    assert after["resources"] == {
        "nvidia.com/gpu": 4,
        "nvidia.com/mig-1g.10gb": 8,
        "nvidia.com/mig-2g.20gb": 4,
        "nvidia.com/mig-3g.40gb": 4,
    }
    assert "migPending" not in after
    mig = [d for d in after["devices"] if d["migProfile"] == "2g.20gb"]
    assert len(mig) == 4 and all(d["migUUID"] == d["id"] for d in mig)
    table = runner.invoke(app, ["plan", *args], env={"COLUMNS": "120"}).stdout
    assert "Resources now, before the MIG manager" in table
    assert "MIG manager plan: p4de-half-balanced (the GPUs do not have it yet)" in table
    assert "Resources after the MIG manager applies p4de-half-balanced" in table


def test_plan_multiple_sharing_by_label(acceptance: Path) -> None:
    cfg = str(acceptance / "vks-samples/multiple-gpu-sharing.yaml")
    ti = _plan("-m", "rtx-2080ti", "-c", cfg, "-l", "nvidia.com/device-plugin.config=rtx-2080ti")
    ada = _plan("-m", "rtx-4090", "-c", cfg, "-l", "nvidia.com/device-plugin.config=rtx-4090")
    assert ti["resources"] == {"nvidia.com/gpu": 4}
    assert ada["resources"] == {"nvidia.com/gpu": 8}
    assert ada["gpus"][0]["mps"]["activeThreadPercentage"] == 12


def test_plan_table_mentions_each_gpu_and_warnings(acceptance: Path) -> None:
    result = runner.invoke(
        app,
        [
            "plan",
            "-m",
            "a100-40gb",
            "-c",
            str(acceptance / "seed-guides/time-slicing-config-t4-a100.yaml"),
            "--config-name",
            "a100-40gb",
            "--mig-config",
            "all-balanced",
            "--mig-strategy",
            "mixed",
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "nvidia.com/mig-1g.5gb" in result.stdout
    assert "2 x 1g.5gb (time-slicing x2)" in result.stdout
    assert "1 x 3g.20gb (time-slicing x3)" in result.stdout
    assert "warning:" in result.stdout


def test_plan_errors_are_one_line_per_problem_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 1}]}}\n")
    result = runner.invoke(app, ["plan", "-m", "t4", "-c", str(bad)])
    assert result.exit_code == 1
    assert "sharing.timeSlicing.resources[0].replicas: must be >= 2" in result.output
    assert "Traceback" not in result.output
    unknown = runner.invoke(app, ["plan", "-m", "no-such-machine"])
    assert unknown.exit_code == 1 and "Traceback" not in unknown.output


def test_plan_dra_slices(acceptance: Path) -> None:
    out = _plan("-m", "gb200", "--clique", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0.3", "--dra")
    assert out["labels"]["nvidia.com/gpu.clique"] == "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0.3"
    slices = out["resourceSlices"]
    assert slices and sum(len(s["spec"].get("devices", [])) for s in slices) >= 4


def test_validate_accepts_every_acceptance_file(acceptance: Path) -> None:
    files = [str(p) for p in sorted(acceptance.rglob("*.yaml"))]
    result = runner.invoke(app, ["validate", *files])
    assert result.exit_code == 0, result.output
    assert result.stdout.count("ok ") >= len(files)


def test_validate_reports_field_errors_with_document_index(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\nspec:\n"
        "  containers: [{name: a, image: b}]\n"
        "---\n"
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n"
        "  replicas: two\n  selector: {matchLabels: {a: b}}\n"
        "  template: {metadata: {labels: {a: b}}, spec: {containers: [{name: a, image: b}]}}\n"
        "---\n"
        "apiVersion: resource.nvidia.com/v1beta1\nkind: ComputeDomain\nmetadata: {name: cd}\n"
        "spec: {numNodes: -1, channel: {resourceClaimTemplate: {name: x}}}\n"
        "---\n"
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n"
    )
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}: document 1: spec.replicas:" in result.output
    # numNodes is optional (deprecated upstream), but never negative
    assert f"{bad}: document 2: spec.numNodes: must be zero or greater" in result.output
    assert f"{bad}: document 3: kind: unknown kind Widget" in result.output
    assert "document 0" not in result.output.replace("ok", "")


def test_validate_checks_configs_inside_configmaps(tmp_path: Path) -> None:
    bad = tmp_path / "cm.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n"
        "  any: |\n    version: v1\n    sharing:\n      mps:\n        resources:\n"
        "        - {name: nvidia.com/gpu, replicas: 1}\n"
    )
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}: any: sharing.mps.resources[0].replicas: must be >= 2" in result.output


def test_validate_reports_every_schema_error_in_a_document(tmp_path: Path) -> None:
    bad = tmp_path / "two.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        "  restartPolicy: 7\n"
        "  containers: [{name: a, image: b, bogus: 1}]\n"
    )
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert "document 0: spec.restartPolicy:" in result.output
    assert "document 0: spec.containers[0]:" in result.output and "bogus" in result.output
