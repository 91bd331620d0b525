"""Every input that once broke a promise (issue 11, and what the fuzz tests found since) runs
again, every time: ``tests/data/fuzz/<command>/<name>`` with its expectation in
``tests/data/fuzz/cases.yaml``.

Each case is copied with its neighbours into a fresh folder (a scenario finds the files it
applies), set up as the case says (a FIFO, a file to protect), run in-process by the fuzz
harness (no traceback, no hang, bounded memory, an ``error: file: ...`` line on exit 1) and
then held to its own expectation: the exit code and the words of the fix.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from .harness import REPO, run_cli

CORPUS = REPO / "tests" / "data" / "fuzz"
CASES: dict[str, dict[str, Any]] = yaml.safe_load((CORPUS / "cases.yaml").read_text())

#: How each folder's inputs are run ({input}: the copied file, {dir}: its folder).
COMMANDS = {
    "validate": ["validate", "{input}"],
    "plan": ["plan", "--machine", "p4de.24xlarge", "-c", "{input}"],
    "sim": ["sim", "{input}"],
    "allocate": ["allocate", "{input}"],
    "machines": ["machines", "{input}"],
}
ALLOWED_EXITS = {"allocate": (0, 1, 2, 3)}


def test_every_corpus_file_has_a_case() -> None:
    files = {
        str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.is_file() and p.parent != CORPUS
    }
    helpers = {str(case["helper"]) for case in CASES.values() if "helper" in case}
    assert sorted(files - set(CASES) - helpers) == []
    assert sorted(set(CASES) - files) == []


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if "helper" not in c))
def test_corpus_case(name: str) -> None:
    case = CASES[name]
    command = name.split("/", 1)[0]
    # lower case: a kind is lower-cased on its way into a schema path (kind-traversal.yaml)
    with tempfile.TemporaryDirectory(prefix="kgpu-corpus-") as tmp:
        folder = Path(tmp) / command
        shutil.copytree(CORPUS / command, folder)
        target = folder / Path(name).name
        if "{dir}" in target.read_bytes().decode("utf-8", "replace"):
            target.write_text(target.read_text().replace("{dir}", str(folder)))
        for fifo in case.get("fifos", []):
            os.mkfifo(folder / fifo)
        for file, text in (case.get("files") or {}).items():
            (folder / file).write_text(text)
        args = [a.format(input=target, dir=folder) for a in case.get("args", COMMANDS[command])]
        outcome = run_cli(args, roots=[folder], allowed_exits=ALLOWED_EXITS.get(command, (0, 1)))
    assert not outcome.failure, outcome.describe()
    output = outcome.stdout + outcome.stderr
    expected = case.get("exit", 1)
    assert outcome.exit_code in (expected if isinstance(expected, list) else [expected]), output[
        -2000:
    ]
    for text in _list(case.get("error")):
        assert text in outcome.stderr, f"{text!r} not in:\n{outcome.stderr[-2000:]}"
    for text in _list(case.get("absent")):
        assert text not in output, f"{text!r} in:\n{output[-2000:]}"


def _list(value: Any) -> list[str]:
    return [] if value is None else [value] if isinstance(value, str) else list(value)
