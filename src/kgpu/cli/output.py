"""Shared CLI plumbing: printing field errors and JSON the same way in every command."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console

from kgpu.errors import FieldError, KgpuError

console = Console()
err_console = Console(stderr=True)


def fail(exc: KgpuError | str, code: int = 1) -> NoReturn:
    """Print a user-facing error (every field problem on its own line) and exit."""
    if isinstance(exc, FieldError):
        for problem in exc.problems:
            err_console.print(f"[red]error:[/red] {problem}", highlight=False, soft_wrap=True)
    else:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
