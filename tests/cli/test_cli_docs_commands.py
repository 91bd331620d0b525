"""Every ``kgpu ...`` command line in the code blocks of README.md and docs/*.md runs, from the
repository's root, and exits 0 — so a reader who copies one gets what the page says. Usage
synopses (``kgpu allocate FILE [-o json]``) are not commands; commands that need a GPU, a
kubelet or a cluster, or that serve until stopped, are skipped with the reason (listed in
``NEEDS``)."""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.cli import app, output

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: What a command needs that a test machine lacks, by a piece of its text.
NEEDS = {
    "--machine nvml": "needs this host's GPUs (NVML)",
    "kgpu machines nvml": "needs this host's GPUs (NVML)",
    "kgpu agent ": "needs a kubelet: the node agent serves one until stopped",
    "--serve-metrics": "serves metrics until stopped",
    "--in-cluster": "needs a cluster's API server",
    "--kubeconfig": "needs a cluster's API server",
    "--from-cluster": "needs a cluster's API server",
}
SYNOPSIS = re.compile(r"^\[|^[A-Z][A-Z0-9_]*(\.\.\.)?$|\|")


def commands() -> list[tuple[str, str]]:
    """``(where, command)`` for every ``kgpu`` command line in a fenced code block (continued
    lines joined; ``$ `` prompts, ``&&`` chains, comments and redirections handled)."""
    found: list[tuple[str, str]] = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        fenced = False
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if not fenced:
                continue
            start = i
            while line.rstrip().endswith("\\") and i < len(lines):
                line = line.rstrip()[:-1] + " " + lines[i].strip()
                i += 1
            text = line.strip().removeprefix("$ ")
            for part in text.split("&&"):
                part = part.strip()
                if re.match(r"kgpu(\s|$)", part):
                    found.append((f"{page.name}:{start}", part))
    return found


COMMANDS = commands()


def test_the_pages_have_commands() -> None:
    assert len(COMMANDS) >= 20
    assert any(where.startswith("README.md") for where, _ in COMMANDS)


def argv(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    for stop in (">", "2>", "|", ">>"):
        if stop in words:
            words = words[: words.index(stop)]
    out: list[str] = []
    for word in words[1:]:
        out += sorted(glob.glob(word)) if any(c in word for c in "*?") else [word]
    return out


#: options whose value is a file the command writes: the test writes it under tmp_path
WRITES = ("--report",)


def redirect_outputs(args: list[str], into: Path) -> list[str]:
    """``args`` with every file the command would write moved into ``into`` (a documented
    ``--report cluster.html`` must not leave a file in the checkout)."""
    out = list(args)
    for i, word in enumerate(out[:-1]):
        if word in WRITES:
            out[i + 1] = str(into / Path(out[i + 1]).name)
    return out


@pytest.mark.parametrize(("where", "command"), COMMANDS, ids=[w for w, _ in COMMANDS])
def test_command_runs(
    where: str, command: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    words = shlex.split(command, comments=True)
    if any(SYNOPSIS.search(w) for w in words[1:]) or "..." in words:
        pytest.skip("a usage synopsis, not a command")
    for piece, need in NEEDS.items():
        if piece in command + " ":
            pytest.skip(need)
    monkeypatch.chdir(REPO)
    monkeypatch.setattr(output.console, "_width", 120)
    args = redirect_outputs(argv(command), tmp_path)
    result = CliRunner().invoke(app, args, env={"COLUMNS": "120"})
    assert result.exit_code == 0, f"{where}: {command}\n{result.output}"
    assert "Traceback" not in result.output
