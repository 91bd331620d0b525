"""Printing text that came from the user's files without rich reading it as markup.

rich treats ``[word]`` as a style tag and raises on an unmatched ``[/word]``, so a resource named
``gpu[/x]`` in a config turned its own error message into a traceback. Messages and table cells
built from user input go through here: the ``error:``/``warning:`` prefix is styled, the rest is
printed as is.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from kgpu.cli.output import fail

__all__ = ["add_row", "cell", "fail", "warn"]  # fail: output's, which prints literally too


def warn(console: Any, text: str) -> None:
    console.print(f"[yellow]warning:[/yellow] {escape(text)}", highlight=False, soft_wrap=True)


def cell(value: object) -> str:
    """A table cell showing ``value`` literally."""
    return escape(str(value))


def add_row(table: Any, *values: object) -> None:
    """``table.add_row`` with every value shown literally."""
    table.add_row(*(cell(v) for v in values))
