"""Evaluate a parsed query at one instant over a :class:`~kgpu.promql.history.History`.

This is Prometheus 2.42's instant-query semantics (``promql/engine.go``), which KEDA's
``/api/v1/query?time=now`` call gets:

* An instant selector returns each matching series' newest sample at most 5 minutes old (the
  window is closed: a sample exactly 5 minutes old still counts, as in 2.x; Prometheus 3 made it
  open). A staleness marker as newest sample hides the series.
* A range selector ``[r]`` takes the samples in ``[t - r, t]`` (closed in 2.x), minus staleness
  markers; ``offset d`` shifts both by ``d``.
* Functions other than ``last_over_time``, arithmetic (but not ``atan2``), unary minus and
  ``bool`` comparisons drop ``__name__``; filtering comparisons keep the left-hand sample (its
  name and value).
* Vector-vector operations match one-to-one on all labels but ``__name__``, or on the
  ``on (...)`` labels, or on all but the ``ignoring (...)`` ones; a match group with two series
  on the right is an error, and so is one found twice on the left, with Prometheus' messages.
  ``and``/``or``/``unless`` match many-to-many.
* ``sum/avg/min/max/count`` over an empty vector give an empty result; ``by`` keeps only the
  listed labels, ``without`` drops them and ``__name__``. ``min``/``max`` skip NaN unless all are.
* Division by zero and the like give IEEE results (``+Inf``, ``NaN``), as Go does.

What is not reproduced: native histograms, ``@``, subqueries, group_left/right (all rejected by
the parser). Label-matcher regexes are RE2 itself (:mod:`kgpu.regex`), as in Prometheus. Sums,
means and extremes follow 2.42's arithmetic step by step (running mean for ``avg``, compensated
sums in ``*_over_time``), so results agree to the bit in the cases the differential and ported
tests check.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from kgpu.promql.ast import (
    COMPARISON,
    Aggregate,
    Binary,
    Call,
    Expr,
    MatrixSelector,
    NumberLiteral,
    Paren,
    StringLiteral,
    Unary,
    VectorMatching,
    VectorSelector,
)
from kgpu.promql.errors import PromQLError
from kgpu.promql.functions import ELEMENTWISE, KEEPS_NAME, range_function
from kgpu.promql.history import LOOKBACK_MS, History, Labels, render_labels, to_ms
from kgpu.promql.parser import parse


@dataclass(frozen=True)
class Sample:
    labels: Labels
    value: float

    @property
    def metric(self) -> dict[str, str]:
        """The labels as the HTTP API's ``metric`` object."""
        return dict(self.labels)


@dataclass(frozen=True)
class Scalar:
    value: float


Vector = list[Sample]
Value = Scalar | Vector


#: Operators whose result loses ``__name__`` (Prometheus 2.42's shouldDropMetricName: not atan2).
_DROPS_NAME = frozenset({"+", "-", "*", "/", "%", "^"})


def _drop_name(labels: Labels) -> Labels:
    return tuple((k, v) for k, v in labels if k != "__name__")


def _go_mod(a: float, b: float) -> float:
    if b == 0 or math.isinf(a) or math.isnan(a) or math.isnan(b):
        return math.nan
    return math.fmod(a, b)


def _go_div(a: float, b: float) -> float:
    if b == 0:
        if a == 0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _go_pow(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except ZeroDivisionError:  # pragma: no cover - math.pow raises ValueError instead
        return math.inf
    except ValueError:
        if a == 0:  # 0 ** negative
            odd = b == math.floor(b) and int(b) % 2 == 1
            return math.copysign(math.inf, a) if odd else math.inf
        return math.nan  # negative ** fractional
    except OverflowError:
        odd = b == math.floor(b) and int(b) % 2 == 1
        return -math.inf if a < 0 and odd else math.inf


_ARITH: dict[str, Callable[[float, float], float]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _go_div,
    "%": _go_mod,
    "^": _go_pow,
    "atan2": math.atan2,
}
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
}


def _binop(op: str, lhs: float, rhs: float) -> tuple[float, bool]:
    """Prometheus' vectorElemBinop: the value and whether a filtering comparison keeps it."""
    if op in _COMPARE:
        return lhs, _COMPARE[op](lhs, rhs)
    return _ARITH[op](lhs, rhs), True


class _Evaluation:
    def __init__(self, history: History, t_ms: int, query: str) -> None:
        self.history = history
        self.t = t_ms
        self.query = query

    def error(self, message: str, node: Expr | None = None) -> PromQLError:
        return PromQLError(message, -1 if node is None else node.pos, self.query)

    def eval(self, node: Expr) -> Value:
        if isinstance(node, NumberLiteral):
            return Scalar(node.value)
        if isinstance(node, Paren):
            return self.eval(node.expr)
        if isinstance(node, VectorSelector):
            return self.select(node)
        if isinstance(node, Unary):
            return self.unary(node)
        if isinstance(node, Binary):
            return self.binary(node)
        if isinstance(node, Aggregate):
            return self.aggregate(node)
        if isinstance(node, Call):
            return self.call(node)
        if isinstance(node, (MatrixSelector, StringLiteral)):  # pragma: no cover - parser
            raise self.error(f"cannot evaluate a {node.type} here", node)
        raise self.error(f"unknown expression {type(node).__name__}", node)  # pragma: no cover

    def vector(self, node: Expr) -> Vector:
        value = self.eval(node)
        assert isinstance(value, list)
        return value

    def scalar(self, node: Expr) -> float:
        value = self.eval(node)
        assert isinstance(value, Scalar)
        return value.value

    def unique(self, vector: Vector, node: Expr) -> Vector:
        seen: set[Labels] = set()
        for sample in vector:
            if sample.labels in seen:
                raise self.error("vector cannot contain metrics with the same labelset", node)
            seen.add(sample.labels)
        return vector

    # -- selectors -------------------------------------------------------------------------
    def select(self, node: VectorSelector) -> Vector:
        ref = self.t - node.offset_ms
        out = []
        for series in self.history.select(node.matchers):
            value = series.latest(ref - LOOKBACK_MS, ref)
            if value is not None:
                out.append(Sample(series.labels, value))
        return out

    def matrix(self, node: Expr) -> tuple[list[tuple[Labels, list[tuple[int, float]]]], int, int]:
        while isinstance(node, Paren):
            node = node.expr
        assert isinstance(node, MatrixSelector)
        end = self.t - node.selector.offset_ms
        start = end - node.range_ms
        series = [
            (s.labels, s.points(start, end)) for s in self.history.select(node.selector.matchers)
        ]
        return series, start, end

    # -- operators -------------------------------------------------------------------------
    def unary(self, node: Unary) -> Value:
        value = self.eval(node.expr)
        if isinstance(value, Scalar):
            return Scalar(-value.value)
        return self.unique([Sample(_drop_name(s.labels), -s.value) for s in value], node)

    def binary(self, node: Binary) -> Value:
        lhs = self.eval(node.lhs)
        rhs = self.eval(node.rhs)
        op = node.op
        if isinstance(lhs, Scalar) and isinstance(rhs, Scalar):
            value, keep = _binop(op, lhs.value, rhs.value)
            if node.return_bool:
                value = 1.0 if keep else 0.0
            return Scalar(value)
        if isinstance(lhs, list) and isinstance(rhs, list):
            if op in ("and", "or", "unless"):
                return self.unique(self.set_operation(node, lhs, rhs), node)
            return self.unique(self.vector_vector(node, lhs, rhs), node)
        if isinstance(lhs, list):
            assert isinstance(rhs, Scalar)
            return self.unique(self.vector_scalar(node, lhs, rhs.value, swapped=False), node)
        assert isinstance(lhs, Scalar) and isinstance(rhs, list)
        return self.unique(self.vector_scalar(node, rhs, lhs.value, swapped=True), node)

    def vector_scalar(self, node: Binary, vector: Vector, scalar: float, swapped: bool) -> Vector:
        out = []
        for sample in vector:
            lv, rv = (scalar, sample.value) if swapped else (sample.value, scalar)
            value, keep = _binop(node.op, lv, rv)
            if node.op in COMPARISON and swapped:
                value = rv  # the vector's value, even on the right
            labels = sample.labels
            if node.return_bool:
                value = 1.0 if keep else 0.0
                keep = True
            if not keep:
                continue
            if node.op in _DROPS_NAME or node.return_bool:
                labels = _drop_name(labels)
            out.append(Sample(labels, value))
        return out

    @staticmethod
    def signature(labels: Labels, matching: VectorMatching | None) -> Labels:
        if matching is not None and matching.on:
            keep = set(matching.labels)
            return tuple((k, v) for k, v in labels if k in keep)
        ignore = set(matching.labels) if matching is not None else set()
        ignore.add("__name__")
        return tuple((k, v) for k, v in labels if k not in ignore)

    def vector_vector(self, node: Binary, lhs: Vector, rhs: Vector) -> Vector:
        matching = node.matching
        right: dict[Labels, Sample] = {}
        for sample in rhs:
            sig = self.signature(sample.labels, matching)
            if sig in right:
                group = render_labels(sig)
                raise self.error(
                    f"found duplicate series for the match group {group} on the right "
                    f"hand-side of the operation: [{render_labels(sample.labels)}, "
                    f"{render_labels(right[sig].labels)}];many-to-many matching not allowed: "
                    "matching labels must be unique on one side",
                    node,
                )
            right[sig] = sample
        matched: set[Labels] = set()
        out = []
        for sample in lhs:
            sig = self.signature(sample.labels, matching)
            other = right.get(sig)
            if other is None:
                continue
            value, keep = _binop(node.op, sample.value, other.value)
            if node.return_bool:
                value = 1.0 if keep else 0.0
            elif not keep:
                continue
            labels = sample.labels
            if node.op in _DROPS_NAME or node.return_bool:
                labels = _drop_name(labels)
            if matching is not None and matching.on:
                keep_labels = set(matching.labels)
                labels = tuple((k, v) for k, v in labels if k in keep_labels)
            elif matching is not None:
                drop = set(matching.labels)
                labels = tuple((k, v) for k, v in labels if k not in drop)
            if sig in matched:
                raise self.error(
                    "multiple matches for labels: many-to-one matching must be explicit "
                    "(group_left/group_right)",
                    node,
                )
            matched.add(sig)
            out.append(Sample(labels, value))
        return out

    def set_operation(self, node: Binary, lhs: Vector, rhs: Vector) -> Vector:
        right = {self.signature(s.labels, node.matching) for s in rhs}
        if node.op == "and":
            return [s for s in lhs if self.signature(s.labels, node.matching) in right]
        if node.op == "unless":
            return [s for s in lhs if self.signature(s.labels, node.matching) not in right]
        left = {self.signature(s.labels, node.matching) for s in lhs}
        return lhs + [s for s in rhs if self.signature(s.labels, node.matching) not in left]

    # -- aggregations ----------------------------------------------------------------------
    def aggregate(self, node: Aggregate) -> Vector:
        vector = self.vector(node.expr)
        grouping = set(node.grouping)
        groups: dict[Labels, list[float]] = {}
        for sample in vector:
            if node.without:
                grouping_out = grouping | {"__name__"}
                key = tuple((k, v) for k, v in sample.labels if k not in grouping_out)
            else:
                key = tuple((k, v) for k, v in sample.labels if k in grouping)
            groups.setdefault(key, []).append(sample.value)
        out = []
        for key, values in groups.items():
            out.append(Sample(key, _AGGREGATE[node.op](values)))
        return out

    # -- functions -------------------------------------------------------------------------
    def call(self, node: Call) -> Value:
        name = node.func
        if name == "time":
            return Scalar(self.t / 1000)
        if name == "vector":
            return [Sample((), self.scalar(node.args[0]))]
        if name == "scalar":
            vector = self.vector(node.args[0])
            return Scalar(vector[0].value if len(vector) == 1 else math.nan)
        if name in ELEMENTWISE:
            vector = self.vector(node.args[0])
            bounds = [self.scalar(arg) for arg in node.args[1:]]
            if name == "clamp" and bounds[1] < bounds[0]:
                return []  # clamp with max < min returns nothing
            fn = ELEMENTWISE[name]
            return self.unique(
                [Sample(_drop_name(s.labels), fn(s.value, *bounds)) for s in vector], node
            )
        series, start, end = self.matrix(node.args[0])
        out = []
        for labels, points in series:
            value = range_function(name, points, start, end)
            if value is None:
                continue
            out.append(Sample(labels if name in KEEPS_NAME else _drop_name(labels), value))
        return self.unique(out, node)


def _aggregate_sum(values: list[float]) -> float:
    total = values[0]
    for v in values[1:]:
        total += v
    return total


def _aggregate_avg(values: list[float]) -> float:
    """Prometheus 2.42's running mean for avg (divides before subtracting: no overflow)."""
    mean = values[0]
    for count, v in enumerate(values[1:], 2):
        if math.isinf(mean):
            if math.isinf(v) and (mean > 0) == (v > 0):
                continue
            if not math.isinf(v) and not math.isnan(v):
                continue
        mean += v / count - mean / count
    return mean


def _extreme(values: list[float], better: Callable[[float, float], bool]) -> float:
    best = values[0]
    for v in values[1:]:
        if better(v, best) or math.isnan(best):
            best = v
    return best


def _aggregate_stdvar(values: list[float]) -> float:
    """Welford's running variance, as 2.42's aggregation does it (population variance)."""
    mean, aux = values[0], 0.0
    for count, v in enumerate(values[1:], 2):
        delta = v - mean
        mean += delta / count
        aux += delta * (v - mean)
    return aux / len(values)


_AGGREGATE: dict[str, Callable[[list[float]], float]] = {
    "group": lambda vs: 1.0,
    "stdvar": _aggregate_stdvar,
    "stddev": lambda vs: math.sqrt(_aggregate_stdvar(vs)),
    "sum": _aggregate_sum,
    "avg": _aggregate_avg,
    "count": lambda vs: float(len(vs)),
    "min": lambda vs: _extreme(vs, lambda a, b: a < b),
    "max": lambda vs: _extreme(vs, lambda a, b: a > b),
}


def evaluate(expr: Expr, history: History, at: float, query: str = "") -> Value:
    """The value of ``expr`` at ``at`` seconds: a :class:`Scalar` or a list of
    :class:`Sample` (an instant vector). Run-time errors (e.g. many-to-many matches) raise
    :class:`PromQLError`."""
    return _Evaluation(history, to_ms(at), query).eval(expr)


def query(history: History, text: str, at: float) -> Value:
    """Parse and evaluate ``text`` at ``at`` seconds."""
    return evaluate(parse(text), history, at, text)
