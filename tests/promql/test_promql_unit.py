"""What a user of kgpu's PromQL notices without a Prometheus at hand: scrapes and staleness,
the lookback edge, retention, where an error points, and the package standing alone."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from kgpu.promql import (
    History,
    PromQLError,
    Scalar,
    UnsupportedError,
    max_range_ms,
    metric_names,
    parse,
    parse_exposition,
    query,
)

GPU = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "pod": "app-1", "namespace": "default"}


def values(result: object) -> dict[str, float]:
    assert isinstance(result, list)
    return {",".join(f"{k}={v}" for k, v in s.labels): s.value for s in result}


def test_a_series_that_leaves_a_scrape_goes_stale_at_once() -> None:
    history = History()
    target = {"job": "dcgm", "instance": "node-0:9400"}
    history.scrape(0, [(GPU, 80.0)], target)
    history.scrape(15, [(GPU, 90.0)], target)
    assert query(history, "DCGM_FI_DEV_GPU_UTIL", 20) != []
    history.scrape(30, [], target)  # the pod is gone: its series is not exposed any more
    assert query(history, "DCGM_FI_DEV_GPU_UTIL", 30) == []  # not five minutes later
    # range functions still see the samples before the marker, and skip the marker itself
    assert values(query(history, "max_over_time(DCGM_FI_DEV_GPU_UTIL[1m])", 30)) == {
        "gpu=0,instance=node-0:9400,job=dcgm,namespace=default,pod=app-1": 90.0
    }
    assert values(query(history, "count_over_time(DCGM_FI_DEV_GPU_UTIL[1m])", 30)) == {
        "gpu=0,instance=node-0:9400,job=dcgm,namespace=default,pod=app-1": 2.0
    }
    # the target itself answered every time
    up = query(history, "up", 30)
    assert [s.value for s in up] == [1.0]  # type: ignore[union-attr]


def test_the_exporters_labels_win_over_the_targets() -> None:
    history = History()
    history.scrape(0, [({**GPU, "job": "from-exporter"}, 1.0)], {"job": "dcgm", "instance": "i"})
    (sample,) = query(history, "DCGM_FI_DEV_GPU_UTIL", 0)  # type: ignore[misc]
    assert sample.metric["job"] == "from-exporter" and sample.metric["instance"] == "i"


@pytest.mark.parametrize(
    ("age_s", "seen"), [(0, True), (299.999, True), (300, True), (300.001, False)]
)
def test_the_lookback_window_is_five_minutes_closed(age_s: float, seen: bool) -> None:
    history = History()
    history.append(GPU, 1000, 5.0)
    assert (query(history, "DCGM_FI_DEV_GPU_UTIL", 1000 + age_s) != []) is seen


def test_range_windows_include_both_edges() -> None:
    history = History()
    for t in (0, 60, 120):
        history.append(GPU, t, float(t))
    assert values(query(history, "count_over_time(DCGM_FI_DEV_GPU_UTIL[2m])", 120)) == {
        "gpu=0,namespace=default,pod=app-1": 3.0
    }


def test_retention_bounds_memory() -> None:
    history = History(retention_s=600)
    for t in range(0, 3600, 15):
        history.append(GPU, t, 1.0)
    history.trim(now=3600)
    (series,) = list(history.series())
    assert series.times[0] >= (3600 - 600) * 1000 and len(series.times) == 40
    history.trim(now=10_000)
    assert len(history) == 0


def test_samples_must_arrive_in_time_order() -> None:
    history = History()
    history.append(GPU, 10, 1.0)
    history.append(GPU, 10, 2.0)  # the same time again: the newer value wins
    assert list(values(query(history, "DCGM_FI_DEV_GPU_UTIL", 10)).values()) == [2.0]
    with pytest.raises(ValueError, match="out-of-order sample"):
        history.append(GPU, 5, 1.0)
    with pytest.raises(ValueError, match="needs a metric name"):
        history.append({"gpu": "0"}, 20, 1.0)


def test_the_text_exposition_keeps_names_as_written() -> None:
    text = (
        "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"
        'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",pod=""} 1.5e+06\n'
        'weird{path="a\\"b\\\\c\\nd"} NaN\n'
        "plain +Inf 1700000000000\n"
    )
    samples = parse_exposition(text)
    assert samples[0] == (
        {"__name__": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "gpu": "0", "pod": ""},
        1.5e6,
    )
    assert samples[1][0]["path"] == 'a"b\\c\nd' and math.isnan(samples[1][1])
    assert samples[2] == ({"__name__": "plain"}, math.inf)
    with pytest.raises(ValueError, match="line 1: not a sample line"):
        parse_exposition("{} 1\n")
    with pytest.raises(ValueError, match="bad value"):
        parse_exposition("x one\n")


@pytest.mark.parametrize(
    ("promql", "where", "message"),
    [
        ("sum(DCGM_FI_DEV_GPU_UTIL", "1:25", "unexpected end of input"),
        ("sum(DCGM_FI_DEV_GPU_UTIL)\n  / count(DCGM_FI_DEV_GPU_UTIL) /", "2:34", "end of input"),
        ("avg(x) / bool 2", "1:10", "bool modifier can only be used on comparison operators"),
        ("rate(x[5m]) + y[5m]", "1:13", "binary expression must contain only scalar"),
        ('x{a=~"["}', "1:6", 'error parsing regexp "["'),
        ("x[1m5h]", "1:3", 'not a valid duration string: "1m5h"'),
        ("x[0s]", "1:3", "duration must be greater than 0"),
        ("foo(x)", "1:1", 'unknown function with name "foo"'),
        ("x + 'unterminated", "1:5", "unterminated quoted string"),
        ("x ! y", "1:3", 'unexpected character after "!"'),
        ('x{a="\\q"}', "1:6", "unknown escape sequence \\q"),
    ],
)
def test_errors_point_at_the_problem(promql: str, where: str, message: str) -> None:
    with pytest.raises(PromQLError) as caught:
        parse(promql)
    assert str(caught.value).startswith(where + ": "), str(caught.value)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("promql", "part"),
    [
        ("histogram_quantile(0.9, rate(x_bucket[5m]))", 'function "histogram_quantile"'),
        ("topk(1, x)", 'aggregation "topk"'),
        ("x * on(a) group_left(b) y", "group_left"),
        ("avg_over_time(x[10m:1m])", "subqueries"),
        ("x @ end()", "the @ modifier"),
        ("x[5m]", "a range vector as the query's result"),
        ('"text"', "a string as the query's result"),
    ],
)
def test_unsupported_names_the_part(promql: str, part: str) -> None:
    with pytest.raises(UnsupportedError, match="unsupported by kgpu's PromQL evaluator") as e:
        parse(promql)
    assert part in str(e.value)


@pytest.mark.parametrize(
    ("promql", "expected"),
    [
        ("1 + 2 * 3", 7.0),
        ("2 ^ 3 ^ 2", 512.0),
        ("-2 ^ 2", -4.0),
        ("(1 + 2) * 3", 9.0),
        ("10 % 3 + 2 > bool 2", 1.0),
        ("1 / 0", math.inf),
        ("-1 / 0", -math.inf),
        ("0x10 + .5 + 1e1", 26.5),
        ("2 == bool 2 or 1", None),  # `or` needs vectors: a type error, checked below
    ],
)
def test_scalar_arithmetic(promql: str, expected: float | None) -> None:
    if expected is None:
        with pytest.raises(PromQLError, match="set operator"):
            parse(promql)
        return
    assert query(History(), promql, 0) == Scalar(expected)


def test_selector_rules() -> None:
    with pytest.raises(PromQLError, match="at least one non-empty matcher"):
        parse('{pod=~".*"}')
    with pytest.raises(PromQLError, match="metric name must not be set twice"):
        parse('x{__name__="y"}')
    expr = parse('rate({__name__="DCGM_FI_DEV_GPU_UTIL", gpu="0"}[5m] offset 1m) + time()')
    assert metric_names(expr) == {"DCGM_FI_DEV_GPU_UTIL"}
    assert max_range_ms(expr) == 6 * 60_000
    assert metric_names(parse('{__name__=~"DCGM_.*"}')) == set()  # no fixed name: keep all


def test_keywords_and_aggregators_can_be_label_names() -> None:
    history = History()
    history.append({"__name__": "x", "on": "a", "sum": "b"}, 0, 1.0)
    assert values(query(history, "SUM BY (on, sum) (x)", 0)) == {"on=a,sum=b": 1.0}
    assert values(query(history, 'x{bool="", on="a"}', 0)) == {"__name__=x,on=a,sum=b": 1.0}


def test_the_package_imports_nothing_else_from_the_simulator() -> None:
    package = Path(__file__).resolve().parents[3] / "src" / "kgpu" / "sim" / "promql"
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            for module in modules:
                if module.startswith("kgpu"):
                    assert module.startswith("kgpu.promql"), f"{path.name} imports {module}"
