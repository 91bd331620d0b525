"""``kgpu validate --consumable-shares memory``: claims get the chart's memory-share admission
check, each problem naming file, document, field and the sizes to ask; exit 1."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kgpu.cli import app

runner = CliRunner()


def _claim(kind: str, name: str, memory: str) -> str:
    spec = (
        "devices: {requests: [{name: gpu, exactly: {deviceClassName: gpu.nvidia.com, "
        f"capacity: {{requests: {{memory: {memory}}}}}}}}}]}}"
    )
    body = f"spec: {{{spec}}}" if kind == "ResourceClaimTemplate" else spec
    return (
        f"apiVersion: resource.k8s.io/v1\nkind: {kind}\nmetadata: {{name: {name}}}\n"
        f"spec: {{{body}}}\n"
    )


def test_claims_off_the_share_grid_fail_with_field_errors(tmp_path: Path) -> None:
    path = tmp_path / "claims.yaml"
    path.write_text(
        _claim("ResourceClaim", "fine", "20Gi")
        + "---\n"
        + _claim("ResourceClaim", "tiny", "512Mi")
        + "---\n"
        + _claim("ResourceClaimTemplate", "odd", "1100Mi")
    )
    assert runner.invoke(app, ["validate", str(path)]).exit_code == 0  # shares off: fine
    result = runner.invoke(
        app,
        ["validate", "--consumable-shares", "memory", "--share-memory-step-mib", "512", str(path)],
    )
    assert result.exit_code == 1, result.output
    out = " ".join(result.output.split())
    assert (
        f"{path}: document 1: spec.devices.requests[0].exactly.capacity.requests.memory: "
        "request gpu: memory 512Mi is below the shared GPU minimum 1Gi" in out
    )
    assert (
        f"{path}: document 2: spec.spec.devices.requests[0].exactly.capacity.requests.memory: "
        "request gpu: memory 1100Mi is not on the shared GPU grid (1Gi, then steps of 512Mi; "
        "the scheduler would round it up): ask 1Gi or 1536Mi" in out
    )
    assert "document 0" not in out and "Traceback" not in out


def test_a_bad_share_mode_is_a_usage_error_naming_the_modes(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(_claim("ResourceClaim", "c", "1Gi"))
    result = runner.invoke(app, ["validate", "--consumable-shares", "memroy", str(path)])
    assert result.exit_code == 2
    assert "disabled, memory, unlimited" in " ".join(result.output.split())
    assert "Traceback" not in result.output
