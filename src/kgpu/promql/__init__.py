"""PromQL as KEDA users write it, evaluated on the simulated cluster's own metrics.

No Python library evaluates PromQL, so this package does: :func:`parse` turns a query into a
tree (Prometheus' grammar, precedence and type checks, its error wording with ``line:column``),
:func:`evaluate` runs it at one instant over a :class:`History` of scraped samples with
Prometheus 2.42's instant-query semantics (5-minute lookback, staleness markers, ``rate``
extrapolation and counter resets, vector matching, ``__name__`` dropping). The subset: instant
and range selectors with ``= != =~ !~`` matchers and ``offset``; number literals; ``+ - * / % ^
atan2``, comparisons with and without ``bool``, ``and or unless`` with ``on``/``ignoring``;
``sum avg min max count group stddev stdvar`` with ``by``/``without``; ``rate irate increase
delta idelta changes resets`` and ``avg/sum/min/max/count/last/stddev/stdvar_over_time``;
``abs ceil floor round sgn sqrt exp ln log2 log10 clamp clamp_min clamp_max scalar vector
time``. Anything else valid in PromQL (``topk``, ``histogram_quantile``, ``label_replace``,
``absent``, ``group_left``, subqueries, ``@`` ...) raises :class:`UnsupportedError` naming it.

Tested two ways (``tests/promql``): Prometheus v2.42.0's own ``promql/testdata`` files,
ported as data (every eval passes or is unsupported); and a differential test that runs 112
queries on the same samples in a real Prometheus and compares the answers. This package imports
nothing else from the simulator, so tests and docs can use it alone.
"""

from kgpu.promql.ast import Expr, max_range_ms, metric_names
from kgpu.promql.errors import PromQLError, UnsupportedError
from kgpu.promql.evaluator import Sample, Scalar, Value, Vector, evaluate, query
from kgpu.promql.history import LOOKBACK_MS, MAX_RANGE_MS, History, Labels, Series, parse_exposition
from kgpu.promql.parser import parse

__all__ = [
    "LOOKBACK_MS",
    "MAX_RANGE_MS",
    "Expr",
    "History",
    "Labels",
    "PromQLError",
    "Sample",
    "Scalar",
    "Series",
    "UnsupportedError",
    "Value",
    "Vector",
    "evaluate",
    "max_range_ms",
    "metric_names",
    "parse",
    "parse_exposition",
    "query",
]
