"""Shared CLI plumbing: printing field errors and JSON the same way in every command."""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from kgpu.errors import FieldError, KgpuError

console = Console()
err_console = Console(stderr=True)


def fail(exc: KgpuError | str, code: int = 1) -> NoReturn:
    """Print a user-facing error (every field problem on its own line) and exit.

    The text is printed literally: it quotes the user's files, and rich would read a name such
    as ``a[/x]`` as a closing style tag and raise."""
    lines = [str(p) for p in exc.problems] if isinstance(exc, FieldError) else [str(exc)]
    for line in lines:
        err_console.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
