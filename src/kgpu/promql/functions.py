"""The PromQL functions kgpu evaluates: their signatures and the math over a series' samples.

The range functions follow Prometheus 2.42's ``promql/functions.go``:

* ``rate``/``increase``/``delta`` extrapolate from the first and last sample in the window to
  the window's edges, but by at most half the average sample interval when the series starts
  or ends more than 1.1 intervals inside the window; a counter is never extrapolated below zero;
  every drop of a counter is a reset (the value before the drop is added back). Fewer than two
  samples give no result.
* ``irate``/``idelta`` use the last two samples (a drop is a reset for ``irate``).
* ``*_over_time``, ``changes`` and ``resets`` aggregate every sample in the window, with the
  same compensated sums and running means as Prometheus.

A series' samples are ``(t_ms, value)`` pairs in time order, staleness markers already dropped.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Points = Sequence[tuple[int, float]]


@dataclass(frozen=True)
class Signature:
    """Argument types (``scalar``, ``vector``, ``matrix``), how many trailing ones may be left
    out, and the result type."""

    args: tuple[str, ...]
    returns: str
    optional: int = 0


FUNCTIONS: dict[str, Signature] = {
    "rate": Signature(("matrix",), "vector"),
    "irate": Signature(("matrix",), "vector"),
    "increase": Signature(("matrix",), "vector"),
    "delta": Signature(("matrix",), "vector"),
    "idelta": Signature(("matrix",), "vector"),
    "avg_over_time": Signature(("matrix",), "vector"),
    "sum_over_time": Signature(("matrix",), "vector"),
    "min_over_time": Signature(("matrix",), "vector"),
    "max_over_time": Signature(("matrix",), "vector"),
    "count_over_time": Signature(("matrix",), "vector"),
    "last_over_time": Signature(("matrix",), "vector"),
    "changes": Signature(("matrix",), "vector"),
    "resets": Signature(("matrix",), "vector"),
    "stddev_over_time": Signature(("matrix",), "vector"),
    "stdvar_over_time": Signature(("matrix",), "vector"),
    "abs": Signature(("vector",), "vector"),
    "ceil": Signature(("vector",), "vector"),
    "floor": Signature(("vector",), "vector"),
    "sgn": Signature(("vector",), "vector"),
    "sqrt": Signature(("vector",), "vector"),
    "exp": Signature(("vector",), "vector"),
    "ln": Signature(("vector",), "vector"),
    "log2": Signature(("vector",), "vector"),
    "log10": Signature(("vector",), "vector"),
    "round": Signature(("vector", "scalar"), "vector", optional=1),
    "clamp": Signature(("vector", "scalar", "scalar"), "vector"),
    "clamp_min": Signature(("vector", "scalar"), "vector"),
    "clamp_max": Signature(("vector", "scalar"), "vector"),
    "scalar": Signature(("vector",), "scalar"),
    "vector": Signature(("scalar",), "vector"),
    "time": Signature((), "scalar"),
}

#: Prometheus 2.42's other functions: valid PromQL that kgpu reports as unsupported.
UNSUPPORTED_FUNCTIONS = frozenset(
    {
        "absent",
        "absent_over_time",
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atan",
        "atanh",
        "cos",
        "cosh",
        "day_of_month",
        "day_of_week",
        "day_of_year",
        "days_in_month",
        "deg",
        "deriv",
        "histogram_count",
        "histogram_fraction",
        "histogram_quantile",
        "histogram_sum",
        "holt_winters",
        "hour",
        "label_join",
        "label_replace",
        "minute",
        "month",
        "pi",
        "predict_linear",
        "present_over_time",
        "quantile_over_time",
        "rad",
        "sin",
        "sinh",
        "sort",
        "sort_desc",
        "tan",
        "tanh",
        "timestamp",
        "year",
    }
)

#: Functions whose result keeps the input's metric name (all others drop ``__name__``).
KEEPS_NAME = frozenset({"last_over_time"})


def extrapolated_rate(
    points: Points, range_start: int, range_end: int, is_counter: bool, is_rate: bool
) -> float | None:
    """``rate``, ``increase`` (counters) and ``delta`` (gauges) over ``[range_start,
    range_end]`` (ms); None when fewer than two samples."""
    if len(points) < 2:
        return None
    first_t, first_v = points[0]
    last_t, last_v = points[-1]
    result = last_v - first_v
    if is_counter:
        previous = 0.0
        for _, value in points:
            if value < previous:
                result += previous
            previous = value
    duration_to_start = (first_t - range_start) / 1000
    duration_to_end = (range_end - last_t) / 1000
    sampled = (last_t - first_t) / 1000
    average_interval = sampled / (len(points) - 1)
    if is_counter and result > 0 and first_v >= 0:
        duration_to_zero = sampled * (first_v / result)
        duration_to_start = min(duration_to_start, duration_to_zero)
    threshold = average_interval * 1.1
    extrapolate_to = sampled
    extrapolate_to += duration_to_start if duration_to_start < threshold else average_interval / 2
    extrapolate_to += duration_to_end if duration_to_end < threshold else average_interval / 2
    result = result * (extrapolate_to / sampled)
    if is_rate:
        result /= (range_end - range_start) / 1000
    return result


def instant_value(points: Points, is_rate: bool) -> float | None:
    """``irate`` and ``idelta``: the last two samples; None when fewer, or both at one time."""
    if len(points) < 2:
        return None
    (prev_t, prev_v), (last_t, last_v) = points[-2], points[-1]
    result = last_v if is_rate and last_v < prev_v else last_v - prev_v
    interval = last_t - prev_t
    if interval == 0:
        return None
    if is_rate:
        result /= interval / 1000
    return result


def _kahan_inc(inc: float, total: float, c: float) -> tuple[float, float]:
    """Neumaier-compensated addition, as Prometheus' kahanSumInc."""
    t = total + inc
    if abs(total) >= abs(inc):
        c += (total - t) + inc
    else:
        c += (inc - t) + total
    return t, c


def _max(values: list[float]) -> float:
    best = values[0]
    for v in values:
        if v > best or math.isnan(best):
            best = v
    return best


def _min(values: list[float]) -> float:
    best = values[0]
    for v in values:
        if v < best or math.isnan(best):
            best = v
    return best


def _sum(values: list[float]) -> float:
    total = c = 0.0
    for v in values:
        total, c = _kahan_inc(v, total, c)
    return total if math.isinf(total) else total + c


def _avg(values: list[float]) -> float:
    """The running mean Prometheus keeps (no overflow for huge values, Inf kept as Inf)."""
    mean = c = 0.0
    count = 0.0
    for v in values:
        count += 1
        if math.isinf(mean):
            if math.isinf(v) and (mean > 0) == (v > 0):
                continue
            if not math.isinf(v) and not math.isnan(v):
                continue
        mean, c = _kahan_inc(v / count - mean / count, mean, c)
    return mean if math.isinf(mean) else mean + c


OVER_TIME: dict[str, Callable[[list[float]], float]] = {
    "avg_over_time": _avg,
    "sum_over_time": _sum,
    "min_over_time": _min,
    "max_over_time": _max,
    "count_over_time": lambda vs: float(len(vs)),
    "last_over_time": lambda vs: vs[-1],
}


def _stdvar(values: list[float]) -> float:
    """Prometheus' compensated running variance (population)."""
    count = mean = c_mean = aux = c_aux = 0.0
    for v in values:
        count += 1
        delta = v - (mean + c_mean)
        mean, c_mean = _kahan_inc(delta / count, mean, c_mean)
        aux, c_aux = _kahan_inc(delta * (v - (mean + c_mean)), aux, c_aux)
    return (aux + c_aux) / count


def _changes(values: list[float]) -> float:
    changes = 0
    for prev, cur in itertools.pairwise(values):
        if cur != prev and not (math.isnan(cur) and math.isnan(prev)):
            changes += 1
    return float(changes)


def _resets(values: list[float]) -> float:
    return float(sum(1 for prev, cur in itertools.pairwise(values) if cur < prev))


OVER_TIME.update(
    {
        "stdvar_over_time": _stdvar,
        "stddev_over_time": lambda vs: math.sqrt(_stdvar(vs)),
        "changes": _changes,
        "resets": _resets,
    }
)


def _go_log(x: float, log: Callable[[float], float]) -> float:
    if math.isnan(x) or x < 0:
        return math.nan
    if x == 0:
        return -math.inf
    return x if math.isinf(x) else log(x)


def _go_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def _go_round(v: float, to_nearest: float) -> float:
    """round(): ties go up; Prometheus divides by the inverse (fewer float surprises)."""
    inverse = 1.0 / to_nearest if to_nearest else math.inf
    if not math.isfinite(v) or not math.isfinite(inverse):
        return v if math.isfinite(inverse) else math.nan
    scaled = v * inverse + 0.5
    return math.floor(scaled) / inverse if math.isfinite(scaled) else v


#: Element-wise functions on an instant vector: ``fn(value, *scalar args)``.
ELEMENTWISE: dict[str, Callable[..., float]] = {
    "abs": abs,
    "ceil": lambda v: float(math.ceil(v)) if math.isfinite(v) else v,
    "floor": lambda v: float(math.floor(v)) if math.isfinite(v) else v,
    "sgn": lambda v: -1.0 if v < 0 else 1.0 if v > 0 else v,
    "sqrt": lambda v: math.nan if math.isnan(v) or v < 0 else math.sqrt(v),
    "exp": _go_exp,
    "ln": lambda v: _go_log(v, math.log),
    "log2": lambda v: _go_log(v, math.log2),
    "log10": lambda v: _go_log(v, math.log10),
    "round": lambda v, to_nearest=1.0: _go_round(v, to_nearest),
    "clamp_min": lambda v, lo: math.nan if math.isnan(v) or math.isnan(lo) else max(v, lo),
    "clamp_max": lambda v, hi: math.nan if math.isnan(v) or math.isnan(hi) else min(v, hi),
    "clamp": lambda v, lo, hi: (
        math.nan if math.isnan(v) or math.isnan(lo) or math.isnan(hi) else max(lo, min(hi, v))
    ),
}


def range_function(name: str, points: Points, range_start: int, range_end: int) -> float | None:
    """The value of range function ``name`` for one series, None when it has none."""
    if name in ("rate", "increase", "delta"):
        return extrapolated_rate(
            points, range_start, range_end, is_counter=name != "delta", is_rate=name == "rate"
        )
    if name in ("irate", "idelta"):
        return instant_value(points, is_rate=name == "irate")
    if not points:
        return None
    return OVER_TIME[name]([v for _, v in points])
