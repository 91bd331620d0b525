"""Autoscaling settings from users are bounded (issue 28): a KEDA threshold the HPA cannot hold,
a PromQL range no simulated Prometheus keeps, a priority-expander regex that backtracks; each
is refused with the limit or answered in linear time, never a crash or a hang."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from kgpu.autoscaling.ca_settings import CASettings, parse_settings
from kgpu.autoscaling.cluster_autoscaler import NodeGroup, Option, best_option
from kgpu.autoscaling.keda import parse_scaled_object
from kgpu.errors import FieldError


def scaled_object(query: str = "avg(DCGM_FI_DEV_GPU_UTIL)", threshold: Any = "0.5") -> Any:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "so"},
        "spec": {
            "scaleTargetRef": {"name": "app"},
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": "http://prometheus:9090",
                        "query": query,
                        "threshold": threshold,
                    },
                }
            ],
        },
    }


def _problems(doc: Any) -> str:
    with pytest.raises(FieldError) as info:
        parse_scaled_object(doc)
    return str(info.value)


@pytest.mark.parametrize("threshold", ["1e308", "-1e308", "nan", "inf", "9223372036854776"])
def test_a_threshold_beyond_int64_milli_units_is_refused(threshold: str) -> None:
    # issue 28: validate said ok to 1e308, then sim crashed (OverflowError) making the HPA
    message = _problems(scaled_object(threshold=threshold))
    assert "spec.triggers[0].metadata.threshold" in message
    assert "milli-units as a 64-bit integer" in message


def test_a_threshold_go_cannot_parse_is_refused_as_go_says() -> None:
    message = _problems(scaled_object(threshold="1e400"))
    assert 'strconv.ParseFloat: parsing "1e400": value out of range' in message


def test_the_largest_threshold_an_hpa_holds_is_accepted() -> None:
    so = parse_scaled_object(scaled_object(threshold="9e15"))
    assert so.triggers[0].threshold == 9e15


@pytest.mark.parametrize(
    "query", ["avg_over_time(x[10000y])", "x offset 7h", "rate(x[6h] offset 1m)"]
)
def test_a_query_reading_beyond_the_simulated_retention_is_refused(query: str) -> None:
    # issue 28: [10000y] took 79 s and grew in memory
    message = _problems(scaled_object(query=query))
    assert "spec.triggers[0].metadata.query" in message
    assert "keeps 6 h of samples" in message


def test_a_six_hour_range_is_accepted() -> None:
    parse_scaled_object(scaled_object(query="rate(x[5h55m] offset 5m)"))


def test_priority_expander_regexes_are_re2() -> None:
    with pytest.raises(FieldError) as info:
        parse_settings({"expander-priorities": {10: ["(a)\\1"]}})
    assert "expander-priorities: priority 10: bad regex '(a)\\\\1': invalid escape" in str(
        info.value
    )


def test_a_backtracking_priority_regex_picks_in_linear_time() -> None:
    name = "a" * 3000
    groups = {name: NodeGroup(name, 0, 5, {"nvidia.com/gpu": 1}), "b": NodeGroup("b", 0, 5, {})}
    options = [Option(name, 1, ()), Option("b", 1, ())]
    settings = CASettings(
        expander=("priority",), expander_priorities={50: ["(a|aa)*c"], 10: ["^b$"]}
    )
    start = time.perf_counter()
    assert best_option(options, groups, settings, random.Random(0)).group == "b"
    assert time.perf_counter() - start < 1.0  # Python's re: (a|aa)*c on 3,000 a's never ends
