"""The input surfaces wave 2 added (issue 28), fuzzed where they are parsed, with what each run
may cost per byte of input (:class:`tests.fuzz.harness.Budget`: CPU time, output, memory).

- PromQL as KEDA triggers carry it: queries grown from a grammar (selectors, matchers, ranges,
  offsets, operators, calls, aggregations) mixed with what broke it (nesting thousands deep,
  long chains, backtracking and oversized regexes, ``[10000y]``), parsed and evaluated in
  process; then whole ScaledObjects through ``kgpu validate``.
- ``expect`` files' ``messageRegex`` compiled and matched against long messages, in process.
- Autoscaling settings: the t4-keda scenario with cluster-autoscaler flags, thresholds and
  advances drawn from their edges (``scan-interval`` 1 ns, a week, ``1e308``), through
  ``kgpu validate`` and a few through ``kgpu sim``.
- ``kgpu allocate`` with capacity requests, request policies and CEL arithmetic drawn from
  quantities, non-quantities and divisions by zero.
- counters CSVs through ``kgpu metrics --once``, with the per-byte budget.

``KGPU_FUZZ_EXAMPLES=N`` runs N examples per test with fresh randomness (docs/testing.md).
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kgpu.promql import History, PromQLError, evaluate, parse
from kgpu.sim.expect.checks import EventCheck
from kgpu.sim.plugins import Event
from kgpu.sim.scenario_parts import Errors

from .harness import Budget, Outcome, run_cli
from .mutate import ODD_STRINGS
from .test_fuzz_commands import COUNTERS_SEED, EXAMPLES, _check, _docs, _settings, mutated_csv

#: Library calls in process: a query or a regex of n bytes may take 0.2 s + 1 ms per byte of
#: CPU (under tracemalloc, which triples Python's cost), 16 MiB + 4 KiB per byte of memory.
IN_PROCESS = Budget(cpu_base=0.2, cpu_per_byte=0.001)
#: A CLI run: its start-up (typer, rich, loading the schemas) is the base.
CLI = Budget(cpu_base=2.0, cpu_per_byte=0.001)
#: ``kgpu sim`` simulates time, whatever the file's size: seconds, or refused with the limit.
SIM = Budget(cpu_base=8.0, cpu_per_byte=0.0, output_base=256 << 10)


@pytest.fixture(scope="module")
def save_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("KGPU_FUZZ_SAVE")
    return Path(target) if target else tmp_path_factory.mktemp("fuzz-failures")


@pytest.fixture(autouse=True)
def _in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a mutated relative path never lands in the checkout


# -- what broke PromQL and regexes before (issue 28), and their neighbours ----------------------
HOSTILE_REGEXES = [
    "(a*)*b",
    "(a|aa)*c",
    "(x+x+)+y",
    "a{1000}{1000}",
    "a{1001}",
    "(a{999}){999}",
    "((a{100}){100}){100}",
    "(a)\\1",
    "(?<=a)b",
    "(?=a)",
    "a++",
    "[",
    "(",
    ")",
    "a)|(b",
    "(?i)gpu(?-i)X",
    "(?U)a+",
    "\\pL+",
    "[[:alpha:]]+",
    "\\C",
    "\\z",
    "(?P<n>a)",
    "x" * 20000,
    "(" * 5000 + ")" * 5000,
    "a|" * 3000 + "b",
    "\x00",
    ".*",
    "",
]
DURATIONS = ["1ms", "5m", "1h30m", "6h", "6h1m", "10000y", "0s", "5m1h", "9" * 30 + "y", "1y"]
OPERATORS = ["+", "-", "*", "/", "%", "^", "==", "!=", "> bool", "and", "or", "unless", "atan2"]
NAMES = ["DCGM_FI_DEV_GPU_UTIL", "up", "x", "nan", "sum", "by"]


def _regex() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HOSTILE_REGEXES),
        st.text(alphabet="a()|*+?{}[]^$\\.,019:iPL<>=!-", max_size=40),
    )


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@st.composite
def _selector(draw: Callable[..., Any]) -> str:
    name = draw(st.sampled_from(NAMES))
    matchers = draw(
        st.lists(
            st.builds(
                lambda label, op, value: f"{label}{op}{_quoted(value)}",
                st.sampled_from(["pod", "gpu", "__name__", "Hostname"]),
                st.sampled_from(["=", "!=", "=~", "!~"]),
                st.one_of(_regex(), st.sampled_from(ODD_STRINGS)),
            ),
            max_size=3,
        )
    )
    text = name + ("{" + ", ".join(matchers) + "}" if matchers or name == "x" else "")
    if draw(st.booleans()):
        text += f" offset {draw(st.sampled_from(DURATIONS))}"
    return text


@st.composite
def _deep(draw: Callable[..., Any]) -> str:
    """Nesting or chains from 100 to 5,000 deep (Python's recursion ends near 1,000)."""
    n = draw(st.integers(100, 5_000))
    kind = draw(st.sampled_from(["paren", "chain", "sign", "power", "call", "agg"]))
    if kind == "paren":
        return "(" * n + "1" + ")" * n
    if kind == "chain":
        return " + ".join(["x"] * n)
    if kind == "sign":
        return "-" * n + "1"
    if kind == "power":
        return " ^ ".join(["2"] * n)
    if kind == "call":
        return "abs(" * n + "x" + ")" * n
    return "sum(" * n + "x" + ")" * n


def _leaf() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(["1", "0.5", "-Inf", "NaN", "0x1F", "1e308", "time()"]),
        _selector(),
        st.builds(
            lambda f, s, d: f"{f}({s}[{d}])",
            st.sampled_from(["rate", "avg_over_time", "increase", "changes", "max_over_time"]),
            _selector(),
            st.sampled_from(DURATIONS),
        ),
    )


QUERIES = st.one_of(
    st.recursive(
        _leaf(),
        lambda inner: st.one_of(
            st.builds(lambda a, op, b: f"{a} {op} {b}", inner, st.sampled_from(OPERATORS), inner),
            st.builds(lambda a: f"({a})", inner),
            st.builds(
                lambda agg, a: f"{agg}({a})",
                st.sampled_from(["sum", "avg", "count", "max", "stddev", "topk", "abs"]),
                inner,
            ),
            st.builds(lambda a: f"-{a}", inner),
        ),
        max_leaves=12,
    ),
    _deep(),
    st.text(max_size=60),
)


def _history() -> History:
    history = History(retention_s=3600)
    for t in range(0, 600, 15):
        for pod in ("a" * 3000, "gpu-0", "x\x00y"):
            history.append({"__name__": "DCGM_FI_DEV_GPU_UTIL", "pod": pod}, float(t), t % 7)
            history.append({"__name__": "up", "pod": pod, "gpu": "0"}, float(t), 1.0)
    return history


HISTORY = _history()


def _measured(call: Callable[[], str], size: int, what: str) -> None:
    """Run ``call`` (it returns the text a user would see) under tracemalloc; fail on an
    exception it let out or on a cost over :data:`IN_PROCESS`."""
    tracemalloc.start()
    start = time.process_time()
    try:
        shown = call()
    finally:
        cpu = time.process_time() - start
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    excess = IN_PROCESS.excess(size, cpu=cpu, output=len(shown), memory=peak)
    assert not excess, f"{excess}: {what[:300]!r}"


@_settings(ci=60)
@given(text=QUERIES)
def test_promql_queries_parse_and_evaluate_within_budget(text: str) -> None:
    def run() -> str:
        try:
            expr = parse(text)
            evaluate(expr, HISTORY, 600.0, text)
        except PromQLError as exc:  # the only way out: an error with line:column
            return str(exc)
        return ""

    _measured(run, len(text.encode("utf-8", "surrogatepass")), text)


@_settings(ci=40)
@given(pattern=_regex(), message=st.sampled_from(["a" * 5000, "x" * 20000 + "y", "", "ü\x00"]))
def test_expect_message_regexes_within_budget(pattern: str, message: str) -> None:
    def run() -> str:
        err = Errors("e.expect.yaml")
        check = EventCheck.parse({"messageRegex": pattern}, "events[0]", err)
        if isinstance(check, EventCheck):
            check.matches(Event("Warning", "FailedScheduling", "Pod/default/p", message))
        return "\n".join(str(p) for p in err.problems)

    _measured(run, len(pattern.encode()) + len(message), pattern)


def _judged(outcome: Outcome, data: bytes, target: Path, save_dir: Path, budget: Budget) -> None:
    if not outcome.failure:
        outcome.failure = budget.excess(
            len(data), cpu=outcome.cpu_seconds, output=len(outcome.stdout) + len(outcome.stderr)
        )
    _check(outcome, data, target, save_dir)


KEDA = EXAMPLES / "autoscaling" / "t4-keda.yaml"
SCALED_OBJECT = _docs(KEDA.parent / "scale-gpu.yaml")[0]
THRESHOLDS = ["0.5", "1e308", "-1e308", "1e400", "nan", "inf", "9e15", "0", "-0", "1_000", "0x10"]


@st.composite
def _scaled_object(draw: Callable[..., Any]) -> dict[str, Any]:
    doc = copy.deepcopy(SCALED_OBJECT)
    meta = doc["spec"]["triggers"][0]["metadata"]
    meta["query"] = draw(QUERIES.filter(lambda q: "\x00" not in q and "\ud800" not in q))
    meta["threshold"] = draw(st.sampled_from(THRESHOLDS))
    if draw(st.booleans()):
        doc["spec"]["pollingInterval"] = draw(st.sampled_from([1, 0, -1, 30, 2**31, 10**20]))
    return doc


def _dump(doc: Any) -> bytes:
    return yaml.safe_dump(doc, allow_unicode=True, width=10**9).encode()


@_settings(ci=20)
@given(doc=_scaled_object())
def test_keda_triggers_validate_within_budget(
    doc: dict[str, Any], save_dir: Path, tmp_path: Path
) -> None:
    target = tmp_path / "scale-gpu.yaml"
    data = _dump(doc)
    target.write_bytes(data)
    outcome = run_cli(["validate", str(target)], roots=[tmp_path])
    _judged(outcome, data, target, save_dir, CLI)


CA_VALUES: dict[str, list[Any]] = {
    "scan-interval": ["1ns", "1ms", "10s", "0s", "-1s", "1e3h", 1, "87600h"],
    "scale-down-unneeded-time": ["0s", "10m", "1ns", "1000000h"],
    "provisioning-delay": ["0s", "1ns", "1h", "-1s"],
    "max-nodes-total": [0, 1, 2**63, -1],
    "expander": ["priority", "priority,least-waste", "random", "price", ""],
    "expander-priorities": [
        {10: ["t4"], 50: ["(a|aa)*c"]},
        {1: ["a{1000}{1000}"]},
        {1: ["(a)\\1"]},
        {2**70: ["t4"]},
        {1: ["x" * 20000]},
    ],
    "scale-down-gpu-utilization-threshold": [0.5, 1e308, -1, float("nan")],
}
ADVANCES = ["20m", "168h", "570m", "23h", "1ms", "8760h", 10**12, "1e308s"]


@st.composite
def _autoscaling(draw: Callable[..., Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    scenario = copy.deepcopy(_docs(KEDA)[0])
    keys = draw(st.lists(st.sampled_from(sorted(CA_VALUES)), max_size=4, unique=True))
    scenario["clusterAutoscaler"] = {k: draw(st.sampled_from(CA_VALUES[k])) for k in keys}
    scenario["steps"][-1] = {"advance": draw(st.sampled_from(ADVANCES))}
    scenario["nodes"][0]["autoscale"] = draw(
        st.sampled_from([{"min": 1, "max": 3}, {"min": 0, "max": 20_000}, {"min": 3, "max": 1}])
    )
    so = copy.deepcopy(SCALED_OBJECT)
    so["spec"]["triggers"][0]["metadata"]["threshold"] = draw(st.sampled_from(THRESHOLDS))
    return scenario, so


def _autoscaling_run(
    command: str, drawn: tuple[dict[str, Any], dict[str, Any]], save_dir: Path, budget: Budget
) -> None:
    scenario, so = drawn
    for copied in _keda_folder():
        data = _dump(scenario)
        copied.write_bytes(data)
        (copied.parent / "scale-gpu.yaml").write_bytes(_dump(so))
        outcome = run_cli([command, str(copied)], roots=[copied.parent])
        _judged(outcome, data, copied, save_dir, budget)


def _keda_folder() -> Iterator[Path]:
    """A copy of the example's folder (the scenario and the two manifests it applies)."""
    with tempfile.TemporaryDirectory(prefix="kgpu-fuzz-") as tmp:
        for path in KEDA.parent.glob("*.yaml"):
            shutil.copy(path, tmp)
        yield Path(tmp) / KEDA.name


@_settings(ci=15)
@given(drawn=_autoscaling())
def test_autoscaling_settings_validate_within_budget(
    drawn: tuple[dict[str, Any], dict[str, Any]], save_dir: Path
) -> None:
    _autoscaling_run("validate", drawn, save_dir, CLI)


@_settings(ci=4)
@given(drawn=_autoscaling())
def test_autoscaling_settings_simulate_within_budget(
    drawn: tuple[dict[str, Any], dict[str, Any]], save_dir: Path
) -> None:
    _autoscaling_run("sim", drawn, save_dir, SIM)


ALLOCATE = EXAMPLES / "dra" / "allocate-gb200.yaml"
QUANTITIES = ["1Gi", "180Gi", "0", "-1", "1e3", "lots", "1 Gi", "", "0.5m", "1e400", 2**70, 1.5]
CEL = [
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('180Gi')) >= 0",
    "7 / 0 == 1",
    "7 % 0 == 1",
    "9223372036854775807 + 1 > 0",
    "-9223372036854775808 / -1 > 0",
    "1.0 / 0.0 > 0.0",
    "size('x') / (size('x') - 1) == 0",
]


@st.composite
def _allocate(draw: Callable[..., Any]) -> dict[str, Any]:
    doc: dict[str, Any] = copy.deepcopy(_docs(ALLOCATE)[0])
    device = doc["slices"][0]["spec"]["devices"][draw(st.integers(0, 3))]
    device["allowMultipleAllocations"] = draw(st.booleans())
    policy: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(["default", "validValues", "validRange"]))):
        if key == "validValues":
            policy[key] = draw(st.lists(st.sampled_from(QUANTITIES), max_size=3))
        elif key == "validRange":
            policy[key] = {
                k: draw(st.sampled_from(QUANTITIES))
                for k in draw(st.lists(st.sampled_from(["min", "max", "step"]), unique=True))
            }
        else:
            policy[key] = draw(st.sampled_from(QUANTITIES))
    if policy:
        device["capacity"]["memory"]["requestPolicy"] = policy
    request = doc["claims"][0]["spec"]["devices"]["requests"][0]["exactly"]
    if draw(st.booleans()):
        request["capacity"] = {"requests": {"memory": draw(st.sampled_from(QUANTITIES))}}
    if draw(st.booleans()):
        request["selectors"] = [{"cel": {"expression": draw(st.sampled_from(CEL))}}]
    return doc


@_settings(ci=12)
@given(doc=_allocate())
def test_allocate_capacity_and_policy_within_budget(
    doc: dict[str, Any], save_dir: Path, tmp_path: Path
) -> None:
    target = tmp_path / "allocate.yaml"
    data = _dump(doc)
    target.write_bytes(data)
    outcome = run_cli(["allocate", str(target)], roots=[tmp_path], allowed_exits=(0, 1, 2, 3))
    _judged(outcome, data, target, save_dir, CLI)


@_settings(ci=10)
@given(data=mutated_csv(COUNTERS_SEED))
def test_counters_csvs_within_budget(data: bytes, save_dir: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="kgpu-fuzz-") as tmp:
        target = Path(tmp) / "counters.csv"
        target.write_bytes(data)
        outcome = run_cli(["metrics", "-m", "t4", "--once", "-f", str(target)], roots=[Path(tmp)])
        # --once prints one scrape: its size is the counters', a few KiB per line of CSV
        _judged(outcome, data, target, save_dir, Budget(cpu_base=2.0, output_per_byte=64))


pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
