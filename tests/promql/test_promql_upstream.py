"""Prometheus' own PromQL tests (v2.42.0 ``promql/testdata``), run on kgpu's evaluator.

The test files are ported as data (``data/prometheus-2.42/*.yaml``, converted mechanically): each
block loads series in promqltest's notation and evaluates instant queries with the expected
samples. Every eval either passes, or is skipped because the query uses a part kgpu reports as
unsupported (``histogram_quantile``, ``topk``, ``label_replace``, ``group_left``, ``@``...):
:class:`UnsupportedError` is the only accepted way out, and how many evals each file skips is
pinned below, so a regression that makes kgpu refuse more shows up.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.promql import History, PromQLError, Scalar, UnsupportedError, query
from kgpu.promql.lexer import tokenize
from kgpu.promql.parser import parse_duration_ms

DATA = Path(__file__).parent / "data" / "prometheus-2.42"

#: Evals each file skips because their query is unsupported (the rest must pass): aggregators
#: topk/bottomk/count_values/quantile; collision and operators group_left/group_right; functions
#: absent/absent_over_time/present_over_time, label_replace/label_join, the calendar functions,
#: quantile_over_time, predict_linear/deriv/holt_winters, timestamp, sort/sort_desc.
SKIPPED = {
    "aggregators": 22,
    "collision": 1,
    "functions": 115,
    "literals": 0,
    "operators": 16,
    "selectors": 0,
    "staleness": 0,
}

_NUMBER = r"[+-]?(?:[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?|Inf|inf|NaN|nan)"
_ITEM = re.compile(rf"^(?:(_)|(stale)|({_NUMBER}))(?:([+-](?:[0-9]*\.?[0-9]+|Inf))?x([0-9]+))?$")


def expand_values(items: list[str]) -> list[float | str | None]:
    """promqltest's series values: ``1 2 _ stale 0+10x3 _x2 5x2`` ('_' = no sample)."""
    out: list[float | str | None] = []
    for item in items:
        match = _ITEM.match(item)
        if match is None:
            raise ValueError(f"bad series value {item!r}")
        blank, stale, number, step, times = match.groups()
        if blank:
            out.extend(["_"] * (int(times) if times else 1))
            continue
        value: float | None = None if stale else float(number)
        if times is None:
            out.append(value)
            continue
        increment = float(step) if step else 0.0
        for _ in range(int(times) + 1):
            out.append(value)
            if value is not None:
                value += increment
    return out


def parse_metric(text: str) -> dict[str, str]:
    """``name{a="b"}`` or ``{a="b"}`` to labels (with ``__name__`` when named)."""
    tokens = tokenize(text)
    labels: dict[str, str] = {}
    i = 0
    if tokens[0].kind == "ident":
        labels["__name__"] = tokens[0].text
        i = 1
    if tokens[i].kind == "op" and tokens[i].text == "{":
        i += 1
        while not (tokens[i].kind == "op" and tokens[i].text == "}"):
            name, eq, value = tokens[i : i + 3]
            assert eq.text == "=" and value.kind == "string", text
            labels[name.text] = value.text
            i += 3
            if tokens[i].text == ",":
                i += 1
        i += 1
    assert tokens[i].kind == "eof", text
    return labels


def split_line(line: str) -> tuple[str, str]:
    """``metric{...} rest`` into the metric part and the rest."""
    depth = 0
    in_string = False
    for i, ch in enumerate(line):
        if ch == '"' and (i == 0 or line[i - 1] != "\\"):
            in_string = not in_string
        elif not in_string and ch == "{":
            depth += 1
        elif not in_string and ch == "}":
            depth -= 1
            if depth == 0:
                return line[: i + 1], line[i + 1 :].strip()
        elif not in_string and depth == 0 and ch.isspace():
            return line[:i], line[i:].strip()
    return line, ""


def load_block(block: dict[str, Any]) -> History:
    points: dict[tuple[tuple[str, str], ...], dict[int, float | None]] = {}
    for load in block.get("loads", []):
        step = parse_duration_ms(load["step"])
        for line in load["series"]:
            metric, values = split_line(line)
            key = tuple(sorted(parse_metric(metric).items()))
            for i, value in enumerate(expand_values(values.split())):
                if value != "_":
                    points.setdefault(key, {})[i * step] = value  # type: ignore[assignment]
    history = History(retention_s=10**9)
    for key, samples in points.items():
        for t_ms in sorted(samples):
            history.append(key, t_ms / 1000, samples[t_ms])
    return history


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def check(history: History, case: dict[str, Any]) -> str | None:
    """What is wrong with kgpu's answer to one eval, or None. Unsupported re-raises."""
    at = parse_duration_ms(str(case["at"])) / 1000
    try:
        got = query(history, case["query"], at)
    except UnsupportedError:
        raise
    except PromQLError as exc:
        return None if case.get("fail") else f"failed: {exc}"
    if case.get("fail"):
        return f"expected an error, got {got}"
    expected = case.get("expect", [])
    if len(expected) == 1 and _is_number(expected[0]):
        if not isinstance(got, Scalar):
            return f"expected scalar {expected[0]}, got {got}"
        return None if _close(got.value, float(expected[0])) else f"{got.value} != {expected[0]}"
    if isinstance(got, Scalar):
        return f"expected a vector {expected}, got scalar {got.value}"
    want: dict[frozenset[tuple[str, str]], float] = {}
    for line in expected:
        metric, value = split_line(line)
        want[frozenset(parse_metric(metric).items())] = float(value)
    mine = {frozenset(s.labels): s.value for s in got}
    if mine.keys() != want.keys():
        return f"series differ: got {sorted(map(dict, mine))}, want {sorted(map(dict, want))}"
    wrong = {str(dict(k)): (mine[k], want[k]) for k in want if not _close(mine[k], want[k])}
    if wrong:
        return f"values differ (got, want): {wrong}"
    if case.get("ordered"):
        order = [frozenset(parse_metric(split_line(line)[0]).items()) for line in expected]
        if [frozenset(s.labels) for s in got] != order:
            return "order differs"
    return None


@dataclass
class Outcome:
    passed: int = 0
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def run_file(name: str) -> Outcome:
    doc = yaml.safe_load((DATA / f"{name}.yaml").read_text())
    outcome = Outcome()
    for block in doc["blocks"]:
        history = load_block(block)
        for case in block["evals"]:
            try:
                problem = check(history, case)
            except UnsupportedError as exc:
                outcome.skipped.append(f"{case['query']}: {exc.message}")
                continue
            if problem:
                outcome.failed.append(f"at {case['at']} {case['query']}: {problem}")
            else:
                outcome.passed += 1
    return outcome


@pytest.mark.parametrize("name", sorted(SKIPPED))
def test_prometheus_promql_tests_pass(name: str) -> None:
    outcome = run_file(name)
    assert not outcome.failed, f"{len(outcome.failed)} failed:\n" + "\n".join(outcome.failed)
    assert outcome.passed > 0
    assert len(outcome.skipped) == SKIPPED[name], "\n".join(outcome.skipped)


@pytest.mark.parametrize(
    ("items", "values"),
    [
        (["0+10x3"], [0.0, 10.0, 20.0, 30.0]),
        (["1", "_", "stale", "2"], [1.0, "_", None, 2.0]),
        (["_x2", "5x1"], ["_", "_", 5.0, 5.0]),
        (["1-1x2", "Inf", "NaN"], [1.0, 0.0, -1.0, math.inf, "nan"]),
    ],
)
def test_series_notation(items: list[str], values: list[Any]) -> None:
    got = expand_values(items)
    assert [("nan" if isinstance(v, float) and math.isnan(v) else v) for v in got] == values
