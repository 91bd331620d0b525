"""PromQL's tokens, as Prometheus' lexer cuts them.

Reproduced: identifiers with colons (recording-rule names), case-insensitive keywords (``SUM``,
``By``), ``Inf``/``NaN`` in any case as numbers, hexadecimal numbers, durations made of several
units (``1h30m``, units ``ms s m h d w y``), the three string quotes with Go's escapes (backtick
strings are raw), and ``#`` comments. Not reproduced: Prometheus 3's number-as-duration forms
(``[300]``) and duration arithmetic, which Prometheus 2.x rejects too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kgpu.promql.errors import PromQLError

#: Aggregation operators Prometheus knows (kgpu evaluates some of them, see the evaluator).
AGGREGATORS = frozenset(
    {
        "sum",
        "avg",
        "count",
        "min",
        "max",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "count_values",
        "quantile",
        "limitk",
        "limit_ratio",
    }
)
KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "atan2",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "start",
        "end",
    }
)

_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_DIGITS = frozenset("0123456789")
_WORD_CHAR = re.compile(r"[a-zA-Z0-9_]")
_DURATION = re.compile(r"(?:[0-9]+(?:ms|[smhdwy]))+")
_HEX = re.compile(r"0[xX][0-9a-fA-F]+")
_NUMBER = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_OPERATORS = ("==", "!=", "<=", ">=", "=~", "!~", "+", "-", "*", "/", "%", "^", "<", ">", "=")
_PUNCT = "(){}[],@:"
_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
}


@dataclass(frozen=True)
class Token:
    """One token: ``kind`` is ``number``, ``duration``, ``string``, ``ident``, ``keyword``,
    ``op`` (operators and punctuation) or ``eof``; ``text`` is the source text, except for
    strings (their unquoted value). Keywords compare case-insensitively (:attr:`word`)."""

    kind: str
    text: str
    pos: int

    @property
    def word(self) -> str:
        return self.text.lower()


def _string(query: str, start: int) -> tuple[str, int]:
    """The value of the string literal at ``start`` and the offset after it."""
    quote = query[start]
    i = start + 1
    out: list[str] = []
    while i < len(query):
        ch = query[i]
        if ch == quote:
            return "".join(out), i + 1
        if quote != "`" and ch == "\n":
            break
        if ch == "\\" and quote != "`":
            i += 1
            if i >= len(query):
                break
            esc = query[i]
            if esc in _ESCAPES:
                out.append(_ESCAPES[esc])
                i += 1
            elif esc == quote:
                out.append(quote)
                i += 1
            elif esc in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[esc]
                digits = query[i + 1 : i + 1 + width]
                if len(digits) != width or not all(c in "0123456789abcdefABCDEF" for c in digits):
                    raise PromQLError(f"invalid escape sequence \\{esc}{digits}", i - 1, query)
                out.append(chr(int(digits, 16)))
                i += 1 + width
            elif esc in "01234567":
                digits = query[i : i + 3]
                if len(digits) != 3 or not all(c in "01234567" for c in digits):
                    raise PromQLError(f"invalid escape sequence \\{digits}", i - 1, query)
                out.append(chr(int(digits, 8)))
                i += 3
            else:
                raise PromQLError(f"unknown escape sequence \\{esc}", i - 1, query)
            continue
        out.append(ch)
        i += 1
    raise PromQLError("unterminated quoted string", start, query)


def tokenize(query: str) -> list[Token]:
    """Every token of ``query``, ending with an ``eof`` token."""
    tokens: list[Token] = []
    i = 0
    n = len(query)
    in_brackets = False  # a colon inside [...] separates a subquery's range and step
    while i < n:
        ch = query[i]
        if ch in "[]":
            in_brackets = ch == "["
        if ch == ":" and in_brackets:
            tokens.append(Token("op", ch, i))
            i += 1
            continue
        if ch in " \t\r\n":
            i += 1
            continue
        if ch == "#":
            end = query.find("\n", i)
            i = n if end < 0 else end
            continue
        if ch in "\"'`":
            value, end = _string(query, i)
            tokens.append(Token("string", value, i))
            i = end
            continue
        # ASCII digits only: str.isdigit() is true for "²" too, which no number pattern takes
        if ch in _DIGITS or (ch == "." and i + 1 < n and query[i + 1] in _DIGITS):
            duration = _DURATION.match(query, i)
            if duration and not _WORD_CHAR.match(query, duration.end()):
                tokens.append(Token("duration", duration.group(), i))
                i = duration.end()
                continue
            number = _HEX.match(query, i) or _NUMBER.match(query, i)
            assert number is not None  # a digit (or .digit) always starts a number
            end = number.end()
            if end < n and _WORD_CHAR.match(query, end):
                raise PromQLError(
                    f'bad number or duration syntax: "{query[i : end + 1]}"', i, query
                )
            tokens.append(Token("number", number.group(), i))
            i = end
            continue
        ident = _IDENT.match(query, i)
        if ident:
            word = ident.group()
            lower = word.lower()
            if lower in ("inf", "nan"):
                tokens.append(Token("number", word, i))
            elif lower in KEYWORDS or lower in AGGREGATORS:
                # aggregators stay identifiers: `sum` may also be a label name in by (...)
                tokens.append(Token("keyword" if lower in KEYWORDS else "ident", word, i))
            else:
                tokens.append(Token("ident", word, i))
            i = ident.end()
            continue
        for op in _OPERATORS:
            if query.startswith(op, i):
                tokens.append(Token("op", op, i))
                i += len(op)
                break
        else:
            if ch in _PUNCT:
                tokens.append(Token("op", ch, i))
                i += 1
            elif ch == "!":
                raise PromQLError('unexpected character after "!": use != or !~', i, query)
            else:
                raise PromQLError(f"unexpected character: {ch!r}", i, query)
    tokens.append(Token("eof", "", n))
    return tokens
