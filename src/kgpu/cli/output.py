"""Shared CLI plumbing: errors, the output formats and the header line, the same in every
command.

Every command that prints data takes ``-o/--output`` with the same choices (:func:`output_option`):
``table`` (fitted to the terminal), ``wide`` (every column, nothing folded to the terminal's
width, as ``kubectl -o wide``), ``json`` and ``yaml`` (the same document). A bad choice is
refused in one wording everywhere (:func:`check_output`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any, NoReturn, TextIO

import typer
from rich.console import Console
from rich.markup import escape

from kgpu.errors import MAX_PROBLEMS_SHOWN, FieldError, FieldProblem, KgpuError, more_problems

# emoji=False: rich would turn ":thumbs_up:" in a quoted name into an emoji; kgpu prints the
# user's text as written (markup is escaped where user text meets a styled string: plain.py)
console = Console(emoji=False)
err_console = Console(stderr=True, emoji=False)

#: Every format ``-o`` takes, in the order help and errors list them.
OUTPUT_FORMATS = ("table", "wide", "json", "yaml")
#: The width ``-o wide`` lays tables out for: wider than any row, so no cell is folded to fit.
WIDE_COLUMNS = 1000


def fail(exc: KgpuError | str, code: int = 1) -> NoReturn:
    """Print a user-facing error (each field problem on its own line, the first
    :data:`MAX_PROBLEMS_SHOWN` of them, then how many more) and exit.

    The text is printed literally: it quotes the user's files, and rich would read a name such
    as ``a[/x]`` as a closing style tag and raise."""
    lines = [str(p) for p in exc.problems] if isinstance(exc, FieldError) else [str(exc)]
    if len(lines) > MAX_PROBLEMS_SHOWN:
        lines = [*lines[:MAX_PROBLEMS_SHOWN], more_problems(len(lines) - MAX_PROBLEMS_SHOWN)]
    for line in lines:
        err_console.print(f"[red]error:[/red] {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def argument_error(name: str, message: str) -> FieldError:
    """A problem with a positional argument, named as such (``argument SCENARIO: ...``) rather
    than as an option the command does not have."""
    return FieldError(FieldProblem(message, path=f"argument {name}"))


def as_argument(exc: FieldError, option: str, name: str) -> FieldError:
    """``exc`` with the problems a shared parser reported at ``option`` (``--machine``) moved to
    the positional argument ``name`` that this command took the value from."""
    return FieldError(
        [
            FieldProblem(p.message, f"argument {name}", p.file, p.entry) if p.path == option else p
            for p in exc.problems
        ]
    )


def output_option(formats: tuple[str, ...] = OUTPUT_FORMATS, extra: str = "") -> Any:
    """The ``-o/--output`` option, declared alike in every command (``extra``: what a
    command's own further formats do)."""
    common = "table (fits the terminal), wide (every column, nothing folded), json or yaml"
    return typer.Option(
        "--output",
        "-o",
        metavar="|".join(formats),
        help=common + (f"; {extra}" if extra else "") + "."
        if formats[: len(OUTPUT_FORMATS)] == OUTPUT_FORMATS
        else " or ".join(formats) + ".",
    )


def check_output(output: str, formats: tuple[str, ...] = OUTPUT_FORMATS) -> None:
    """Refuse an ``-o`` value no command knows, in the words every command uses."""
    if output not in formats:
        fail(
            FieldError(
                FieldProblem(
                    f"{output!r} is not an output format; allowed: {', '.join(formats)}",
                    path="--output",
                )
            )
        )


def plain_data(data: Any) -> Any:
    """``data`` with everything JSON cannot hold turned into strings (paths, enums...)."""
    return json.loads(json.dumps(data, default=str))


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def stream_json(parts: Iterable[tuple[str, Any]], out: TextIO | None = None) -> None:
    """One JSON object written key by key: a value that is an iterator is written as a list,
    one item per line as it comes, so a report of 100,000 pods never sits in memory whole.
    Valid JSON for any reader (``jq``, ``json.load``); one item a line for ``grep``."""
    write = (out or sys.stdout).write
    encode = json.JSONEncoder(default=str, ensure_ascii=True).encode
    write("{")
    for n, (key, value) in enumerate(parts):
        write(("," if n else "") + "\n" + encode(key) + ": ")
        if not isinstance(value, Iterator):
            write(encode(value))
            continue
        first = True
        for item in value:
            write(("[\n  " if first else ",\n  ") + encode(item))
            first = False
        write("[]" if first else "\n]")
    write("\n}\n")


def print_yaml(data: Any) -> None:
    import yaml

    sys.stdout.write(
        yaml.safe_dump(plain_data(data), sort_keys=False, default_flow_style=False, width=1 << 16)
    )


def print_data(data: Any, output: str) -> None:
    """``-o json`` or ``-o yaml``: the same document in either."""
    if output == "yaml":
        print_yaml(data)
    else:
        print_json(data)


def is_data(output: str) -> bool:
    return output in ("json", "yaml")


def table_console(output: str) -> Console:
    """Where tables go: the terminal's console, or for ``-o wide`` one as wide as any row, so
    every column is there and no id is folded (pipe it to ``less -S`` on a narrow terminal)."""
    if output != "wide":
        return console
    return Console(width=WIDE_COLUMNS, highlight=False, emoji=False)


def header(out: Console, title: str, detail: str = "") -> None:
    """The line each command's table output starts with: the subject in bold, then what it
    is, printed literally."""
    text = f"[bold]{escape(title)}[/bold]" + (f" {escape(detail)}" if detail else "")
    out.print(text, highlight=False)
