"""Differential test: kgpu's PromQL evaluator against a real Prometheus on the same samples.

Every query of ``data/differential.yaml`` (plus the KEDA queries of the guide's scale-gpu.yaml)
is evaluated at four times by both; the answers must agree on the result type, the label sets
and the values, or both must fail with the same message. See conftest.py for the samples.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from promql_backfill import EVAL_TIMES, PrometheusAPI

from kgpu.promql import History, PromQLError, Scalar, UnsupportedError, query

pytestmark = pytest.mark.slow

DATA = Path(__file__).parent / "data" / "differential.yaml"
CASES: list[dict[str, Any]] = [
    c if isinstance(c, dict) else {"query": c} for c in yaml.safe_load(DATA.read_text())["queries"]
]


def _same_value(ours: float, theirs: str) -> bool:
    want = float(theirs)
    if math.isnan(want) or math.isnan(ours):
        return math.isnan(want) and math.isnan(ours)
    if math.isinf(want) or math.isinf(ours):
        return want == ours
    return math.isclose(ours, want, rel_tol=1e-9, abs_tol=1e-12)


def _compare(promql: str, history: History, api: PrometheusAPI, at: float) -> str | None:
    """What differs between kgpu and Prometheus for ``promql`` at ``at``, or None."""
    theirs = api.query(promql, at)
    try:
        ours = query(history, promql, at)
    except PromQLError as exc:
        if theirs["status"] == "error" and exc.message == theirs["error"]:
            return None
        return f"kgpu failed ({exc}); Prometheus answered {theirs}"
    if theirs["status"] == "error":
        return f"Prometheus failed ({theirs['error']}); kgpu answered {ours}"
    data = theirs["data"]
    if isinstance(ours, Scalar):
        if data["resultType"] != "scalar":
            return f"kgpu gave a scalar, Prometheus a {data['resultType']}"
        if not _same_value(ours.value, data["result"][1]):
            return f"scalar {ours.value} != {data['result'][1]}"
        return None
    if data["resultType"] != "vector":
        return f"kgpu gave a vector, Prometheus a {data['resultType']}"
    mine = {frozenset(s.metric.items()): s.value for s in ours}
    real = {frozenset(r["metric"].items()): r["value"][1] for r in data["result"]}
    if mine.keys() != real.keys():
        extra = [dict(k) for k in mine.keys() - real.keys()]
        missing = [dict(k) for k in real.keys() - mine.keys()]
        return f"label sets differ: kgpu only {extra}, Prometheus only {missing}"
    wrong = {str(dict(k)): (mine[k], real[k]) for k in mine if not _same_value(mine[k], real[k])}
    return f"values differ (kgpu, Prometheus): {wrong}" if wrong else None


@pytest.mark.parametrize("case", CASES, ids=[c["query"] for c in CASES])
def test_query_agrees_with_prometheus(
    case: dict[str, Any], diff_history: History, prometheus_api: PrometheusAPI
) -> None:
    promql = case["query"]
    problems = {}
    errors = 0
    for at in EVAL_TIMES:
        if prometheus_api.query(promql, at)["status"] == "error":
            errors += 1
        problem = _compare(promql, diff_history, prometheus_api, at)
        if problem:
            problems[at] = problem
    assert not problems, f"{promql}:\n" + "\n".join(f"  t={t}: {p}" for t, p in problems.items())
    if case.get("error"):
        assert errors, f"{promql}: expected Prometheus to refuse it at some time"


def test_keda_queries_of_the_guide_agree(
    acceptance: Path, diff_history: History, prometheus_api: PrometheusAPI
) -> None:
    doc = yaml.safe_load((acceptance / "vks-samples" / "scale-gpu.yaml").read_text())
    queries = [t["metadata"]["query"] for t in doc["spec"]["triggers"]]
    assert len(queries) == 2
    for promql in queries:
        for at in EVAL_TIMES:
            assert _compare(promql, diff_history, prometheus_api, at) is None, (promql, at)
        # and the answer moves with the load: more replicas, more busy GPUs
        busy = [query(diff_history, promql, at) for at in (EVAL_TIMES[0], EVAL_TIMES[1])]
        assert all(isinstance(v, list) and len(v) == 1 for v in busy)


def test_the_history_exercises_what_it_claims(diff_history: History) -> None:
    """Guard against a history that makes every comparison trivial (empty answers agree)."""
    names = {dict(s.labels)["__name__"] for s in diff_history.series()}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"} <= names
    assert len(diff_history) > 100
    promql = "increase(http_requests_total{code='200',instance='a:80'}[15m])"
    increase = query(diff_history, promql, EVAL_TIMES[1])
    assert isinstance(increase, list) and increase[0].value > 0  # across the counter reset
    busy = [query(diff_history, "count(DCGM_FI_DEV_GPU_UTIL{pod!=''})", at) for at in EVAL_TIMES]
    # 3 replicas at 10 minutes; at 20 minutes the pod removed at 17.5 minutes is still inside
    # the 5-minute lookback (backfill has no staleness markers); none after 25 minutes
    assert [v[0].value if isinstance(v, list) and v else None for v in busy] == [3, 2, 2, None]


SYNTAX = yaml.safe_load(DATA.read_text())


@pytest.mark.parametrize("promql", SYNTAX["invalid"])
def test_both_reject_what_is_not_promql(
    promql: str, diff_history: History, prometheus_api: PrometheusAPI
) -> None:
    answer = prometheus_api.query(promql, EVAL_TIMES[1])
    assert answer["status"] == "error" and answer["errorType"] == "bad_data", answer
    with pytest.raises(PromQLError) as caught:
        query(diff_history, promql, EVAL_TIMES[1])
    assert not isinstance(caught.value, UnsupportedError), caught.value
    assert caught.value.position >= 0 and str(caught.value)[0].isdigit()  # line:column


@pytest.mark.parametrize("promql", SYNTAX["unsupported"])
def test_unsupported_means_valid_promql_kgpu_does_not_evaluate(
    promql: str, diff_history: History, prometheus_api: PrometheusAPI
) -> None:
    assert prometheus_api.query(promql, EVAL_TIMES[1])["status"] == "success"
    with pytest.raises(UnsupportedError, match="unsupported by kgpu's PromQL evaluator"):
        query(diff_history, promql, EVAL_TIMES[1])
