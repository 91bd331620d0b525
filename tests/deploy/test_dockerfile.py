"""deploy/container/Dockerfile, checked without a Docker daemon.

What runs: the build stage's ``pip wheel --no-deps`` line, unchanged, on a copy of exactly what
the Dockerfile COPYs, and the final stage's ``pip install --no-index`` line, unchanged but for
``/wheels`` (a temporary directory), into a fresh virtual environment; then the installed
``kgpu`` entry point runs from that environment. This proves the wheel builds from the copied
files alone, holds the package data kgpu needs at run time (machine profiles), and installs with
the final stage's command with no index and nothing to compile.

What it does not run: the build stage's dependency-wheel line (it downloads every dependency
from PyPI). The fresh environment sees this checkout's already-installed dependencies through a
``.pth`` file instead (kgpu's own editable install left out), so the final stage's resolver finds
them satisfied; that the dependency wheels exist for the image's platform is not proven here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from .conftest import REPO

DOCKERFILE = REPO / "deploy" / "container" / "Dockerfile"
COMPILERS = {"gcc", "g++", "cc", "clang", "make", "build-essential", "python3-dev", "rustc"}


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def runs(self) -> list[str]:
        return [_strip_run_flags(arg) for op, arg in self.instructions if op == "RUN"]

    def last(self, op: str) -> str | None:
        found = [arg for o, arg in self.instructions if o == op]
        return found[-1] if found else None


def _strip_run_flags(arg: str) -> str:
    words = arg.split()
    while words and words[0].startswith("--"):
        words.pop(0)
    return " ".join(words)


def _dockerfile_config() -> ModuleType:
    """deploy/container/dockerfile-config.py (a standalone script, hence loaded by path): the
    one reader of the Dockerfile's instruction lines, for build.sh and these tests alike."""
    path = REPO / "deploy" / "container" / "dockerfile-config.py"
    spec = importlib.util.spec_from_file_location("dockerfile_config", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, each with its instructions (continuations joined,
    comments dropped)."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in _dockerfile_config().logical_lines(text):
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            words = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif op == "ARG" and not stages:
            key, _, default = rest.partition("=")
            args[key] = default
        elif stages:
            stages[-1].instructions.append((op, rest.strip()))
    return args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text())[1]


def test_multi_stage_slim_non_root_kgpu_entrypoint(stages: list[Stage]) -> None:
    build, final = stages[0], stages[-1]
    assert len(stages) >= 2 and build.name == "build"
    assert final.base == build.base and final.base.endswith("-slim")
    assert json.loads(final.last("ENTRYPOINT") or "null") == ["kgpu"]
    user = (final.last("USER") or "0").split(":")[0]
    assert user.isdigit() and int(user) != 0, "the image's default user must not be root"
    for run in final.runs():
        assert not {w.strip("\"'") for w in shlex.split(run)} & COMPILERS, run
        assert "apt-get install" not in run and "apk add" not in run, run
    (install,) = [r for r in final.runs() if "pip install" in r]
    assert "--no-index" in install and "/wheels" in install
    # the driver libraries are linked at run time where the image looks for them
    env = " ".join(arg for op, arg in final.instructions if op == "ENV")
    assert "LD_LIBRARY_PATH=/run/kgpu/driver/lib" in env
    assert "/run/kgpu/driver/bin" in env


def _overlay_site(tmp: Path) -> Path:
    """A directory of links to this environment's installed distributions, kgpu's own editable
    install left out: the dependencies the final stage would find in /wheels."""
    overlay = tmp / "deps"
    overlay.mkdir()
    for sp in site.getsitepackages():
        for entry in Path(sp).iterdir():
            if entry.name.lower().startswith(("kgpu", "__editable__", "_kgpu")):
                continue
            if entry.suffix == ".pth" or (overlay / entry.name).exists():
                continue
            (overlay / entry.name).symlink_to(entry)
    return overlay


@pytest.mark.slow
def test_image_install_steps_work_in_a_clean_venv(stages: list[Stage], tmp_path: Path) -> None:
    build, final = stages[0], stages[-1]
    # the build stage's context: exactly what it COPYs, nothing else of the checkout
    context = tmp_path / "src"
    context.mkdir()
    for op, arg in build.instructions:
        if op != "COPY":
            continue
        *sources, dest = arg.split()
        for source in sources:
            target = context / (dest.rstrip("/").removeprefix("./") if dest != "./" else source)
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(REPO / source, target)
    wheels = tmp_path / "wheels"
    (wheel_line,) = [r for r in build.runs() if "pip wheel" in r and "--no-deps" in r]
    (install_run,) = [r for r in final.runs() if "pip install" in r]
    # the pip command alone: slim-site.py, chained after it, is run by tests/deploy/test_image.py
    install_line = install_run.split("&&")[0].strip()

    def pip(line: str, python: str, cwd: Path) -> None:
        words = shlex.split(line.replace("/wheels", str(wheels)))
        assert words[0] == "pip"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "--python", python, *words[1:]],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PIP_NO_INPUT": "1"},
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"

    pip(wheel_line, sys.executable, context)
    (wheel,) = wheels.glob("kgpu-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    (purelib,) = (venv / "lib").glob("python3*/site-packages")
    (purelib / "kgpu-test-deps.pth").write_text(f"{_overlay_site(tmp_path)}\n")
    pip(install_line, python, tmp_path)

    where = subprocess.run(
        [python, "-c", "import kgpu, sys; print(kgpu.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(venv), f"kgpu imported from {where}, not the image's"
    # the entry point, and package data (machine profiles) inside the wheel
    shown = subprocess.run(
        [str(venv / "bin" / "kgpu"), "machines", "dgx-h100", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout)["gpus"]) == 8
    assert wheel.name.startswith("kgpu-0.1.0-")
