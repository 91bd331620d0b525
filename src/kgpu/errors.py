"""Errors a user can act on.

Every bad input kgpu meets (a config file, a manifest, a scenario) is reported as a
:class:`FieldError`: the file, the entry inside it (a ConfigMap key, a document index), the field
path, and what is allowed. The CLI prints these and exits 1; the agent logs them and keeps its
last good state. Nothing user-facing ever shows a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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
        return f"{where}: {at}{self.message}" if where else f"{at}{self.message}"


class KgpuError(Exception):
    """Base for errors that carry a user-facing message."""


class FieldError(KgpuError):
    """One or more field-level problems in a user's input."""

    def __init__(self, problems: Sequence[FieldProblem] | FieldProblem) -> None:
        self.problems: tuple[FieldProblem, ...] = (
            (problems,) if isinstance(problems, FieldProblem) else tuple(problems)
        )
        super().__init__("\n".join(str(p) for p in self.problems))

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
