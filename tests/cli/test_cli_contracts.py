"""The command line's contracts (issue 25): one JSON shape per object, checked against the JSON
Schemas kgpu ships; ``-`` for standard input; every shipped example validates; one meaning per
flag name; help and tables that keep option names and ids whole at 80 columns."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from kgpu.cli import app, output

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
runner = CliRunner()


def schema(name: str) -> Draft202012Validator:
    text = resources.files("kgpu.cli").joinpath(f"schemas/{name}.schema.json").read_text()
    doc = json.loads(text)
    Draft202012Validator.check_schema(doc)
    return Draft202012Validator(doc)


def run(args: list[str], columns: int = 100, stdin: str | None = None) -> Any:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.console, "_width", columns)
        mp.setattr(output.err_console, "_width", columns)
        result = runner.invoke(app, args, env={"COLUMNS": str(columns)}, input=stdin)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def errors(validator: Draft202012Validator, doc: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def test_a_pod_node_and_event_have_one_shape_in_steps_and_final_state() -> None:
    result = run(["sim", "-o", "json", "--watch"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    sim = schema("sim")
    assert errors(sim, doc) == []
    waiting = doc["steps"][4]  # 5 pods want one GPU each; the 5th waits
    pending = [p for p in waiting["pods"] if p["phase"] == "Pending"]
    assert len(pending) == 1 and pending[0]["nodeName"] is None
    for step in doc["steps"]:
        for kind in ("nodes", "pods", "events"):
            assert isinstance(step[kind], list)
        for a, b in ((step["pods"], doc["pods"]), (step["nodes"], doc["nodes"])):
            assert not a or set(a[0]) <= set(b[0]) | {"message"}
    assert any(e["reason"] == "FailedScheduling" for e in doc["steps"][4]["events"])
    # the schema is no formality: the old shapes fail it
    old = json.loads(json.dumps(doc))
    old["steps"][4]["pods"][-1]["nodeName"] = "-"
    old["steps"][0]["events"] = 3
    old["nodes"][0]["capacity"]["cpu"] = 8
    found = errors(sim, old)
    assert len(found) == 3, found


def test_plan_and_allocate_output_match_their_schemas() -> None:
    plan = run(["plan", "--machine", "dgx-h100", "-o", "json"])
    doc = json.loads(plan.stdout)
    assert errors(schema("plan"), doc) == []
    assert doc["capacity"] == {"nvidia.com/gpu": "8"} and doc["resources"] == {"nvidia.com/gpu": 8}
    configs = str(EXAMPLES / "quickstart" / "mig-configs.yaml")
    layout = "nvidia.com/mig.config=p4de-half-balanced"
    mig = run(["plan", "-m", "p4de.24xlarge", "-c", configs, "-l", layout, "--dra", "-o", "json"])
    assert errors(schema("plan"), json.loads(mig.stdout)) == []
    alloc = run(["allocate", str(EXAMPLES / "dra" / "allocate-gb200.yaml"), "-o", "json"])
    answer = json.loads(alloc.stdout)
    assert errors(schema("allocate"), answer) == []
    first = answer["allocations"][0]
    assert (first["namespace"], first["name"]) == ("default", "inference-gpus")


def test_plan_says_which_machine_it_planned_without_machine() -> None:
    result = run(["plan", "-o", "json"])
    assert result.exit_code == 0
    assert "no --machine; planning the rtx-2080ti profile" in result.stderr
    assert json.loads(result.stdout)["capacity"] == {"nvidia.com/gpu": "1"}


def test_every_shipped_example_validates() -> None:
    files = sorted(str(p) for p in EXAMPLES.rglob("*.y*ml"))
    assert len(files) > 30
    result = run(["validate", "-q", *files])
    assert result.exit_code == 0, result.output


def test_dash_reads_standard_input() -> None:
    text = (EXAMPLES / "dra" / "allocate-gb200.yaml").read_text()
    checked = run(["validate", "-"], stdin=text)
    assert checked.exit_code == 0 and "ok <stdin>: kgpu allocate input" in checked.stdout
    answer = run(["allocate", "-", "-o", "json"], stdin=text)
    assert json.loads(answer.stdout)["allocations"]
    scenario = "name: piped\nnodes: [{name: gpu-0, machine: t4}]\n"
    sim = run(["sim", "-", "-o", "json"], stdin=scenario)
    assert json.loads(sim.stdout)["scenario"] == "piped"
    broken = run(["validate", "-"], stdin="name: x\nnodes: 3\n")
    assert broken.exit_code == 1 and "<stdin>" in broken.stderr


def test_mig_apply_c_is_a_config_file_and_the_old_meaning_still_works() -> None:
    configs = str(EXAMPLES / "quickstart" / "mig-configs.yaml")
    base = ["mig", "apply", "--machine", "p4de.24xlarge", "--dry-run", "-o", "json"]
    as_file = run([*base, "-c", configs, "--selected-config", "p4de-half-balanced"])
    assert as_file.exit_code == 0, as_file.output
    old = run([*base, "-f", configs, "-c", "p4de-half-balanced"])
    assert old.exit_code == 0, old.output
    assert "-c names a config file now" in old.stderr
    assert json.loads(old.stdout) == json.loads(as_file.stdout)


def test_help_at_80_columns_keeps_every_option_name_whole() -> None:
    result = run(["agent", "-h"], columns=80)
    text = result.stdout
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    for name in ("--fail-on-init-error", "--health-quiet-period", "--health-probe-interval"):
        assert name in text


@pytest.mark.parametrize("columns", [80, 120])
def test_events_keep_ids_whole_and_message_room(columns: int) -> None:
    text = run(["sim"], columns=columns).stdout
    events = text[text.index("Events") :]
    # the XID message's GPU UUID on one line, and every object named whole
    assert re.search(r"GPU-9db2d486-14a1-f1cb-bb1b-cb3ce0dbe200", events)
    for name in ("Node/node-a100", "Deployment/default/time-slicing-verification"):
        assert name in events
    if columns == 120:
        line = next(x for x in events.splitlines() if "Scaled up replica set" in x)
        assert "Scaled up replica set time-slicing-verification-684d8d7b9f from" in line


def test_long_names_are_cut_in_tables_and_whole_in_wide(tmp_path: Path) -> None:
    long = "a" * 3000
    scenario = tmp_path / "long.yaml"
    scenario.write_text(
        f"name: n{long}\nnodes: [{{name: gpu-0, machine: t4}}]\nsteps:\n"
        + "".join(f"  - name: step {i} {long}\n    advance: 1s\n" for i in range(5))
    )
    table = run(["sim", str(scenario), "--watch"], columns=80).stdout
    assert "chars]" in table and long not in table
    assert len(table) < 20_000, len(table)
    wide = run(["sim", str(scenario), "--watch", "-o", "wide"]).stdout
    assert wide.count("a") >= 6 * len(long)  # every step's title and the scenario's, whole


def test_summary_counts_by_group_and_does_not_grow_with_the_cluster(tmp_path: Path) -> None:
    outputs = []
    for count in (5, 60):  # 40 GPUs or more: every pod Running in both
        scenario = tmp_path / f"dgx-{count}.yaml"
        scenario.write_text(
            f"name: dgx\nnodes: [{{name: dgx, count: {count}, machine: dgx-h100}}, "
            "{name: cpu, count: 2}]\napply: [pods.yaml]\n"
        )
        (tmp_path / "pods.yaml").write_text(
            "apiVersion: apps/v1\nkind: Deployment\n"
            "metadata: {name: training-run-with-a-long-name}\n"
            "spec:\n  replicas: 40\n  selector: {matchLabels: {app: t}}\n  template:\n"
            "    metadata: {labels: {app: t}}\n    spec:\n      containers:\n"
            "        - name: c\n          image: i\n"
            "          resources: {limits: {nvidia.com/gpu: 1}}\n"
        )
        result = run(["sim", str(scenario), "-o", "summary"], columns=80)
        assert result.exit_code == 0, result.output
        outputs.append(result.stdout)
    small, large = outputs
    assert len(large.splitlines()) == len(small.splitlines())
    assert "nvidia.com/gpu 40/480" in large
    assert "60/60" in large and "Node groups (62 nodes)" in large
    assert re.search(r"ReplicaSet/training-run-with-a-long-name-[0-9a-f]+ +│ +40 │", large)
