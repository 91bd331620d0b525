"""``kgpu validate`` on ComputeDomains: the same parser as the controller and ``kgpu sim``."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kgpu.cli import app

runner = CliRunner()

GOOD = (
    "apiVersion: resource.nvidia.com/v1beta1\nkind: ComputeDomain\nmetadata: {name: good}\n"
    "spec: {numNodes: 2, channel: {resourceClaimTemplate: {name: good-channel}}}\n"
)


def test_validate_reports_compute_domain_errors_the_controller_would_meet(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "cd.yaml"
    bad.write_text(
        GOOD + "---\n"
        "apiVersion: resource.nvidia.com/v1beta1\nkind: ComputeDomain\n"
        "metadata: {name: Train_4}\n"
        "spec: {numNodes: 4, channel: {resourceClaimTemplate: {name: Train_Channel}}}\n"
    )
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}: document 1: metadata.name: must be a DNS subdomain" in result.output
    assert (
        f"{bad}: document 1: spec.channel.resourceClaimTemplate.name: must be a DNS subdomain"
        in result.output
    )
    assert "document 0" not in result.output  # the good domain has nothing to report
    assert "Traceback" not in result.output


def test_validate_reports_each_compute_domain_problem_once(tmp_path: Path) -> None:
    bad = tmp_path / "cd.yaml"
    bad.write_text(
        "apiVersion: resource.nvidia.com/v1beta1\nkind: ComputeDomain\nmetadata: {name: cd}\n"
        "spec: {numNodes: -1, channel: {resourceClaimTemplate: {name: x}}}\n"
    )
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert result.output.count("spec.numNodes") == 1


def test_validate_accepts_a_good_compute_domain(tmp_path: Path) -> None:
    good = tmp_path / "cd.yaml"
    good.write_text(GOOD)
    result = runner.invoke(app, ["validate", str(good)])
    assert result.exit_code == 0, result.output
    assert "document 0: ComputeDomain good" in result.stdout
