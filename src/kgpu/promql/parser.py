"""PromQL text to an :mod:`~kgpu.promql.ast` tree, with Prometheus' grammar and type checks.

Precedence, lowest first, as in Prometheus: ``or``; ``and`` ``unless``; comparisons; ``+ -``;
``* / % atan2``; ``^`` (right-associative). A unary sign binds tighter than ``*`` but looser than
``^`` (``-2^2`` is -4), and folds into a number literal. Aggregations take their grouping before
or after the argument (``sum by (a) (x)``, ``sum(x) by (a)``).

The checks Prometheus makes before evaluating are made here too, with its wording where a user
would recognise it: function arity and argument types, range vectors only where a function
takes them, ``bool`` only on comparisons, comparisons between scalars only with ``bool``, set
operators only between instant vectors, at least one selector matcher that does not match the
empty string, a metric name given once.

Valid PromQL that kgpu does not evaluate (``group_left``, subqueries, ``@``, ``topk``,
``histogram_quantile`` ...) raises :class:`~kgpu.promql.errors.UnsupportedError` naming the
part, at its position.
"""

from __future__ import annotations

import math
import re

from kgpu.promql.ast import (
    ARITHMETIC,
    COMPARISON,
    SET_OPERATORS,
    Aggregate,
    Binary,
    Call,
    Expr,
    Matcher,
    MatrixSelector,
    NumberLiteral,
    Paren,
    StringLiteral,
    Unary,
    VectorMatching,
    VectorSelector,
)
from kgpu.promql.errors import PromQLError, UnsupportedError
from kgpu.promql.functions import FUNCTIONS, UNSUPPORTED_FUNCTIONS
from kgpu.promql.lexer import AGGREGATORS, Token, tokenize
from kgpu.regex import RegexError
from kgpu.regex import compile as compile_regex

#: The aggregations kgpu evaluates.
SUPPORTED_AGGREGATIONS = ("sum", "avg", "min", "max", "count", "group", "stddev", "stdvar")

_PRECEDENCE: dict[str, int] = {
    "or": 1,
    "and": 2,
    "unless": 2,
    **dict.fromkeys(COMPARISON, 3),
    "+": 4,
    "-": 4,
    "*": 5,
    "/": 5,
    "%": 5,
    "atan2": 5,
    "^": 6,
}
_UNARY_PRECEDENCE = 6  # the operand of a unary sign may contain only ^
_DURATION_UNITS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
    "y": 31_536_000_000,
}
#: The deepest query tree kgpu parses (levels of parentheses, operators, calls, aggregations,
#: unary signs; a chain ``a + b + c`` is as deep as it is long). Prometheus has no such limit
#: (Go's stack grows); Python's recursion does not, and no trigger needs more.
MAX_DEPTH = 128
#: The longest query kgpu parses, in characters.
MAX_QUERY = 65_536
_DURATION_PART = re.compile(r"([0-9]+)(ms|[smhdwy])")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_TYPE_WORDS = {
    "scalar": "scalar",
    "vector": "instant vector",
    "matrix": "range vector",
    "string": "string",
}


def parse_duration_ms(text: str) -> int:
    """A Prometheus duration (``5m``, ``1h30m``) in milliseconds; units must descend and
    appear once, as ``model.ParseDuration`` requires."""
    total = 0
    last_unit = math.inf
    pos = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            raise ValueError(f'not a valid duration string: "{text}"')
        unit = _DURATION_UNITS[match.group(2)]
        if unit >= last_unit:
            raise ValueError(f'not a valid duration string: "{text}"')
        last_unit = unit
        total += int(match.group(1)) * unit
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f'not a valid duration string: "{text}"')
    return total


def _number(text: str) -> float:
    lower = text.lower()
    if lower == "inf":
        return math.inf
    if lower == "nan":
        return math.nan
    if lower.startswith("0x"):
        return float(int(text, 16))
    return float(text)


class _Parser:
    def __init__(self, query: str) -> None:
        self.query = query
        self.tokens = tokenize(query)
        self.i = 0
        self.depth = 0  # expression() calls open now

    def too_deep(self, pos: int) -> PromQLError:
        return self.error(
            f"the query nests more than {MAX_DEPTH} levels deep (parentheses, operators, "
            "function calls, aggregations, signs; a chain a + b + c counts one level per "
            "operator), kgpu's limit: simplify it, e.g. sum() over one selector instead of a "
            "long chain of terms",
            pos,
        )

    # -- token helpers ---------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, offset: int = 1) -> Token:
        return self.tokens[min(self.i + offset, len(self.tokens) - 1)]

    def advance(self) -> Token:
        tok = self.tok
        self.i = min(self.i + 1, len(self.tokens) - 1)
        return tok

    def error(self, message: str, pos: int | None = None) -> PromQLError:
        return PromQLError(message, self.tok.pos if pos is None else pos, self.query)

    def unsupported(self, what: str, pos: int, hint: str = "") -> UnsupportedError:
        message = f"unsupported by kgpu's PromQL evaluator: {what}"
        return UnsupportedError(message + (f" ({hint})" if hint else ""), pos, self.query)

    def describe(self, tok: Token) -> str:
        if tok.kind == "eof":
            return "end of input"
        if tok.kind == "string":
            return f'string "{tok.text}"'
        return f'"{self.query[tok.pos : tok.pos + len(tok.text)] or tok.text}"'

    def is_op(self, text: str) -> bool:
        return self.tok.kind == "op" and self.tok.text == text

    def is_keyword(self, word: str) -> bool:
        return self.tok.kind == "keyword" and self.tok.word == word

    def expect_op(self, text: str, context: str) -> Token:
        if not self.is_op(text):
            raise self.error(f'unexpected {self.describe(self.tok)} {context}, expected "{text}"')
        return self.advance()

    # -- grammar ---------------------------------------------------------------------------
    def parse(self) -> Expr:
        if self.tok.kind == "eof":
            raise self.error("no expression found in input")
        expr = self.expression(0)
        if self.tok.kind != "eof":
            raise self.error(f"unexpected {self.describe(self.tok)} after the expression")
        if expr.height > MAX_DEPTH:
            raise self.too_deep(expr.pos)
        if expr.type == "matrix":
            raise self.unsupported(
                "a range vector as the query's result",
                expr.pos,
                "wrap it in a function such as rate() or avg_over_time()",
            )
        if expr.type == "string":
            raise self.unsupported("a string as the query's result", expr.pos)
        return expr

    def binary_operator(self) -> str | None:
        tok = self.tok
        if tok.kind == "op" and tok.text in _PRECEDENCE:
            return tok.text
        if tok.kind == "keyword" and tok.word in _PRECEDENCE:
            return tok.word
        return None

    def expression(self, min_precedence: int) -> Expr:
        if self.depth >= MAX_DEPTH:
            raise self.too_deep(self.tok.pos)
        self.depth += 1
        try:
            return self.operators(min_precedence)
        finally:
            self.depth -= 1

    def operators(self, min_precedence: int) -> Expr:
        lhs = self.unary()
        while True:
            op = self.binary_operator()
            if op is None or _PRECEDENCE[op] < min_precedence:
                return lhs
            op_tok = self.advance()
            return_bool = False
            if self.is_keyword("bool"):
                if op not in COMPARISON:
                    raise self.error("bool modifier can only be used on comparison operators")
                return_bool = True
                self.advance()
            matching = self.vector_matching(op)
            right_assoc = op == "^"
            rhs = self.expression(_PRECEDENCE[op] + (0 if right_assoc else 1))
            node = Binary(op_tok.pos, op, lhs, rhs, return_bool, matching)
            if node.height > MAX_DEPTH:
                raise self.too_deep(op_tok.pos)
            lhs = self.check_binary(node, op_tok.pos)

    def vector_matching(self, op: str) -> VectorMatching | None:
        if not (self.is_keyword("on") or self.is_keyword("ignoring")):
            self.reject_group_modifier()
            return None
        on = self.advance().word == "on"
        labels = self.label_list("on" if on else "ignoring")
        self.reject_group_modifier()
        return VectorMatching(on=on, labels=labels)

    def reject_group_modifier(self) -> None:
        if self.is_keyword("group_left") or self.is_keyword("group_right"):
            raise self.unsupported(
                f"{self.tok.word} (many-to-one matching)",
                self.tok.pos,
                "kgpu matches vectors one-to-one with on()/ignoring()",
            )

    def check_binary(self, node: Binary, pos: int) -> Binary:
        lt, rt = node.lhs.type, node.rhs.type
        for side in (lt, rt):
            if side not in ("scalar", "vector"):
                raise self.error(
                    "binary expression must contain only scalar and instant vector types", pos
                )
        scalars = lt == "scalar" and rt == "scalar"
        if node.op in SET_OPERATORS and (lt == "scalar" or rt == "scalar"):
            raise self.error(
                f'set operator "{node.op}" not allowed in binary scalar expression', pos
            )
        if node.op in COMPARISON and scalars and not node.return_bool:
            raise self.error("comparisons between scalars must use BOOL modifier", pos)
        if node.matching is not None and (lt == "scalar" or rt == "scalar"):
            raise self.error("vector matching only allowed between instant vectors", pos)
        if node.op not in ARITHMETIC | COMPARISON | SET_OPERATORS:  # pragma: no cover
            raise self.error(f"unknown operator {node.op}", pos)
        return node

    def unary(self) -> Expr:
        if self.is_op("-") or self.is_op("+"):
            op_tok = self.advance()
            operand = self.expression(_UNARY_PRECEDENCE)
            if operand.type not in ("scalar", "vector"):
                raise self.error(
                    "unary expression only allowed on expressions of type scalar or "
                    "instant vector, got " + _TYPE_WORDS[operand.type],
                    op_tok.pos,
                )
            if isinstance(operand, NumberLiteral):
                value = -operand.value if op_tok.text == "-" else operand.value
                return NumberLiteral(op_tok.pos, value)
            if op_tok.text == "+":
                return operand
            return Unary(op_tok.pos, "-", operand)
        return self.postfix(self.primary())

    def postfix(self, expr: Expr) -> Expr:
        while True:
            if self.is_op("["):
                expr = self.range_or_subquery(expr)
            elif self.is_keyword("offset"):
                expr = self.offset(expr)
            elif self.is_op("@"):
                raise self.unsupported("the @ modifier", self.tok.pos)
            else:
                return expr

    def duration(self, context: str) -> int:
        tok = self.tok
        if tok.kind != "duration":
            raise self.error(f"unexpected {self.describe(tok)} {context}, expected a duration")
        self.advance()
        try:
            value = parse_duration_ms(tok.text)
        except ValueError as exc:
            raise self.error(str(exc), tok.pos) from None
        if value == 0:
            raise self.error("duration must be greater than 0", tok.pos)
        return value

    def range_or_subquery(self, expr: Expr) -> Expr:
        open_tok = self.advance()
        range_ms = self.duration("in the range selector")
        if self.is_op(":"):
            raise self.unsupported("subqueries ([range:resolution])", open_tok.pos)
        self.expect_op("]", "in the range selector")
        if not isinstance(expr, VectorSelector):
            raise self.error("ranges only allowed for vector selectors", open_tok.pos)
        if expr.offset_ms:
            raise self.error("offset must be written after the range selector", open_tok.pos)
        return MatrixSelector(expr.pos, expr, range_ms)

    def offset(self, expr: Expr) -> Expr:
        offset_tok = self.advance()
        sign = 1
        if self.is_op("-"):
            sign = -1
            self.advance()
        amount = sign * self.duration("after offset")
        target = expr.selector if isinstance(expr, MatrixSelector) else expr
        if not isinstance(target, VectorSelector):
            raise self.error(
                "offset modifier must be preceded by an instant vector selector or range "
                "vector selector",
                offset_tok.pos,
            )
        if target.offset_ms:
            raise self.error("offset may not be set multiple times", offset_tok.pos)
        moved = VectorSelector(target.pos, target.name, target.matchers, amount)
        if isinstance(expr, MatrixSelector):
            return MatrixSelector(expr.pos, moved, expr.range_ms)
        return moved

    def primary(self) -> Expr:
        tok = self.tok
        if tok.kind == "number":
            self.advance()
            return NumberLiteral(tok.pos, _number(tok.text))
        if tok.kind == "string":
            self.advance()
            return StringLiteral(tok.pos, tok.text)
        if tok.kind == "duration":
            raise self.error(f"unexpected duration {self.describe(tok)}")
        if self.is_op("("):
            self.advance()
            inner = self.expression(0)
            self.expect_op(")", "in the parenthesized expression")
            return Paren(tok.pos, inner)
        if self.is_op("{"):
            return self.selector("", tok.pos)
        if tok.kind == "ident":
            if tok.word in AGGREGATORS and self.aggregation_follows():
                return self.aggregation()
            if self.peek().kind == "op" and self.peek().text == "(":
                return self.call()
            self.advance()
            return self.selector(tok.text, tok.pos)
        raise self.error(f"unexpected {self.describe(tok)}")

    def aggregation_follows(self) -> bool:
        nxt = self.peek()
        return (nxt.kind == "op" and nxt.text == "(") or (
            nxt.kind == "keyword" and nxt.word in ("by", "without")
        )

    def label_name(self, context: str) -> str:
        tok = self.tok
        if tok.kind in ("ident", "keyword") and _LABEL_NAME.match(tok.text):
            self.advance()
            return tok.text
        if tok.kind == "number" and tok.word in ("inf", "nan"):
            self.advance()
            return tok.text
        raise self.error(f"unexpected {self.describe(tok)} {context}, expected a label name")

    def label_list(self, context: str) -> tuple[str, ...]:
        self.expect_op("(", f"after {context}")
        labels: list[str] = []
        while not self.is_op(")"):
            labels.append(self.label_name(f"in the {context} list"))
            if self.is_op(","):
                self.advance()
            elif not self.is_op(")"):
                raise self.error(
                    f'unexpected {self.describe(self.tok)} in the {context} list, expected "," '
                    'or ")"'
                )
        self.advance()
        return tuple(labels)

    def aggregation(self) -> Expr:
        op_tok = self.advance()
        op = op_tok.word
        grouping: tuple[str, ...] = ()
        without = False
        seen_grouping = False
        if self.is_keyword("by") or self.is_keyword("without"):
            without = self.advance().word == "without"
            grouping = self.label_list("without" if without else "by")
            seen_grouping = True
        if op not in SUPPORTED_AGGREGATIONS:
            raise self.unsupported(
                f'aggregation "{op}"',
                op_tok.pos,
                "kgpu evaluates " + ", ".join(SUPPORTED_AGGREGATIONS),
            )
        self.expect_op("(", f'after "{op}"')
        args = self.arguments("aggregation")
        if len(args) != 1:
            raise self.error(
                f"wrong number of arguments for aggregate expression provided, expected 1, "
                f"got {len(args)}",
                op_tok.pos,
            )
        if self.is_keyword("by") or self.is_keyword("without"):
            if seen_grouping:
                raise self.error("aggregation may have only one by/without clause")
            without = self.advance().word == "without"
            grouping = self.label_list("without" if without else "by")
        (arg,) = args
        if arg.type != "vector":
            raise self.error(
                "expected type instant vector in aggregation expression, got "
                + _TYPE_WORDS[arg.type],
                arg.pos,
            )
        return Aggregate(op_tok.pos, op, arg, grouping, without)

    def arguments(self, where: str) -> list[Expr]:
        """The comma-separated expressions after an opening ``(`` up to its ``)`` (consumed),
        of an aggregation or a function call (``where``, for the error)."""
        args: list[Expr] = []
        while not self.is_op(")"):
            args.append(self.expression(0))
            if self.is_op(","):
                self.advance()
            elif not self.is_op(")"):
                raise self.error(
                    f'unexpected {self.describe(self.tok)} in {where}, expected "," or ")"'
                )
        self.advance()
        return args

    def call(self) -> Expr:
        name_tok = self.advance()
        name = name_tok.text
        if name not in FUNCTIONS:
            if name in UNSUPPORTED_FUNCTIONS:
                raise self.unsupported(
                    f'function "{name}"',
                    name_tok.pos,
                    "kgpu evaluates " + ", ".join(sorted(FUNCTIONS)),
                )
            raise self.error(f'unknown function with name "{name}"', name_tok.pos)
        signature = FUNCTIONS[name]
        self.expect_op("(", f'after "{name}"')
        args = self.arguments("function call")
        need = len(signature.args)
        if not need - signature.optional <= len(args) <= need:
            raise self.error(
                f'expected {need} argument(s) in call to "{name}", got {len(args)}',
                name_tok.pos,
            )
        for arg, want in zip(args, signature.args, strict=False):
            if arg.type != want:
                raise self.error(
                    f'expected type {_TYPE_WORDS[want]} in call to function "{name}", got '
                    + _TYPE_WORDS[arg.type],
                    arg.pos,
                )
        return Call(name_tok.pos, name, tuple(args), signature.returns)

    def selector(self, name: str, pos: int) -> Expr:
        matchers: list[Matcher] = []
        if self.is_op("{"):
            self.advance()
            while not self.is_op("}"):
                matchers.append(self.matcher())
                if self.is_op(","):
                    self.advance()
                elif not self.is_op("}"):
                    raise self.error(
                        f'unexpected {self.describe(self.tok)} in label matching, expected "," '
                        'or "}"'
                    )
            self.advance()
        named = [m for m in matchers if m.name == "__name__"]
        if name and named:
            raise self.error(
                f'metric name must not be set twice: "{name}" or "{named[0].value}"', pos
            )
        if name:
            matchers.insert(0, Matcher("__name__", "=", name))
        if not matchers:
            raise self.error("vector selector must contain label matchers or metric name", pos)
        if all(m.matches("") for m in matchers):
            raise self.error("vector selector must contain at least one non-empty matcher", pos)
        if not name and len(named) == 1 and named[0].op == "=":
            name = named[0].value
        return VectorSelector(pos, name, tuple(matchers))

    def matcher(self) -> Matcher:
        name = self.label_name("in label matching")
        tok = self.tok
        if tok.kind != "op" or tok.text not in ("=", "!=", "=~", "!~"):
            raise self.error(
                f"unexpected {self.describe(tok)} in label matching, expected one of "
                '"=", "!=", "=~" or "!~"'
            )
        self.advance()
        value_tok = self.tok
        if value_tok.kind != "string":
            raise self.error(
                f"unexpected {self.describe(value_tok)} in label matching, expected string"
            )
        self.advance()
        pattern = None
        if tok.text in ("=~", "!~"):
            try:
                pattern = compile_regex(value_tok.text, anchored=True)
            except RegexError as exc:
                raise self.error(
                    f'error parsing regexp "{value_tok.text}": {exc}', value_tok.pos
                ) from None
        return Matcher(name, tok.text, value_tok.text, pattern)


def parse(query: str) -> Expr:
    """The tree of ``query``; raises :class:`PromQLError` (or :class:`UnsupportedError`) with
    the ``line:column`` of the problem."""
    if not isinstance(query, str):
        raise PromQLError(f"a query is a string, not {type(query).__name__}")
    if len(query) > MAX_QUERY:
        raise PromQLError(
            f"the query is {len(query):,} characters long; kgpu parses at most {MAX_QUERY:,}: "
            "shorten it"
        )
    return _Parser(query).parse()
