"""The ``kgpu`` command line.

Each command lives in its own module under :mod:`kgpu.cli` and exposes ``register(app)``; this
module only assembles them on a :class:`~kgpu.cli.commands.KgpuTyper` (``-h``, flags shown as
flags) with ``--version`` and shell completion (``--install-completion``, ``--show-completion``).
A command's heavy imports (gRPC, CEL) sit inside its function, so they load only when that
command runs.
"""

from __future__ import annotations

from typing import Annotated

import typer

from kgpu.cli import (
    agent,
    allocate,
    controller,
    explain,
    machines,
    metrics,
    migmanager,
    plan,
    sim,
    validate,
)
from kgpu.cli.commands import KgpuTyper

COMMANDS = (
    machines,
    plan,
    validate,
    sim,
    explain,
    agent,
    controller,
    metrics,
    allocate,
    migmanager,
)

app = KgpuTyper(
    name="kgpu",
    help="The GPU software stack for Kubernetes: plan, validate, simulate, serve.",
    no_args_is_help=True,
    add_completion=True,
)


def version() -> str:
    """The installed distribution's version (the package's own when run from a checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    from kgpu import __version__

    try:
        return dist_version("kgpu")
    except PackageNotFoundError:
        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"kgpu {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print kgpu's version and exit.",
        ),
    ] = False,
) -> None:
    """The GPU software stack for Kubernetes: plan, validate, simulate, serve."""


def _register_all() -> None:
    for module in COMMANDS:
        module.register(app)


_register_all()


def main() -> None:
    from kgpu.cli.signals import exit_on_sigint

    exit_on_sigint()
    app()
