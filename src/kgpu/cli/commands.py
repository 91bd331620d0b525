"""The Typer classes every ``kgpu`` command is built with, so they all behave alike.

- ``-h`` works wherever ``--help`` does (set once on the root; subcommands inherit it);
- a boolean flag shows in help as the flag it is (``--dra``, ``--dra/--no-dra``): the Typer this
  project runs on prints ``--dra <bool>``, which reads as if the flag took a value;
- every command and sub-application is one of these classes, including ``kgpu mig``.

Commands register with ``@app.command(...)`` on a :class:`KgpuTyper` and get this for free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import CommandFunctionType

HELP_OPTIONS = ["-h", "--help"]


def _flags_without_type(params: list[Any]) -> list[Any]:
    """Give boolean flags an empty metavar: help then shows no ``<bool>`` after them."""
    for param in params:
        if getattr(param, "is_bool_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


#: Below this terminal width help is printed as plain text: rich's option table cut long
#: option names (``--fail-on-init-er…``) and help text to fit 80 columns.
RICH_HELP_MIN_WIDTH = 120


def _format_help(command: Any, base: Any, ctx: Any, formatter: Any) -> None:
    """``base.format_help`` (Typer's), plain on narrow terminals: every option name whole,
    its help wrapped at word boundaries beside or under it (Typer prints plain help when the
    command has no rich markup mode)."""
    import shutil

    if shutil.get_terminal_size().columns >= RICH_HELP_MIN_WIDTH:
        base.format_help(command, ctx, formatter)
        return
    saved = command.rich_markup_mode
    command.rich_markup_mode = None
    try:
        base.format_help(command, ctx, formatter)
    finally:
        command.rich_markup_mode = saved


class KgpuCommand(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_without_type(super().get_params(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _format_help(self, TyperCommand, ctx, formatter)


class KgpuGroup(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_without_type(super().get_params(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        _format_help(self, TyperGroup, ctx, formatter)


class KgpuTyper(typer.Typer):
    """A Typer whose commands are :class:`KgpuCommand` and whose help is ``-h`` too."""

    def __init__(self, **kwargs: Any) -> None:
        settings = {"help_option_names": HELP_OPTIONS, **kwargs.pop("context_settings", {})}
        kwargs.setdefault("cls", KgpuGroup)
        kwargs.setdefault("pretty_exceptions_enable", False)
        super().__init__(context_settings=settings, **kwargs)

    def command(
        self, name: str | None = None, **kwargs: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        kwargs.setdefault("cls", KgpuCommand)
        return super().command(name, **kwargs)


__all__ = ["HELP_OPTIONS", "KgpuCommand", "KgpuGroup", "KgpuTyper"]
