"""The command line as a new user meets it: ``--version``, ``-h``, flags shown as flags,
``-o yaml`` wherever ``-o json`` is, one wording for a bad ``-o``, positional arguments named
as such, ``metrics -m``, one header style, shell completion, and how the long-running commands
stop (Ctrl-C: one ``SIGINT`` line and exit 130; SIGTERM: exit 0)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kgpu.cli import app, output

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
runner = CliRunner()

MIG = ["-f", str(EXAMPLES / "quickstart" / "mig-configs.yaml"), "-s", "p4de-half-balanced"]
#: Every command that prints data, with arguments that make it succeed.
DATA_COMMANDS: dict[str, list[str]] = {
    "machines": ["machines"],
    "machines NAME": ["machines", "a100-80gb"],
    "plan": ["plan", "--machine", "t4"],
    "sim": ["sim", str(EXAMPLES / "mps-job.yaml")],
    "allocate": ["allocate", str(EXAMPLES / "dra" / "allocate-gb200.yaml")],
    "mig apply": ["mig", "apply", "--machine", "p4de.24xlarge", *MIG, "--dry-run"],
}
#: Every command and sub-command, as typed.
ALL_COMMANDS = [
    [],
    ["machines"],
    ["plan"],
    ["validate"],
    ["sim"],
    ["agent"],
    ["metrics"],
    ["allocate"],
    ["mig"],
    ["mig", "apply"],
]


def invoke(args: list[str], columns: int = 120) -> tuple[int, str, str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.console, "_width", columns)
        mp.setattr(output.err_console, "_width", 300)
        result = runner.invoke(app, args, env={"COLUMNS": str(columns)})
    assert "Traceback" not in result.output
    return result.exit_code, result.stdout, result.stderr


def test_version() -> None:
    from kgpu import __version__

    code, out, _ = invoke(["--version"])
    assert code == 0
    assert out == f"kgpu {__version__}\n"


@pytest.mark.parametrize("args", ALL_COMMANDS, ids=lambda a: " ".join(a) or "kgpu")
def test_dash_h_is_help_and_flags_show_no_value(args: list[str]) -> None:
    code, short, _ = invoke([*args, "-h"])
    code_long, long, _ = invoke([*args, "--help"])
    assert code == code_long == 0
    assert short == long and "Usage: kgpu" in short
    # a flag takes no value: help must not read "--dra <bool>"
    assert "<bool>" not in short


def test_bool_flags_are_flags() -> None:
    _, agent, _ = invoke(["agent", "-h"], columns=200)
    line = next(line for line in agent.splitlines() if "--dra" in line)
    assert "--no-dra" in line
    _, plan, _ = invoke(["plan", "-h"], columns=200)
    assert "--dra " in plan


@pytest.mark.parametrize("name", sorted(DATA_COMMANDS))
def test_yaml_is_the_json_document(name: str) -> None:
    args = DATA_COMMANDS[name]
    code, as_json, _ = invoke([*args, "-o", "json"])
    code_yaml, as_yaml, _ = invoke([*args, "-o", "yaml"])
    assert code == code_yaml == 0
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


@pytest.mark.parametrize("name", sorted(DATA_COMMANDS))
def test_one_wording_for_a_bad_output_format(name: str) -> None:
    code, out, err = invoke([*DATA_COMMANDS[name], "-o", "xml"])
    assert code == 1 and out == ""
    common = "error: --output: 'xml' is not an output format; allowed: table, wide, json, yaml"
    assert err == common + (", summary" if name == "sim" else "") + "\n"


def test_positional_arguments_are_named_as_such(tmp_path: Path) -> None:
    code, _, err = invoke(["machines", "nope"])
    assert code == 1
    assert err.startswith("error: argument MACHINE: unknown machine profile 'nope'")
    code, _, err = invoke(["sim", str(tmp_path / "nope.yaml")])
    assert code == 1
    assert err == f"error: argument SCENARIO: {tmp_path / 'nope.yaml'}: no such file\n"
    code, _, err = invoke(["sim", str(tmp_path)])
    assert err.startswith("error: argument SCENARIO: ") and "is a directory" in err
    # the usage line names them the same way
    _, help_text, _ = invoke(["sim", "-h"])
    assert "Usage: kgpu sim [OPTIONS] [SCENARIO]" in help_text


def test_metrics_takes_dash_m() -> None:
    code, out, _ = invoke(["metrics", "-m", "t4", "--once", "--kubelet-root", ""])
    assert code == 0
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0"' in out


@pytest.mark.parametrize("name", sorted(DATA_COMMANDS))
def test_one_header_style(name: str) -> None:
    """Every table output opens with one header line, and column headers are upper case."""
    code, out, _ = invoke(DATA_COMMANDS[name])
    assert code == 0
    first = out.splitlines()[0]
    assert first.strip() and not first.startswith(("┏", "┃", " "))
    headers = [line for line in out.splitlines() if line.startswith("┃")]
    assert headers
    for line in headers:
        assert line == line.upper(), line


def test_shell_completion() -> None:
    _, top, _ = invoke(["-h"])
    assert "--install-completion" in top and "--show-completion" in top
    for shell in ("bash", "zsh", "fish"):
        code, script, _ = invoke(["--show-completion", shell])
        assert code == 0
        assert "_KGPU_COMPLETE" in script.upper().replace("-", "_"), shell


# -- stopping the long-running commands ------------------------------------------------------


def _start(args: list[str], ready: str, tmp_path: Path) -> subprocess.Popen[str]:
    log = (tmp_path / "log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "kgpu", *args],
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    deadline = time.monotonic() + 30
    while ready not in (tmp_path / "log").read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail((tmp_path / "log").read_text())
        time.sleep(0.05)
    return proc


def _stop(proc: subprocess.Popen[str], sig: int, tmp_path: Path) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        code = proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return code, (tmp_path / "log").read_text()


METRICS = ["metrics", "-m", "t4", "--address", "127.0.0.1:0", "--kubelet-root", ""]


@pytest.mark.slow
def test_metrics_ctrl_c_is_one_sigint_line_and_exit_130(tmp_path: Path) -> None:
    proc = _start(METRICS, "serving /metrics", tmp_path)
    code, log = _stop(proc, signal.SIGINT, tmp_path)
    assert code == 130
    assert log.splitlines()[-1] == "SIGINT: stopping the exporter"
    assert "Traceback" not in log and "KeyboardInterrupt" not in log


@pytest.mark.slow
def test_metrics_exits_0_on_sigterm(tmp_path: Path) -> None:
    proc = _start(METRICS, "serving /metrics", tmp_path)
    code, log = _stop(proc, signal.SIGTERM, tmp_path)
    assert code == 0
    assert log.splitlines()[-1] == "SIGTERM: stopping the exporter"


@pytest.mark.slow
def test_agent_ctrl_c_is_logged_as_sigint(tmp_path: Path) -> None:
    args = ["agent", "-m", "t4", "--kubelet-root", str(tmp_path / "kubelet"), "--no-dra"]
    proc = _start([*args, "--node-name", "n1"], "agent ready", tmp_path)
    code, log = _stop(proc, signal.SIGINT, tmp_path)
    assert code == 130
    assert "INFO kgpu.agent: SIGINT: removing sockets and exiting" in log
    assert "SIGTERM" not in log and "Traceback" not in log


def _wait_until_blocked(pid: int) -> None:
    """Until the process sleeps without using CPU (imported, waiting on its read)."""
    deadline = time.monotonic() + 30
    last, quiet = "", 0
    while quiet < 4 and time.monotonic() < deadline:
        time.sleep(0.25)
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = fields[11] + "/" + fields[12]  # utime/stime
        quiet = quiet + 1 if fields[0] == "S" and ticks == last else 0
        last = ticks


@pytest.mark.slow
def test_ctrl_c_in_any_other_command_is_one_line_and_exit_130(tmp_path: Path) -> None:
    # validate blocks while it reads its file: Ctrl-C must end it cleanly. kgpu refuses pipes
    # and devices as input files (a FIFO nobody writes to would hang it), so a slow disk is
    # stood in for by a read that sleeps
    code = (
        "import sys, time\n"
        "import kgpu.userfiles as files\n"
        "files.read_bytes = lambda *args, **kwargs: time.sleep(3600) or b''\n"
        "sys.argv = ['kgpu', 'validate', 'slow.yaml']\n"
        "from kgpu.cli import main\n"
        "main()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_until_blocked(proc.pid)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 130
    assert err == "SIGINT: interrupted\n"
