"""The image config of the Dockerfile's final stage as ``buildah config`` arguments, one a line.

    python dockerfile-config.py Dockerfile BASE_PATH

build.sh assembles the arm64 image without running the Dockerfile (no emulation); this keeps
its config (labels, environment, user, entrypoint, command) the Dockerfile's, read from the
one file rather than repeated. ``$PATH`` in an ENV value expands to BASE_PATH (the base image's).
Standard library only; handles the instructions the Dockerfile uses, and fails on others.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

CONFIG = {"LABEL", "ENV", "USER", "ENTRYPOINT", "CMD", "WORKDIR", "EXPOSE"}
IGNORED = {"FROM", "ARG", "COPY", "RUN"}  # file system steps build.sh does itself


def logical_lines(text: str) -> list[str]:
    """The Dockerfile's instructions, one a line: continuations joined, comments dropped
    (tests/deploy/test_dockerfile.py reads the file through this too)."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    return lines


def final_stage(text: str) -> list[tuple[str, str]]:
    stage: list[tuple[str, str]] = []
    for line in logical_lines(text):
        op, _, rest = line.partition(" ")
        if op.upper() == "FROM":
            stage = []
        stage.append((op.upper(), rest.strip()))
    return stage


def config_args(stage: list[tuple[str, str]], base_path: str) -> list[str]:
    args: list[str] = []
    for op, rest in stage:
        if op in IGNORED:
            continue
        if op not in CONFIG:
            raise SystemExit(f"dockerfile-config: {op} in the final stage is not handled")
        if op in ("LABEL", "ENV"):
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                value = value.replace("${PATH}", base_path).replace("$PATH", base_path)
                args += [f"--{op.lower()}", f"{key}={value}"]
        elif op == "USER":
            args += ["--user", rest]
        elif op in ("ENTRYPOINT", "CMD"):
            args += [f"--{op.lower()}", json.dumps(json.loads(rest))]
        elif op == "WORKDIR":
            args += ["--workingdir", rest]
        else:
            args += ["--port", rest]
    return args


if __name__ == "__main__":
    dockerfile, base_path = Path(sys.argv[1]), sys.argv[2]
    print("\n".join(config_args(final_stage(dockerfile.read_text()), base_path)))
