"""Mistakes a new user makes, and what kgpu says back: the file, the entry, the field and the fix,
exit status 1, never a traceback. Also: tables that stay readable at 80 columns."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from kgpu.cli import app, output

REPO = Path(__file__).resolve().parents[2]
ALLOCATE_EXAMPLE = REPO / "examples" / "dra" / "allocate-gb200.yaml"
runner = CliRunner()


def _run(*args: str, columns: int = 200) -> tuple[int, str]:
    """Run kgpu as a terminal of ``columns`` columns would. (The rich consoles are created once
    per process and keep the width they first saw, so the width is set on them directly.)"""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.console, "_width", columns)
        mp.setattr(output.err_console, "_width", columns)
        result = runner.invoke(app, list(args), env={"COLUMNS": str(columns)})
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# -- kgpu allocate: malformed objects never reach the allocator -----------------------------


def _request(d: dict[str, Any]) -> dict[str, Any]:
    return d["claims"][0]["spec"]["devices"]["requests"][0]  # type: ignore[no-any-return]


BAD_ALLOCATE_INPUTS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "slice devices not a list": (
        lambda d: d["slices"][0]["spec"].__setitem__("devices", "gpu-0"),
        "slices[0].spec.devices: must be a list of devices",
    ),
    "slice pool not a mapping": (
        lambda d: d["slices"][0]["spec"].__setitem__("pool", "p"),
        "slices[0].spec.pool: must be a mapping",
    ),
    "slice attribute without a type": (
        lambda d: d["slices"][0]["spec"]["devices"][0]["attributes"].__setitem__("index", 5),
        "slices[0].spec.devices[0].attributes.index: must be a mapping such as {int: 1}",
    ),
    "claim devices a list": (
        lambda d: d["claims"][0]["spec"].__setitem__("devices", [1]),
        "claims[0].spec.devices: must be a mapping with requests",
    ),
    "exactly a string": (
        lambda d: _request(d).__setitem__("exactly", "x"),
        "claims[0].spec.devices.requests[0].exactly: must be a mapping",
    ),
    "selectors a string": (
        lambda d: _request(d)["exactly"].__setitem__("selectors", "x"),
        "claims[0].spec.devices.requests[0].exactly.selectors: must be a list",
    ),
    "firstAvailable a string": (
        lambda d: (_request(d).pop("exactly"), _request(d).__setitem__("firstAvailable", "x")),
        "claims[0].spec.devices.requests[0].firstAvailable: must be a list of subrequests",
    ),
    "count as a string": (
        lambda d: _request(d)["exactly"].__setitem__("count", "2"),
        "claims[0].spec.devices.requests[0].exactly.count: must be an integer",
    ),
    "count below one": (
        lambda d: _request(d)["exactly"].__setitem__("count", -1),
        "claims[0].spec.devices.requests[0].exactly.count: must be at least 1",
    ),
    "CEL that does not parse": (
        lambda d: _request(d)["exactly"].__setitem__(
            "selectors", [{"cel": {"expression": "device.attributes[ ==="}}]
        ),
        "claims[0].spec.devices.requests[0].exactly.selectors[0].cel.expression: "
        "CEL does not compile",
    ),
    "GPU driver parameters the driver refuses": (
        lambda d: d["claims"][0]["spec"]["devices"].__setitem__(
            "config",
            [
                {
                    "opaque": {
                        "driver": "gpu.nvidia.com",
                        "parameters": {
                            "apiVersion": "resource.nvidia.com/v1beta1",
                            "kind": "GpuConfig",
                            "sharing": {
                                "strategy": "TimeSlicing",
                                "timeSlicingConfig": {"interval": "Forever"},
                            },
                        },
                    }
                }
            ],
        ),
        "claims[0].spec.devices.config[0].opaque.parameters.sharing.timeSlicingConfig.interval: "
        "unknown time-slice interval 'Forever'",
    ),
    "allocated claim with a bad status": (
        lambda d: d.__setitem__(
            "allocated", [{"metadata": {"name": "x"}, "spec": {}, "status": {"allocation": "x"}}]
        ),
        "allocated[0].status.allocation: must be a mapping",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ALLOCATE_INPUTS))
def test_allocate_rejects_malformed_objects_by_field(tmp_path: Path, case: str) -> None:
    mutate, expected = BAD_ALLOCATE_INPUTS[case]
    data = yaml.safe_load(ALLOCATE_EXAMPLE.read_text())
    mutate(data)
    path = _write(tmp_path, "in.yaml", yaml.safe_dump(data))
    code, out = _run("allocate", path, "-o", "json")
    assert code == 1, out
    assert f"{path}: {expected}" in out


def test_allocate_explains_a_single_manifest(tmp_path: Path) -> None:
    claim = yaml.safe_load(ALLOCATE_EXAMPLE.read_text())["claims"][0]
    path = _write(tmp_path, "claim.yaml", yaml.safe_dump(copy.deepcopy(claim)))
    code, out = _run("allocate", path)
    assert code == 1
    assert "single ResourceClaim manifest" in out and "node, classes, slices" in out


def test_allocate_points_a_scenario_to_sim() -> None:
    code, out = _run("allocate", str(REPO / "examples" / "mps-job.yaml"))
    assert code == 1
    assert "this is a kgpu sim scenario (nodes/apply/steps): run it with kgpu sim FILE" in out
    assert "unknown key" not in out


def test_allocate_yaml_error_is_one_line_with_position(tmp_path: Path) -> None:
    path = _write(tmp_path, "bad.yaml", "node: [\n  : x\n")
    code, out = _run("allocate", path)
    assert code == 1
    assert f"{path}: line 2, column 3: not valid YAML" in out
    assert "<unicode string>" not in out


def test_allocate_table_at_80_columns_cuts_nothing() -> None:
    code, out = _run("allocate", str(ALLOCATE_EXAMPLE), columns=80)
    assert code == 0
    assert "…" not in out
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "default/inference-gpus: metadata.name In gb200-rack1-0" in out


# -- configs: kgpu plan and kgpu validate ----------------------------------------------------

TWO_ENTRIES = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: sharing}
data:
  small: |
    sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}
  big: |
    sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}
  broken: |
    sharing: [
"""


def test_plan_with_several_entries_and_no_selection_names_file_and_flag(tmp_path: Path) -> None:
    good = TWO_ENTRIES.replace("replicas: 1", "replicas: 4").replace(
        "  broken: |\n    sharing: [\n", ""
    )
    path = _write(tmp_path, "cm.yaml", good)
    code, out = _run("plan", "-m", "t4", "-c", path)
    assert code == 1
    assert f"{path}: 2 device-plugin configs and none selected" in out
    assert "--config-name" in out and "choices: big, small" in out
    code, out = _run("plan", "-m", "t4", "-c", path, "--config-name", "big", "-o", "json")
    assert code == 0 and json.loads(out)["resources"] == {"nvidia.com/gpu": 4}


def test_validate_reports_every_bad_configmap_entry(tmp_path: Path) -> None:
    path = _write(tmp_path, "cm.yaml", TWO_ENTRIES)
    code, out = _run("validate", path)
    assert code == 1
    assert f"{path}: big: sharing.timeSlicing.resources[0].replicas: must be >= 2" in out
    assert f"{path}: broken: line 2, column 1: not valid YAML" in out


def test_misspelt_field_suggests_the_right_one(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "ts.yaml", "sharing: {timeSlicing: {resources: [{name: gpu, replica: 4}]}}\n"
    )
    code, out = _run("plan", "-m", "t4", "-c", path)
    assert code == 1
    assert (
        "sharing.timeSlicing.resources[0].replicas: is required "
        "(found 'replica': did you mean 'replicas'?)"
    ) in out


def test_binary_file_is_one_line_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "blob.yaml", "\x00\x01binary")
    for command in (["plan", "-m", "t4", "-c", path], ["validate", path]):
        code, out = _run(*command)
        assert code == 1
        assert f"{path}: position 0: not valid YAML" in out and "binary" in out
        assert "<unicode string>" not in out


def test_empty_config_file_is_a_visible_warning(tmp_path: Path) -> None:
    path = _write(tmp_path, "empty.yaml", "")
    code, out = _run("plan", "-m", "t4", "-c", path)
    assert code == 0
    assert f"warning: {path}: empty file: nothing loaded from it" in out


def test_unknown_machine_names_the_flag() -> None:
    code, out = _run("plan", "-m", "rtx-9090")
    assert code == 1
    assert "--machine: unknown machine profile 'rtx-9090'; known profiles:" in out


def test_validate_flags_mig_names_no_gpu_has(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "mig.yaml",
        "version: v1\nmig-configs:\n  c:\n    - devices: all\n      device-filter: '0x1234'\n"
        "      mig-enabled: true\n      mig-devices: {5g.50gb: 1}\n",
    )
    code, out = _run("validate", path)
    assert code == 0  # upstream accepts the file; the hardware refuses it later
    assert "mig-configs.c[0].mig-devices.5g.50gb: profile 5g.50gb is offered by no" in out
    assert "mig-configs.c[0].device-filter: '0x1234' is not a PCI device id" in out


def test_gpu_operator_default_mig_config_validates_without_warnings() -> None:
    upstream = REPO / "src" / "kgpu" / "config" / "data" / "default-mig-parted-config.yaml"
    code, out = _run("validate", str(upstream))
    assert code == 0 and "warning" not in out


def test_mig_config_that_selects_no_gpu_is_a_visible_warning() -> None:
    code, out = _run("plan", "-m", "t4", "--mig-config", "all-balanced")
    assert code == 0
    assert "mig-configs.all-balanced: mig config 'all-balanced' selects no GPU" in out


POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  containers:
  - name: c
    image: i
    resources: {resources}
"""


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ("{limits: {nvidia.com/gpu: two}}", "limits.nvidia.com/gpu: 'two' is not a quantity"),
        ("{limits: {nvidia.com/gpu: 0.5}}", "limits.nvidia.com/gpu: 0.5: must be a whole number"),
        ("{requests: {nvidia.com/gpu: 1}}", "limits.nvidia.com/gpu: is required"),
        (
            "{requests: {nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 2}}",
            "requests.nvidia.com/gpu: must be equal to the nvidia.com/gpu limit of 2",
        ),
    ],
)
def test_validate_checks_gpu_requests_as_the_api_server_does(
    tmp_path: Path, resources: str, expected: str
) -> None:
    path = _write(tmp_path, "pod.yaml", POD.format(resources=resources))
    code, out = _run("validate", path)
    assert code == 1
    assert f"{path}: document 0: spec.containers[0].resources.{expected}" in out


def test_validate_gpu_requests_inside_a_deployment(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n"
        "  selector: {matchLabels: {a: b}}\n  template:\n    metadata: {labels: {a: b}}\n"
        "    spec:\n      containers:\n      - name: c\n        image: i\n"
        "        resources: {limits: {nvidia.com/gpu: 1.5}}\n",
    )
    code, out = _run("validate", path)
    assert code == 1
    assert "spec.template.spec.containers[0].resources.limits.nvidia.com/gpu" in out


def test_scenario_given_to_plan_points_to_sim_and_validate_checks_it() -> None:
    scenario = str(REPO / "examples" / "mps-job.yaml")
    code, out = _run("plan", "-c", scenario)
    assert code == 1
    assert "kgpu sim scenario" in out and "kgpu sim FILE" in out
    code, out = _run("validate", scenario)
    assert code == 0
    assert "kgpu sim scenario mps-job" in out


# -- tables at 80 and 150 columns ------------------------------------------------------------


def test_machines_table_at_80_columns_shows_every_name_whole() -> None:
    code, out = _run("machines", columns=80)
    assert code == 0
    assert "…" not in out and all(len(line) <= 80 for line in out.splitlines())
    for name in ("p4de.24xlarge", "rtx-2080ti", "dgx-h100", "a100-40gb"):
        assert f"│ {name} " in out


def test_machine_gpus_table_keeps_uuids_on_one_line_at_80_and_150() -> None:
    _, raw = _run("machines", "gb200", "-o", "json")
    uuids = [g["uuid"] for g in json.loads(raw)["gpus"]]
    for columns in (80, 150):
        code, out = _run("machines", "gb200", columns=columns)
        assert code == 0 and "…" not in out
        assert all(len(line) <= columns for line in out.splitlines())
        assert all(uuid in out for uuid in uuids)


@pytest.mark.parametrize("columns", [80, 150])
def test_plan_tables_fit_and_keep_warnings(acceptance: Path, columns: int) -> None:
    args = [
        "plan", "-m", "a100-40gb",
        "-c", str(acceptance / "seed-guides/time-slicing-config-t4-a100.yaml"),
        "--config-name", "a100-40gb", "--mig-config", "all-balanced", "--mig-strategy", "mixed",
    ]  # fmt: skip
    code, out = _run(*args, columns=columns)
    assert code == 0
    assert "…" not in out
    table_lines = [line for line in out.splitlines() if not line.startswith("warning:")]
    assert all(len(line) <= columns for line in table_lines)
    assert "warning:" in out
    # after the MIG manager applies all-balanced: one row per MIG device; its replicas are a
    # range (-o json lists every id)
    assert "Devices after the MIG manager applies all-balanced" in out
    assert "<device>::0..1 (time-slicing)" in out
    if columns >= 120:
        code, raw = _run(*args, "-o", "json")
        for device in json.loads(raw)["migManager"]["after"]["devices"]:
            assert (device["migUUID"] or device["gpuUUID"]) in out


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--mig-strategy", "mixd"], "--mig-strategy: 'mixd': allowed none, single, mixed"),
        (["--config-name", "any"], "--config-name: 'any' names a device-plugin config, but none"),
        (["-m", "gb200", "--clique", "bad"], "--clique: must be <clusterUUID>.<cliqueId>"),
        (["-m", "missing.json"], "missing.json: cannot read: No such file or directory"),
    ],
)
def test_plan_option_mistakes_name_the_option(args: list[str], expected: str) -> None:
    code, out = _run("plan", *args)
    assert code == 1
    assert f"error: {expected}" in out


def test_plan_reads_a_recorded_snapshot_like_the_agent_does() -> None:
    snapshot = REPO / "tests" / "data" / "h100-nvml-snapshot.json"
    code, out = _run(
        "plan", "-m", str(snapshot), "-l", "nvidia.com/mig.config=all-balanced",
        "--mig-strategy", "mixed", "-o", "json",
    )  # fmt: skip
    assert code == 0
    plan = json.loads(out)
    # recorded from NVML: the GPU as it is (MIG off); the desired layout is a warning
    assert plan["resources"] == {"nvidia.com/gpu": 1}
    assert "all-balanced" in plan["migPending"]


# -- kgpu agent / kgpu metrics: command-line mistakes fail before anything is served ---------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--metrics-address", "9400"], "--metrics-address: '9400' is not HOST:PORT"),
        (["--log-level", "loud"], "--log-level: 'loud': allowed debug, info, warning, error"),
        (["--hostname-label", "host"], "--hostname-label: 'host': allowed Hostname, hostname"),
        (["--in-cluster"], "--in-cluster: not running in a pod (KUBERNETES_SERVICE_HOST is unset)"),
        (
            ["--kubeconfig", "/nonexistent/kubeconfig"],
            "--kubeconfig: /nonexistent/kubeconfig: no such",
        ),
        (["--clique", "rack.x"], "--clique: machine profile 't4' (Tesla T4) has no multi-node"),
        (["--label", "bad key!=1"], "--label[0]: 'bad key!' is not a valid label key"),
    ],
)
def test_agent_option_mistakes_fail_before_serving(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    code, out = _run(
        "agent", "--machine", "t4", "--kubelet-root", str(tmp_path), "--cdi-root",
        str(tmp_path / "cdi"), *args,
    )  # fmt: skip
    assert code == 1
    assert f"error: {expected}" in out
    assert not (tmp_path / "device-plugins").exists()


def test_agent_reports_every_bad_flag_at_once(tmp_path: Path) -> None:
    code, out = _run(
        "agent", "--machine", "t4", "--kubelet-root", str(tmp_path), "--label", "a=b c",
        "--metrics-address", "nope", "--log-level", "loud", "--hostname-label", "x",
    )  # fmt: skip
    assert code == 1
    for flag in ("--label[0]", "--metrics-address", "--log-level", "--hostname-label"):
        assert f"error: {flag}: " in out, flag
    assert not (tmp_path / "device-plugins").exists()


def test_agent_clique_applies_to_built_in_profiles_only(tmp_path: Path) -> None:
    code, out = _run(
        "agent", "--machine", "nvml", "--kubelet-root", str(tmp_path), "--clique", "rack-a.0"
    )  # fmt: skip
    assert code == 1
    assert "error: --clique: applies to built-in profiles only" in out


def test_metrics_port_in_use_names_the_address() -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        code, out = _run("metrics", "--machine", "t4", "--kubelet-root", "", "--address", address)
    assert code == 1
    assert f"error: cannot serve metrics on {address}: Address already in use" in out


def test_duplicated_key_is_an_error_as_in_kubectl(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "dup.yaml",
        "sharing:\n  timeSlicing:\n    resources:\n    - name: gpu\n      replicas: 4\n"
        "      replicas: 1\n",
    )
    for command in (["plan", "-m", "t4", "-c", path], ["validate", path]):
        code, out = _run(*command)
        assert code == 1
        assert f"{path}: line 6, column 7: not valid YAML: mapping key 'replicas' already " in out


def test_helm_default_without_its_configmap_names_the_value(
    tmp_path: Path, acceptance: Path
) -> None:
    values = _write(
        tmp_path, "values.yaml", "devicePlugin:\n  config:\n    name: time-slicing-config\n"
        "    default: any\n",
    )  # fmt: skip
    code, out = _run("plan", "-m", "t4", "-c", values)
    assert code == 1
    assert f"{values}: devicePlugin.config.default: names device-plugin config 'any'" in out
    sharing = str(acceptance / "seed-guides/gpu-sharing-config-any.yaml")
    code, out = _run("plan", "-m", "t4", "-c", values, "-c", sharing, "-o", "json")
    assert code == 0 and json.loads(out)["resources"] == {"nvidia.com/gpu": 4}


def test_unknown_config_names_say_where_the_choices_are(acceptance: Path) -> None:
    sharing = str(acceptance / "vks-samples/multiple-gpu-sharing.yaml")
    code, out = _run("plan", "-m", "t4", "-c", sharing, "--config-name", "nope")
    assert code == 1
    assert f"{sharing}: config name 'nope' (--config-name" in out
    assert "choices: rtx-2080ti, rtx-4090" in out
    code, out = _run("plan", "-m", "a100-80gb", "--mig-config", "nope")
    assert code == 1
    assert "mig config 'nope' (--mig-config) names no mig-parted config; yours: none given" in out
    assert "all-balanced" in out and "all-1g.10gb.me" not in out  # summarised, not 38 names


def test_top_level_list_or_text_is_named_as_such(tmp_path: Path) -> None:
    listed = _write(tmp_path, "list.yaml", "- name: gpu\n  replicas: 4\n")
    text = _write(tmp_path, "text.yaml", "just some text\n")
    code, out = _run("plan", "-m", "t4", "-c", listed)
    assert code == 1 and f"{listed}: " in out and "the document is a YAML list" in out
    code, out = _run("validate", text)
    assert code == 1 and f"{text}: document 0: " in out and "a single text value" in out


def test_directory_instead_of_file_says_what_to_pass(tmp_path: Path) -> None:
    folder = tmp_path / "configs"
    folder.mkdir()
    for command in (["plan", "-m", "t4", "-c", str(folder)], ["validate", str(folder)]):
        code, out = _run(*command)
        assert code == 1
        assert (
            f"{folder}: is a directory; pass the files in it (for example {folder}/*.yaml)" in out
        )
    code, out = _run("allocate", str(folder))
    assert code == 1 and f"{folder}: is a directory; kgpu allocate reads one file" in out


def test_bracketed_user_text_is_printed_literally(tmp_path: Path) -> None:
    # rich would read "[/x]" as a closing style tag and raise instead of printing the error
    path = _write(
        tmp_path,
        "a[bold]b.yaml",
        'sharing: {timeSlicing: {resources: [{name: "gpu[/x]", replicas: 2}]}}\n',
    )
    code, out = _run("plan", "-m", "t4", "-c", path)
    assert code == 1
    assert (
        f"{path}: sharing.timeSlicing.resources[0].name: incorrect format for resource name " in out
    )
    assert "'nvidia.com/gpu[/x]'" in out
    code, out = _run("plan", "-m", "t4", "--hostname", "node[/x]")
    assert code == 0 and out.startswith("node[/x] (t4)")


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("bad key!=v", "'bad key!' is not a valid label key"),
        ("nvidia.com/mig.config=all balanced", "'all balanced' is not a valid label value"),
        ("novalue", "'novalue' is not key=value"),
    ],
)
def test_plan_labels_must_be_valid_kubernetes_labels(label: str, expected: str) -> None:
    code, out = _run("plan", "-m", "t4", "--label", label)
    assert code == 1
    assert f"error: --label[0]: {expected}" in out


def test_helm_values_report_every_bad_part(tmp_path: Path) -> None:
    values = _write(
        tmp_path, "values.yaml", "mig:\n  strategy: mixd\ndevicePlugin:\n  config:\n    data:\n"
        "      x: |\n        sharing: {timeSlicing: {resources: [{name: gpu, replicas: 0}]}}\n",
    )  # fmt: skip
    code, out = _run("plan", "-m", "t4", "-c", values)
    assert code == 1
    assert f"{values}: mig.strategy: unknown MIG strategy 'mixd'" in out
    assert (
        f"{values}: devicePlugin.config.data.x: sharing.timeSlicing.resources[0].replicas: "
        "must be >= 2"
    ) in out
