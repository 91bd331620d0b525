"""Regular expressions from user input, in RE2's language through RE2's linear-time engine.

Prometheus label matchers (``=~``, ``!~``), cluster-autoscaler's priority expander and the
Kubernetes API all compile user patterns with Go's ``regexp``, which is RE2: its own syntax (no
backreferences, no lookaround, ``(?i)`` anywhere, ``\\pL``, ``[[:alpha:]]``) and matching in
time linear in the text. Python's ``re`` is neither: a pattern such as ``(a*)*b`` backtracks for
ever, and ``a{1000}{1000}`` overflows it. Every pattern a user writes (PromQL triggers,
``expect`` files' ``messageRegex``, the priority expander's node-group regexes) goes through
:func:`compile` here, on ``google-re2`` (the ``re2`` module), never through ``re``.

The bounds, stated so errors can name them: a pattern of at most :data:`MAX_PATTERN` characters,
and RE2's own program-size cap (:data:`MAX_MEMORY` bytes; RE2 refuses a bigger program with
"pattern too large") and repeat cap (``{1000}`` at most).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import re2

#: The longest pattern kgpu compiles (characters). Go has no such cap; matching costs
#: O(pattern x text), so kgpu bounds the pattern to keep every match cheap.
MAX_PATTERN = 16_384
#: RE2's memory budget for one compiled pattern (its default, 8 MiB).
MAX_MEMORY = 8 << 20


class RegexError(ValueError):
    """A pattern RE2 refuses, with RE2's reason (Go's ``regexp`` words most of them alike)."""


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_MEMORY
    options.log_errors = False  # RE2 would print each refusal to stderr besides raising it
    return options


_OPTIONS = _options()


@dataclass(frozen=True)
class Regex:
    """A compiled RE2 pattern. ``pattern`` is what the user wrote (for messages)."""

    pattern: str
    compiled: Any

    def search(self, text: str) -> bool:
        """Whether the pattern matches anywhere in ``text`` (Go's ``MatchString``)."""
        return self.compiled.search(_text(text)) is not None


def _text(text: str) -> str:
    # RE2 matches UTF-8; a lone surrogate (from a JSON "\ud800") cannot be encoded, and Go
    # would read those bytes as U+FFFD, so kgpu does the same.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8", "replace")
    return text


def _message(exc: BaseException) -> str:
    arg = exc.args[0] if exc.args else exc
    if isinstance(arg, bytes):
        return arg.decode("utf-8", "replace")
    return str(arg)


def compile(pattern: str, *, anchored: bool = False) -> Regex:
    """``pattern`` compiled by RE2. ``anchored`` wraps it as Prometheus does for a label
    matcher, ``^(?:PATTERN)$`` (text wrapped, not a full-match call, so that a pattern with an
    unbalanced ``)|(`` means what it means to Prometheus). Raises :class:`RegexError`."""
    if not isinstance(pattern, str):
        raise RegexError(f"a regex is a string, not {type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN:
        raise RegexError(
            f"the pattern is {len(pattern):,} characters; kgpu compiles at most "
            f"{MAX_PATTERN:,}: shorten it"
        )
    try:
        pattern.encode("utf-8")
    except UnicodeEncodeError:
        raise RegexError("the pattern is not valid UTF-8 text (a lone surrogate)") from None
    text = f"^(?:{pattern})$" if anchored else pattern
    try:
        compiled = re2.compile(text, _OPTIONS)
    except re2.error as exc:
        raise RegexError(_message(exc)) from None
    except (TypeError, ValueError) as exc:  # e.g. a NUL the binding refuses
        raise RegexError(_message(exc)) from None
    return Regex(pattern, compiled)


__all__ = ["MAX_MEMORY", "MAX_PATTERN", "Regex", "RegexError", "compile"]
