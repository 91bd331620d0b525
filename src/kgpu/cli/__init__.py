"""The ``kgpu`` command line.

Each command lives in its own module under :mod:`kgpu.cli` and exposes ``register(app)``; this
module only assembles them, so a command's heavy imports (gRPC, CEL, prometheus) load only when
that command runs.
"""

from __future__ import annotations

import importlib

import typer

COMMANDS = ("machines", "plan", "validate", "sim", "agent", "metrics", "allocate")

app = typer.Typer(
    name="kgpu",
    help="The GPU software stack for Kubernetes: plan, validate, simulate, serve.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_all() -> None:
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"kgpu.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"kgpu.cli.{name}":
                continue  # command not built yet
            raise
        module.register(app)


_register_all()


def main() -> None:
    app()
