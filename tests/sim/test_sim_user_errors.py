"""What ``kgpu sim`` says about scenario mistakes QA found: user text printed literally, missing
files named with the scenario, the field and the path they resolved to, label syntax, configs
listed under ``apply``, and a manifest given where the scenario belongs. Exit 1, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.cli import app, output

runner = CliRunner()


def _sim(*args: str) -> tuple[int, str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.console, "_width", 200)
        mp.setattr(output.err_console, "_width", 200)
        result = runner.invoke(app, ["sim", *args], env={"COLUMNS": "200"})
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_node_name_that_looks_like_markup_is_reported_literally(tmp_path: Path) -> None:
    path = _write(tmp_path, "s.yaml", 'nodes: [{name: "a[/x]", machine: t4}]\n')
    code, out = _sim(path)
    assert code == 1
    assert "s.yaml: nodes[0].name: 'a[/x]': a node name must be a lowercase DNS name" in out


def test_missing_apply_and_config_files_name_scenario_field_and_resolved_path(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path,
        "s.yaml",
        "nodes: [{name: a, machine: t4}]\nconfigs: [cfg/missing.yaml]\napply: [nothere.yaml]\n"
        "steps: [{apply: [later.yaml]}]\n",
    )
    code, out = _sim(path)
    assert code == 1
    assert f"s.yaml: apply[0]: cannot read {tmp_path / 'nothere.yaml'}: No such file" in out
    assert f"s.yaml: configs[0]: cannot read {tmp_path / 'cfg/missing.yaml'}: No such" in out
    assert f"s.yaml: steps[0].apply[0]: cannot read {tmp_path / 'later.yaml'}" in out


@pytest.mark.parametrize(
    ("labels", "shown"),
    [
        ('{"bad key!": v}', "'bad key!' is not a valid label key"),
        ("{nvidia.com/: v}", "'nvidia.com/' is not a valid label key"),
        ('{team: "has space"}', "'has space' is not a valid label value for team"),
        (f"{{team: {'x' * 64}}}", "is not a valid label value for team"),
    ],
)
def test_invalid_node_labels_are_rejected(tmp_path: Path, labels: str, shown: str) -> None:
    path = _write(tmp_path, "s.yaml", f"nodes: [{{name: a, machine: t4, labels: {labels}}}]\n")
    code, out = _sim(path)
    assert code == 1
    assert "s.yaml: nodes[0].labels: '" in out and shown in out


def test_invalid_label_in_a_label_step_is_rejected(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "s.yaml",
        "nodes: [{name: a, machine: t4}]\nsteps: [{label: {node: a, labels: {'x y': '1'}}}]\n",
    )
    code, out = _sim(path)
    assert code == 1
    assert "s.yaml: steps[0].label.labels: 'x y' is not a valid label key" in out


def test_valid_labels_still_work(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "s.yaml",
        "nodes: [{name: a, machine: t4, labels: {example.com/team: ml-1, tier: ''}}]\n",
    )
    code, out = _sim(path, "-o", "json")
    assert code == 0, out
    assert '"example.com/team": "ml-1"' in out


def test_device_plugin_config_under_apply_points_to_configs(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "sharing.yaml",
        "version: v1\nsharing:\n  timeSlicing:\n"
        "    resources: [{name: nvidia.com/gpu, replicas: 4}]\n",
    )
    path = _write(
        tmp_path,
        "s.yaml",
        "nodes: [{name: a, machine: t4}]\napply: [sharing.yaml, {version: v1, flags: {}}]\n",
    )
    code, out = _sim(path)
    assert code == 1
    assert (
        "s.yaml: apply[0]: sharing.yaml: this is a device-plugin config, not a Kubernetes "
        "object: list it under configs:, not apply:"
    ) in out
    assert "s.yaml: apply[1]: this is a device-plugin config" in out
    assert "Required value" not in out
    # where it belongs, it works
    path = _write(tmp_path, "s.yaml", "nodes: [{name: a, machine: t4}]\nconfigs: [sharing.yaml]\n")
    code, out = _sim(path, "-o", "json")
    assert code == 0, out
    assert '"nvidia.com/gpu": "4"' in out


def test_configmap_of_device_plugin_configs_is_fine_under_apply(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plugin-configs}\ndata:\n"
        "  any: |\n    version: v1\n    sharing:\n      timeSlicing:\n"
        "        resources: [{name: nvidia.com/gpu, replicas: 2}]\n",
    )
    path = _write(tmp_path, "s.yaml", "nodes: [{name: a, machine: t4}]\napply: [cm.yaml]\n")
    code, out = _sim(path, "-o", "json")
    assert code == 0, out


@pytest.mark.parametrize("documents", [1, 2])
def test_manifest_given_as_the_scenario_says_to_list_it_under_apply(
    tmp_path: Path, documents: int
) -> None:
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: gpu-pod}\nspec:\n  containers:\n"
        "  - {name: c, image: cuda, resources: {limits: {nvidia.com/gpu: 1}}}\n"
    )
    path = _write(tmp_path, "pod.yaml", "---\n".join([pod] * documents))
    code, out = _sim(path)
    assert code == 1
    assert "pod.yaml: this is a Kubernetes manifest (Pod gpu-pod" in out
    assert "under apply:" in out
    assert "  apply: [pod.yaml]" in out
    assert "unknown field" not in out


def test_xid_step_mig_ids_must_be_integers(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "s.yaml",
        "nodes: [{name: n, machine: a100-40gb}]\n"
        "steps: [{xid: {node: n, gpu: 0, xid: 94, gi: abc}}, {xid: {node: n, xid: 94, ci: 0}}]\n",
    )
    code, out = _sim(path)
    assert code == 1
    assert "s.yaml: steps[0].xid.gi: 'abc': must be a non-negative integer" in out
    assert "s.yaml: steps[1].xid.ci: a compute-instance id needs its GPU instance" in out
