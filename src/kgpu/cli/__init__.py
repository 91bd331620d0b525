"""The ``kgpu`` command line.

Each command lives in its own module under :mod:`kgpu.cli` and exposes ``register(app)``; this
module only assembles them. A command's heavy imports (gRPC, CEL) sit inside its function, so
they load only when that command runs.
"""

from __future__ import annotations

import typer

from kgpu.cli import agent, allocate, controller, machines, metrics, migmanager, plan, sim, validate

COMMANDS = (machines, plan, validate, sim, agent, controller, metrics, allocate, migmanager)

app = typer.Typer(
    name="kgpu",
    help="The GPU software stack for Kubernetes: plan, validate, simulate, serve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_all() -> None:
    for module in COMMANDS:
        module.register(app)


_register_all()


def main() -> None:
    app()
