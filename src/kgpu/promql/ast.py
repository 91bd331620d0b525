"""The parsed query: one frozen node per PromQL construct kgpu evaluates.

Every node carries ``pos`` (the 0-based offset of its first character, for error messages) and
``type``: ``scalar``, ``vector`` (instant vector), ``matrix`` (range vector) or ``string``, the
value types Prometheus checks before it evaluates anything. Times are integer milliseconds, as
in Prometheus, so window edges compare exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from kgpu.regex import Regex

#: Operator groups, by PromQL's precedence (highest last) and semantics.
ARITHMETIC = frozenset({"+", "-", "*", "/", "%", "^", "atan2"})
COMPARISON = frozenset({"==", "!=", ">", "<", ">=", "<="})
SET_OPERATORS = frozenset({"and", "or", "unless"})


@dataclass(frozen=True)
class Matcher:
    """One label matcher: ``op`` is ``=``, ``!=``, ``=~`` or ``!~``. Regexes are RE2 (Go's
    ``regexp``, as in Prometheus, matched in linear time) and fully anchored, as Prometheus
    anchors them (``=~"a|b"`` means ``^(?:a|b)$``)."""

    name: str
    op: str
    value: str
    pattern: Regex | None = field(default=None, compare=False, repr=False)

    def matches(self, value: str) -> bool:
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        assert self.pattern is not None
        found = self.pattern.search(value)
        return found if self.op == "=~" else not found


@dataclass(frozen=True)
class Expr:
    """``height`` is the tree's depth below and including this node (a leaf is 1), computed
    as the node is built: the parser refuses a query deeper than its limit before anything
    recursive (``type``, :func:`walk`, the evaluator) descends into it."""

    pos: int
    height: int = field(default=1, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        below = max((child.height for child in self.children()), default=0)
        object.__setattr__(self, "height", below + 1)

    @property
    def type(self) -> str:
        raise NotImplementedError

    def children(self) -> Iterator[Expr]:
        return iter(())


@dataclass(frozen=True)
class NumberLiteral(Expr):
    value: float

    @property
    def type(self) -> str:
        return "scalar"


@dataclass(frozen=True)
class StringLiteral(Expr):
    value: str

    @property
    def type(self) -> str:
        return "string"


@dataclass(frozen=True)
class VectorSelector(Expr):
    """``name{matchers} offset D``; ``name`` is also present as an ``__name__`` matcher."""

    name: str
    matchers: tuple[Matcher, ...]
    offset_ms: int = 0

    @property
    def type(self) -> str:
        return "vector"


@dataclass(frozen=True)
class MatrixSelector(Expr):
    """``selector[range]``: the samples of the last ``range_ms`` before each series' time."""

    selector: VectorSelector
    range_ms: int

    @property
    def type(self) -> str:
        return "matrix"

    def children(self) -> Iterator[Expr]:
        yield self.selector


@dataclass(frozen=True)
class Call(Expr):
    func: str
    args: tuple[Expr, ...]
    returns: str = "vector"

    @property
    def type(self) -> str:
        return self.returns

    def children(self) -> Iterator[Expr]:
        yield from self.args


@dataclass(frozen=True)
class Aggregate(Expr):
    """``op by (labels) (expr)`` or ``op without (labels) (expr)``."""

    op: str
    expr: Expr
    grouping: tuple[str, ...] = ()
    without: bool = False

    @property
    def type(self) -> str:
        return "vector"

    def children(self) -> Iterator[Expr]:
        yield self.expr


@dataclass(frozen=True)
class VectorMatching:
    """``on (labels)`` (``on`` true) or ``ignoring (labels)``; no modifier is ``ignoring ()``."""

    on: bool = False
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Binary(Expr):
    op: str
    lhs: Expr
    rhs: Expr
    return_bool: bool = False
    matching: VectorMatching | None = None

    @property
    def type(self) -> str:
        if self.lhs.type == "scalar" and self.rhs.type == "scalar":
            return "scalar"
        return "vector"

    def children(self) -> Iterator[Expr]:
        yield self.lhs
        yield self.rhs


@dataclass(frozen=True)
class Unary(Expr):
    op: str
    expr: Expr

    @property
    def type(self) -> str:
        return self.expr.type

    def children(self) -> Iterator[Expr]:
        yield self.expr


@dataclass(frozen=True)
class Paren(Expr):
    expr: Expr

    @property
    def type(self) -> str:
        return self.expr.type

    def children(self) -> Iterator[Expr]:
        yield self.expr


def walk(expr: Expr) -> Iterator[Expr]:
    """``expr`` and every node below it, parents first."""
    yield expr
    for child in expr.children():
        yield from walk(child)


def selectors(expr: Expr) -> list[VectorSelector]:
    """Every vector selector of the query (inside range selectors too)."""
    return [node for node in walk(expr) if isinstance(node, VectorSelector)]


def metric_names(expr: Expr) -> set[str]:
    """The metric names the query reads; empty when a selector has no fixed name (then every
    series may matter). The simulator records only these series' history."""
    names: set[str] = set()
    for selector in selectors(expr):
        if not selector.name:
            return set()
        names.add(selector.name)
    return names


def max_range_ms(expr: Expr) -> int:
    """How far back the query reads: the longest range plus offset (without the lookback)."""
    longest = 0
    for node in walk(expr):
        if isinstance(node, MatrixSelector):
            longest = max(longest, node.range_ms + node.selector.offset_ms)
        elif isinstance(node, VectorSelector):
            longest = max(longest, node.offset_ms)
    return longest
