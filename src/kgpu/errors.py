"""Errors a user can act on.

Every bad input kgpu meets (a config file, a manifest, a scenario) is reported as a
:class:`FieldError`: the file, the entry inside it (a ConfigMap key, a document index), the field
path, and what is allowed. The CLI prints these and exits 1; the agent logs them and keeps its
last good state. Nothing user-facing ever shows a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: The longest message printed as it is: longer ones quote a value (a 40,000-character CEL
#: expression, a list shared through YAML aliases) and are cut.
MAX_MESSAGE = 2000


@dataclass(frozen=True)
class FieldProblem:
    """One problem at one place."""

    message: str
    path: str = ""  # "sharing.timeSlicing.resources[0].replicas"
    file: str = ""
    entry: str = ""  # ConfigMap data key, mig-config name, or "document 2"

    def __str__(self) -> str:
        where = ": ".join(part for part in (self.file, self.entry) if part)
        at = f"{self.path}: " if self.path else ""
        message = self.message
        if len(message) > MAX_MESSAGE:  # a message quoting a huge value: the path says where
            message = f"{message[:MAX_MESSAGE]}... ({len(message)} characters)"
        return f"{where}: {at}{message}" if where else f"{at}{message}"


class KgpuError(Exception):
    """Base for errors that carry a user-facing message."""


#: Problems an error message lists at most; the rest are counted (``... and 9,000 more``), so a
#: file with a mistake repeated 90,000 times prints a screenful, not 90,000 lines.
MAX_PROBLEMS_SHOWN = 50


def more_problems(count: int) -> str:
    """The line that stands for ``count`` problems not listed."""
    return f"... and {count:,} more problem(s) not listed (fix these first)"


class FieldError(KgpuError):
    """One or more field-level problems in a user's input."""

    def __init__(self, problems: Sequence[FieldProblem] | FieldProblem) -> None:
        self.problems: tuple[FieldProblem, ...] = (
            (problems,) if isinstance(problems, FieldProblem) else tuple(problems)
        )
        shown_problems = [str(p) for p in self.problems[:MAX_PROBLEMS_SHOWN]]
        rest = len(self.problems) - len(shown_problems)
        if rest > 0:
            shown_problems.append(more_problems(rest))
        super().__init__("\n".join(shown_problems))

    def located(self, file: str = "", entry: str = "") -> FieldError:
        """The same problems with the file and entry filled in where they were unknown."""
        return FieldError(
            [
                FieldProblem(
                    p.message,
                    p.path,
                    p.file or file,
                    p.entry or entry,
                )
                for p in self.problems
            ]
        )


def shown(value: object, limit: int = 80) -> str:
    """A value as an error message may quote it: scalars as ``repr`` (cut to ``limit``),
    containers by what they are (``a list of 300 items``): a value from a file may be huge, or
    shared through YAML aliases, and the field path already says where it is."""
    if isinstance(value, dict):
        return f"a mapping of {len(value)} keys"
    if isinstance(value, list | tuple | set):
        return f"a list of {len(value)} items"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def join_path(*parts: str | int) -> str:
    """Build a field path the way users read them: ``a.b[0].c``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = part
    return out


__all__ = ["FieldError", "FieldProblem", "KgpuError", "join_path"]
