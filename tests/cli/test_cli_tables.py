"""Every table of ``kgpu sim``, ``plan``, ``machines``, ``allocate``, ``validate`` and
``mig apply`` at 80, 120 and 200 columns: nothing is cut (no ellipsis, no table wider than the
terminal, which would lose its right edge), and from 120 columns on ids (GPU and MIG UUIDs,
pod names) are whole; ``-o wide`` shows every column with every id on one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.cli import app, output

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
runner = CliRunner()
LEFT_EDGES = "┏┃┡│└┗┣╭╰"
RIGHT_EDGES = "┓┃┩│┘┛┫╮╯"
UUID = re.compile(r"(?:GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

COMMANDS: dict[str, list[str]] = {
    "sim": ["sim"],
    "sim-watch": ["sim", "--watch"],
    "sim-domain": ["sim", str(EXAMPLES / "computedomain" / "heal-four-node-domain.yaml")],
    "sim-domain-watch": [
        "sim",
        str(EXAMPLES / "computedomain" / "heal-four-node-domain.yaml"),
        "--watch",
    ],
    "sim-mig": ["sim", str(EXAMPLES / "mig-p4de.yaml")],
    "plan": ["plan", "--machine", "dgx-h100"],
    "plan-mig-dra": [
        "plan",
        "--machine",
        "p4de.24xlarge",
        "-c",
        str(EXAMPLES / "quickstart" / "mig-configs.yaml"),
        "-l",
        "nvidia.com/mig.config=p4de-half-balanced",
        "--dra",
    ],
    "plan-gb200": [
        "plan",
        "--machine",
        "gb200",
        "--clique",
        "7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.1",
    ],
    "machines": ["machines"],
    "machines-dgx": ["machines", "dgx-h100"],
    "machines-gb200": ["machines", "gb200"],
    "allocate": ["allocate", str(EXAMPLES / "dra" / "allocate-gb200.yaml")],
    "validate": ["validate", str(EXAMPLES / "mig-p4de.yaml")],
    "mig": [
        "mig",
        "apply",
        "--machine",
        "p4de.24xlarge",
        "-f",
        str(EXAMPLES / "quickstart" / "mig-configs.yaml"),
        "--selected-config",
        "p4de-half-balanced",
    ],
}


def run(args: list[str], columns: int) -> tuple[int, str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.console, "_width", columns)
        mp.setattr(output.err_console, "_width", columns)
        result = runner.invoke(app, args, env={"COLUMNS": str(columns)})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.stdout


def cut_lines(out: str, columns: int) -> list[str]:
    """Lines that lost something: an ellipsis, or a table row wider than the terminal or
    without its right edge. (Plain lines may be longer: the terminal wraps them.)"""
    bad = []
    for line in out.splitlines():
        text = line.rstrip()
        table = text[:1] in LEFT_EDGES
        if "…" in text or (table and (len(text) > columns or text[-1:] not in RIGHT_EDGES)):
            bad.append(text)
    return bad


@pytest.mark.parametrize("columns", [80, 120, 200])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_no_table_is_cut(name: str, columns: int) -> None:
    code, out = run(COMMANDS[name], columns)
    assert code == 0, out
    assert cut_lines(out, columns) == []


def shown_ids(name: str, data: object) -> set[str]:
    """The GPU and MIG UUIDs a command's tables show: the devices of the pods listed (sim),
    every advertised device (plan: after the MIG manager when it would change the GPUs), every
    GPU (machines)."""
    if name.startswith("sim"):
        assert isinstance(data, dict)
        pods = data["pods"][:40]
        return {i for p in pods for ids in p["devices"].values() for i in ids if UUID.fullmatch(i)}
    if name.startswith("plan"):
        assert isinstance(data, dict)
        # with a MIG layout the GPUs lack, the device table is the node's after the manager
        shown = (data.get("migManager") or {}).get("after") or data
        return {d["migUUID"] or d["gpuUUID"] for d in shown["devices"]}
    return set(UUID.findall(json.dumps(data)))


@pytest.mark.parametrize("columns", [120, 200])
@pytest.mark.parametrize("name", ["sim", "sim-domain", "sim-mig", "plan-mig-dra", "machines-dgx"])
def test_ids_are_whole_from_120_columns(name: str, columns: int) -> None:
    """At 200 columns every id is on one line; at 120 none is shortened (a long cell may fold
    one onto a second line: its first 20 characters are still together)."""
    args = COMMANDS[name]
    _, raw = run([*args, "-o", "json"], 200)
    ids = shown_ids(name, json.loads(raw))
    assert ids
    _, out = run(args, columns)
    for uuid in sorted(ids):
        assert (uuid if columns >= 200 else uuid[:20]) in out, uuid


@pytest.mark.parametrize("name", ["sim", "sim-domain", "plan-mig-dra", "machines", "allocate"])
def test_wide_shows_every_column_on_a_narrow_terminal(name: str) -> None:
    args = COMMANDS[name]
    code, _ = run(args, 80)
    code_wide, wide = run([*args, "-o", "wide"], 80)
    assert code == code_wide == 0
    assert cut_lines(wide, 1000) == []
    headers = {
        "sim": "DEVICES",
        "sim-domain": "DEVICES",
        "plan-mig-dra": "ADVERTISED IDS",
        "machines": "DRIVER",
        "allocate": "DRIVER",
    }
    assert headers[name] in wide
    # whole ids, each on one line, where 80 columns shortened or folded them
    _, raw = run([*args, "-o", "json"], 200)
    if name != "allocate" and name != "machines":
        for uuid in shown_ids(name, json.loads(raw)):
            assert uuid in wide, uuid
