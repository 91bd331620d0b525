"""``kgpu sim`` output as tools and people read it: every key of the contract in ``-o json``
(empty lists included), whole pod names in tables at 80 columns, user text shown literally."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.cli import app, output

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()
CONTRACT_KEYS = ("nodes", "pods", "events", "resourceClaims", "resourceSlices", "computeDomains")


def _sim(*args: str, columns: int = 200) -> tuple[int, str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.console, "_width", columns)
        mp.setattr(output.err_console, "_width", columns)
        result = runner.invoke(app, ["sim", *args], env={"COLUMNS": str(columns)})
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize("scenario", [None, "mig-p4de.yaml", "mps-job.yaml"])
def test_json_always_has_every_contract_key(scenario: str | None) -> None:
    args = [str(REPO / "examples" / scenario)] if scenario else []
    code, out = _sim(*args, "-o", "json")
    assert code == 0
    data = json.loads(out)
    for key in CONTRACT_KEYS:
        assert isinstance(data[key], list), key
    # these scenarios hold no DRA objects: the keys are there, empty
    assert data["resourceClaims"] == [] and data["computeDomains"] == []
    assert data["unsupported"] == [] and data["warnings"] == []


def test_json_lists_compute_domains_when_there_are_some() -> None:
    code, out = _sim(str(REPO / "examples" / "gb200-compute-domain.yaml"), "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert [d["metadata"]["name"] for d in data["computeDomains"]]


@pytest.mark.parametrize("scenario", [None, "mps-job.yaml", "gb200-compute-domain.yaml"])
def test_tables_at_80_columns_show_every_pod_name_whole(scenario: str | None) -> None:
    args = [str(REPO / "examples" / scenario)] if scenario else []
    _, raw = _sim(*args, "-o", "json")
    names = [f"{p['namespace']}/{p['name']}" for p in json.loads(raw)["pods"]][:40]
    assert names
    code, out = _sim(*args, columns=80)
    assert code == 0
    for name in names:
        assert name in out, name
    assert all(len(line) <= 80 for line in out.splitlines())
    # two replicas of one Deployment are told apart
    assert len({n for n in names if n in out}) == len(set(names))


def test_devices_are_shown_at_80_columns_too() -> None:
    _, raw = _sim("-o", "json")
    pod = next(p for p in json.loads(raw)["pods"] if p["name"] == "mig-3g-40gb")
    device = pod["devices"]["cuda"][0][:12]  # a MIG UUID, shortened as tables show it
    code, out = _sim(columns=80)
    assert code == 0
    assert f"cuda: {device}" in out


def test_scenario_text_that_looks_like_markup_is_shown_literally(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: '[/x]demo'\ndescription: '[bold]not bold'\nnodes: [{name: a, machine: t4}]\n"
        "apply:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n"
        "  spec: {containers: [{name: '[c]', image: x, resources: {limits: "
        "{nvidia.com/gpu: 1}}}]}\n"
    )
    code, out = _sim(str(path))
    assert code == 0
    assert "[/x]demo — [bold]not bold" in out


def test_a_quantity_that_is_not_one_is_reported_in_the_api_servers_words(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "nodes: [{name: a, machine: t4}]\napply:\n- apiVersion: v1\n  kind: Pod\n"
        "  metadata: {name: p}\n  spec: {containers: [{name: c, image: x, resources: "
        "{limits: {nvidia.com/gpu: two}}}]}\n"
    )
    code, out = _sim(str(path))
    assert code == 1
    assert (
        "apply[0].spec.containers[0].resources.limits.nvidia.com/gpu: 'two' is not a quantity: "
        "quantities must "
        "match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    ) in out
