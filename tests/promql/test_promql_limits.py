"""PromQL from users is bounded (issue 28): nesting, length and regexes never turn into a
RecursionError, an OverflowError or a hang, and the errors say what to change.

Label-matcher regexes are RE2 as Prometheus compiles them (``^(?:...)$``, Go's syntax) and run
in linear time: ``(a*)*b`` against a long value answers at once where Python's ``re`` would
backtrack for minutes."""

from __future__ import annotations

import time

import pytest

from kgpu.promql import History, PromQLError, Scalar, parse, query
from kgpu.promql.parser import MAX_DEPTH, MAX_QUERY


def _error(text: str) -> str:
    with pytest.raises(PromQLError) as info:
        parse(text)
    return str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "(" * 2000 + "1" + ")" * 2000,  # issue 28: RecursionError in the parser
        " + ".join(["1"] * 5000),  # issue 28: RecursionError in ast (type, walk)
        "-" * 5000 + "1",
        " ^ ".join(["2"] * 5000),  # right-associative: the parser's own recursion
        "sum(" * 1000 + "x" + ")" * 1000,
        "(" * 100 + " + ".join(["x"] * 100) + ")" * 100,  # each fits, both do not
    ],
    ids=["parens", "chain", "signs", "power", "aggregations", "parens-around-chain"],
)
def test_deep_queries_are_refused_with_the_limit(text: str) -> None:
    message = _error(text)
    assert f"nests more than {MAX_DEPTH} levels deep" in message
    assert "simplify it" in message


def test_a_query_at_the_depth_limit_still_evaluates() -> None:
    text = "(" * (MAX_DEPTH - 2) + "1 + 2" + ")" * (MAX_DEPTH - 2)
    assert query(History(), text, 0.0) == Scalar(3.0)
    chain = " + ".join(["1"] * MAX_DEPTH)
    assert query(History(), chain, 0.0) == Scalar(float(MAX_DEPTH))


def test_a_query_longer_than_the_limit_is_refused() -> None:
    message = _error("x" * (MAX_QUERY + 1))
    assert f"kgpu parses at most {MAX_QUERY:,}" in message


def _history(value: str) -> History:
    history = History()
    history.append({"__name__": "up", "pod": value}, 0.0, 1.0)
    return history


def test_a_backtracking_matcher_answers_in_linear_time() -> None:
    history = _history("a" * 5000)
    start = time.perf_counter()
    assert query(history, 'up{pod=~"(a*)*b"}', 1.0) == []
    assert query(history, 'count(up{pod!~"(a|aa)*c"})', 1.0)[0].value == 1.0
    assert time.perf_counter() - start < 1.0  # Python's re: minutes


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("a{1000}{1000}", "bad repetition operator"),  # issue 28: OverflowError in re
        ("a{1001}", "invalid repetition size"),
        ("(a)\\\\1", "invalid escape sequence"),  # backreferences are not RE2
        ("(?<=a)b", "invalid perl operator"),  # nor lookbehind
        ("[", "missing ]"),
    ],
)
def test_patterns_re2_refuses_are_parse_errors(pattern: str, words: str) -> None:
    message = _error(f'x{{a=~"{pattern}"}}')
    assert message.startswith("1:6: error parsing regexp")
    assert words in message


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [
        ("a|b", "ab", False),  # anchored whole: ^(?:a|b)$
        ("a|b", "b", True),
        ("(?i)GPU", "gpu", True),
        ("x(?i)gpu", "xGPU", True),  # RE2 takes flags mid-pattern
        ("\\\\pL+", "héllo", True),  # Unicode classes
        ("[[:digit:]]+", "123", True),  # POSIX classes
        ("a)|(b", "a-then-anything", True),  # as Prometheus reads ^(?:a)|(b)$
    ],
)
def test_matchers_have_prometheus_meaning(pattern: str, value: str, matches: bool) -> None:
    found = query(_history(value), f'up{{pod=~"{pattern}"}}', 1.0)
    assert bool(found) is matches


@pytest.mark.parametrize("text", ["²", "1²", "x + ³"])
def test_unicode_digits_are_not_numbers(text: str) -> None:
    # found by tests/fuzz/test_fuzz_surfaces.py: "²" passed str.isdigit(), then the number
    # pattern refused it and an assertion escaped
    assert "unexpected character" in _error(text)
