"""``kgpu validate`` on what QA found it missed: user text printed literally, DRA objects the
API server or the GPU driver's webhook would refuse, and kgpu sim scenarios."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.cli import app, output

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.console, "_width", 200)
        mp.setattr(output.err_console, "_width", 200)
        result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_markup_like_names_are_printed_literally(tmp_path: Path) -> None:
    # rich reads "[/x]" as a closing tag: printing it as markup raised instead of reporting
    bad = _write(
        tmp_path,
        "cfg.yaml",
        'version: v1\nsharing: {timeSlicing: {resources: [{name: "gpu[/x]", replicas: 2}]}}\n',
    )
    code, out = _run("validate", bad)
    assert code == 1
    assert "sharing.timeSlicing.resources[0].name" in out
    assert "'nvidia.com/gpu[/x]'" in out
    good = _write(
        tmp_path,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '[bold]cfg'}\ndata: {}\n",
    )
    code, out = _run("validate", good)
    assert "[bold]cfg" in out


BAD_CEL = "device.driver ==== 'x'"
DRA_DOCS = {
    "DeviceClass": f"""\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: bad}}
spec:
  selectors:
  - cel: {{expression: "{BAD_CEL}"}}
""",
    "ResourceClaim": f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: c}}
spec:
  devices:
    requests:
    - name: g
      exactly:
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel: {{expression: "{BAD_CEL}"}}
""",
    "ResourceClaimTemplate": f"""\
apiVersion: resource.k8s.io/v1beta1
kind: ResourceClaimTemplate
metadata: {{name: t}}
spec:
  spec:
    devices:
      requests:
      - name: g
        deviceClassName: gpu.nvidia.com
        selectors:
        - cel: {{expression: "{BAD_CEL}"}}
""",
}
DRA_PATHS = {
    "DeviceClass": "spec.selectors[0].cel.expression",
    "ResourceClaim": "spec.devices.requests[0].exactly.selectors[0].cel.expression",
    "ResourceClaimTemplate": "spec.spec.devices.requests[0].selectors[0].cel.expression",
}


@pytest.mark.parametrize("kind", sorted(DRA_DOCS))
def test_cel_that_does_not_compile_is_an_error(tmp_path: Path, kind: str) -> None:
    path = _write(tmp_path, "dra.yaml", DRA_DOCS[kind])
    code, out = _run("validate", path)
    assert code == 1
    assert f"dra.yaml: document 0: {DRA_PATHS[kind]}: CEL does not compile" in out
    assert "ok " not in out


def test_gpu_config_with_unknown_time_slice_interval_is_an_error(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "claim.yaml",
        """\
apiVersion: v1
kind: ConfigMap
metadata: {name: unrelated}
data: {}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c}
spec:
  devices:
    requests:
    - name: g
      exactly: {deviceClassName: gpu.nvidia.com}
    config:
    - requests: [g]
      opaque:
        driver: gpu.nvidia.com
        parameters:
          apiVersion: resource.nvidia.com/v1beta1
          kind: GpuConfig
          sharing:
            strategy: TimeSlicing
            timeSlicingConfig: {interval: Forever}
""",
    )
    code, out = _run("validate", path)
    assert code == 1
    assert (
        "claim.yaml: document 1: spec.devices.config[0].opaque.parameters.sharing."
        "timeSlicingConfig.interval: unknown time-slice interval 'Forever'"
    ) in out
    assert "ResourceClaim c" not in out  # not reported ok as well


def test_valid_claim_is_still_ok(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "claim.yaml",
        DRA_DOCS["ResourceClaim"].replace(BAD_CEL, "device.driver == 'gpu.nvidia.com'"),
    )
    code, out = _run("validate", path)
    assert code == 0, out
    assert "ok " in out and "ResourceClaim" in out


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "examples").glob("*.yaml")))
def test_example_scenarios_validate(name: str) -> None:
    code, out = _run("validate", str(REPO / "examples" / name))
    assert code == 0, out
    assert "kgpu sim scenario" in out
    assert "not a Kubernetes manifest" not in out


def test_bad_scenario_is_reported_by_the_scenario_parser(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "cluster.yaml",
        "nodes: [{name: gpu, machine: no-such-gpu}]\nsteps: [{advance: soon}]\n",
    )
    code, out = _run("validate", path)
    assert code == 1
    assert "cluster.yaml: nodes[0].machine: unknown machine profile 'no-such-gpu'" in out
    assert "cluster.yaml: steps[0].advance: 'soon' is not a duration" in out


def test_a_name_the_api_server_refuses_is_reported(tmp_path: Path) -> None:
    bad = tmp_path / "pod.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: GPU_Test}\n"
        "spec: {containers: [{name: c, image: x}]}\n"
    )
    result = CliRunner().invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}: document 0: metadata.name: must be a DNS subdomain" in result.output
    assert "'GPU_Test'" in result.output and "Traceback" not in result.output
