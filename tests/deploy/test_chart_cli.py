"""The chart's command lines parse with kgpu's own command-line parser, so a rendered pod does
not crash-loop on an unknown flag or a subcommand that does not exist.

Each container's ``args`` (the image's entrypoint is ``kgpu``) go through the same click
command ``kgpu`` runs, up to option parsing (nothing is started). A few flags the chart already
uses are being added by other work; they are listed in PENDING with who adds them. While a
pending flag is unknown to the parser the test checks everything else and then reports xfail
naming what is missing; once the flag exists it is parsed like every other.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer

from kgpu.cli import app
from kgpu.config import load_config_files

from .conftest import VALUES_SETS, Rendered

Render = Callable[[str, str], Rendered]

#: (subcommand, flag) -> what it is and who adds it. "*" stands for the whole subcommand.
PENDING: dict[tuple[str, str], str] = {}

#: the click group ``kgpu`` runs (typer ships its own copy of click, hence Any below)
COMMAND: Any = typer.main.get_command(app)


def pod_commands(rendered: Rendered) -> list[tuple[str, list[str]]]:
    out = []
    for kind in ("DaemonSet", "Deployment"):
        for obj in rendered.of_kind(kind):
            for c in obj["spec"]["template"]["spec"]["containers"]:
                out.append((f"{kind}/{obj['metadata']['name']}/{c['name']}", list(c["args"])))
    return out


def known_options(sub: Any) -> set[str]:
    return {opt for p in sub.params for opt in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("values", VALUES_SETS)
def test_rendered_args_parse_with_kgpus_cli(render: Render, values: str) -> None:
    pending_seen: list[str] = []
    for where, args in pod_commands(render("1.34", values)):
        name, rest = args[0], args[1:]
        sub = COMMAND.commands.get(name)
        if sub is None:
            assert (name, "*") in PENDING, f"{where}: kgpu has no subcommand {name!r}"
            pending_seen.append(PENDING[(name, "*")])
            continue
        known = known_options(sub)
        kept = []
        for arg in rest:
            option = arg.split("=", 1)[0]
            if option not in known and (name, option) in PENDING:
                pending_seen.append(PENDING[(name, option)])
                continue
            kept.append(arg)
        try:
            sub.make_context(name, kept)
        except Exception as exc:  # click's UsageError/BadParameter: what `kgpu` would print
            said = exc.format_message() if hasattr(exc, "format_message") else str(exc)
            pytest.fail(f"{where}: kgpu {name} {' '.join(kept)}: {said}")
    if pending_seen:
        pytest.xfail("pending: " + "; ".join(sorted(set(pending_seen))))


def _configmap_volume(root: Path, files: dict[str, str]) -> Path:
    """A directory laid out as the kubelet lays out a ConfigMap volume: the keys are symlinks
    to ``..data/<key>``, ``..data`` links to a timestamped directory holding the files."""
    stamp = root / "..2025_01_01_00_00_00.000000000"
    stamp.mkdir(parents=True)
    for key, text in files.items():
        (stamp / key).write_text(text)
        (root / key).symlink_to(Path("..data") / key)
    (root / "..data").symlink_to(stamp.name)
    return root


def test_config_directory_from_a_configmap_volume(tmp_path: Path) -> None:
    """devicePlugin.config.name: the chart mounts that ConfigMap and passes the directory."""
    volume = _configmap_volume(
        tmp_path / "device-plugin",
        {
            "a100.80gb": "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
            "    - name: nvidia.com/gpu\n      replicas: 2\n",
            "default": "version: v1\n",
        },
    )
    configs = load_config_files([volume])
    assert set(configs.plugin_configs) == {"a100.80gb", "default"}


@pytest.mark.parametrize("values", VALUES_SETS)
def test_the_agents_environment_reads_as_upstreams_variables(render: Render, values: str) -> None:
    """The env the chart gives the agent (NODE_NAME, NVIDIA_DRIVER_ROOT, MPS_ROOT, ...) is
    valid for ``kgpu agent`` and lands where upstream's daemons put it."""
    from kgpu.agent.upstream import read_environment

    from .test_chart import load_values

    (daemonset,) = render("1.34", values).of_kind("DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value", "from-the-downward-api") for e in container["env"]}
    settings, problems = read_environment(env, {})
    assert problems == [], [str(p) for p in problems]
    flags = dict(settings.flags)
    assert flags["plugin.containerDriverRoot"] == "/driver-root"  # the mount
    assert flags["nvidiaDriverRoot"] == load_values(values)["nvidiaDriverRoot"]
    assert flags["mpsRoot"] == load_values(values)["mps"]["root"]
