"""Every CLI command on mutated versions of the shipped examples and the acceptance inputs.

Each test draws a seed file, damages it (:mod:`tests.fuzz.mutate`), writes it into a copy of
its folder (so a scenario still finds the manifests it applies) and runs the command in this
process (:func:`tests.fuzz.harness.run_cli`): exit 0, or exit 1 with an ``error: file: ...``
line; no traceback, no hang, no runaway memory.

The budget is small in CI (the examples below, seeded: the same inputs every run).
``KGPU_FUZZ_EXAMPLES=N`` runs N examples per command with fresh randomness (a long run:
docs/testing.md); a failure saves its input under ``KGPU_FUZZ_SAVE`` (default: the pytest
temporary folder) and prints the command to replay it. Inputs that once failed live in
``tests/data/fuzz`` and run every time (test_fuzz_corpus.py).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .harness import ACCEPTANCE, REPO, Outcome, run_cli
from .mutate import ODD_STRINGS, mutated_json, mutated_yaml, textual

EXAMPLES = REPO / "examples"
SNAPSHOT = REPO / "tests" / "data" / "h100-nvml-snapshot.json"
LONG = "KGPU_FUZZ_EXAMPLES" in os.environ
MACHINES = ("rtx-2080ti", "t4", "p4de.24xlarge", "gb200")


def _budget(ci: int) -> int:
    return int(os.environ.get("KGPU_FUZZ_EXAMPLES", ci))


def _settings(ci: int) -> Any:
    return settings(
        max_examples=_budget(ci),
        deadline=None,
        database=None,
        derandomize=not LONG,
        print_blob=LONG,
        suppress_health_check=list(HealthCheck),
    )


def _docs(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _yaml_seeds() -> list[Path]:
    seeds = sorted(EXAMPLES.rglob("*.yaml"))
    if ACCEPTANCE.is_dir():
        seeds += sorted(ACCEPTANCE.rglob("*.yaml"))
    return seeds


def _scenarios() -> list[Path]:
    out = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        docs = _docs(path)
        if len(docs) == 1 and isinstance(docs[0], dict) and "nodes" in docs[0]:
            out.append(path)
    return out


YAML_SEEDS = {path: _docs(path) for path in _yaml_seeds()}
SCENARIOS = _scenarios()


def _referenced(scenario: Path) -> list[Path]:
    """Files a scenario names (configs, apply), relative to its folder, that exist."""
    doc = _docs(scenario)[0]
    names: list[str] = []
    for key in ("configs", "apply"):
        value = doc.get(key) or []
        names.extend(
            v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)
        )
    for step in doc.get("steps") or []:
        if isinstance(step, dict) and isinstance(step.get("apply"), str | list):
            value = step["apply"]
            names.extend(
                v for v in (value if isinstance(value, list) else [value]) if isinstance(v, str)
            )
    return [p for p in (scenario.parent / n for n in names) if p.is_file()]


@pytest.fixture(scope="module")
def save_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("KGPU_FUZZ_SAVE")
    return Path(target) if target else tmp_path_factory.mktemp("fuzz-failures")


@pytest.fixture(autouse=True)
def _in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a mutated relative path never lands in the checkout


def _workdir(seed: Path) -> Iterator[Path]:
    """A copy of the seed's folder tree (the examples, or the acceptance inputs)."""
    root = EXAMPLES if seed.is_relative_to(EXAMPLES) else ACCEPTANCE
    with tempfile.TemporaryDirectory(prefix="kgpu-fuzz-") as tmp:
        copy = Path(tmp) / root.name
        shutil.copytree(root, copy)
        yield copy / seed.relative_to(root)


def _check(outcome: Outcome, data: bytes, target: Path, save_dir: Path) -> None:
    if not outcome.failure:
        return
    save_dir.mkdir(parents=True, exist_ok=True)
    kept = save_dir / f"{len(list(save_dir.iterdir())):04d}-{target.name}"
    kept.write_bytes(data)
    pytest.fail(
        f"{outcome.describe()}\ninput saved as {kept} (it replaced {target.name}; "
        "add it to tests/data/fuzz with the fix)",
        pytrace=False,
    )


def _run(
    args: list[str],
    target: Path,
    data: bytes,
    save_dir: Path,
    *,
    base: Path | None = None,
    **kw: Any,
) -> None:
    """Write the input, run, judge. An error line may name a file relative to the input's
    folder, to ``base`` (a scenario's folder: its ``apply`` names) or to the working folder."""
    target.write_bytes(data)
    roots = [target.parent, Path.cwd(), *([base] if base else [])]
    outcome = run_cli(args, roots=roots, **kw)
    _check(outcome, data, target, save_dir)


@_settings(ci=200)
@given(data=st.data())
def test_validate_survives_mutated_inputs(data: st.DataObject, save_dir: Path) -> None:
    seed = data.draw(st.sampled_from(sorted(YAML_SEEDS)), label="seed")
    body = data.draw(mutated_yaml(YAML_SEEDS[seed]), label="input")
    for target in _workdir(seed):
        _run(["validate", str(target)], target, body, save_dir)


@_settings(ci=150)
@given(data=st.data())
def test_plan_survives_mutated_configs(data: st.DataObject, save_dir: Path) -> None:
    seed = data.draw(st.sampled_from(sorted(YAML_SEEDS)), label="seed")
    machine = data.draw(st.sampled_from(MACHINES), label="machine")
    body = data.draw(mutated_yaml(YAML_SEEDS[seed]), label="input")
    for target in _workdir(seed):
        _run(["plan", "--machine", machine, "-c", str(target)], target, body, save_dir)


@_settings(ci=100)
@given(data=st.data())
def test_sim_survives_mutated_scenarios(data: st.DataObject, save_dir: Path) -> None:
    scenario = data.draw(st.sampled_from(SCENARIOS), label="scenario")
    files = [scenario, scenario, *_referenced(scenario)]
    seed = data.draw(st.sampled_from(files), label="mutated file")
    body = data.draw(mutated_yaml(_docs(seed)), label="input")
    for copied in _workdir(scenario):
        target = copied.parent / seed.relative_to(scenario.parent)
        _run(["sim", str(copied)], target, body, save_dir, base=copied.parent)


def _allocate_seeds() -> list[dict[str, Any]]:
    """The allocator example, the same with what main's allocator grew since (feature gates, a
    DeviceTaintRule), and the same in ``resource.k8s.io/v1beta1`` (devices under ``basic``)."""
    from kgpu.dra.versions import convert

    base = _docs(EXAMPLES / "dra" / "allocate-gb200.yaml")[0]
    rule = _docs(EXAMPLES / "dra" / "manifests" / "gpu-0-maintenance.yaml")[0]
    rule["spec"]["deviceSelector"]["pool"] = base["slices"][0]["spec"]["pool"]["name"]
    gated = {
        **base,
        "featureGates": {"DRADeviceTaints": True, "DRADeviceTaintRules": True},
        "deviceTaintRules": [rule],
    }
    beta1 = {
        key: [convert(obj, "v1beta1") for obj in value]
        if key in ("classes", "slices", "claims")
        else value
        for key, value in base.items()
    }
    return [base, gated, beta1]


ALLOCATE_SEEDS = _allocate_seeds()
#: ``--feature-gates`` values: the gates the allocator knows, and shapes it must refuse.
GATE_FLAGS = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "DRAPrioritizedList=false",
            "DRADeviceTaints=true,DRAPartitionableDevices=false",
            "DRAPrioritizedList",
            "NoSuchGate=true",
            "=true",
            ",",
            "DRAPrioritizedList=maybe",
            "a" * 5000,
        ]
    ),
)


@_settings(ci=80)
@given(data=st.data())
def test_allocate_survives_mutated_inputs(data: st.DataObject, save_dir: Path) -> None:
    seed = EXAMPLES / "dra" / "allocate-gb200.yaml"
    doc = data.draw(st.sampled_from(ALLOCATE_SEEDS), label="seed")
    as_json = data.draw(st.booleans(), label="as JSON")
    body = data.draw(mutated_json(doc) if as_json else mutated_yaml([doc]), label="input")
    gates = data.draw(GATE_FLAGS, label="--feature-gates")
    for copied in _workdir(seed):
        target = copied.with_suffix(".json") if as_json else copied
        args = ["allocate", str(target), *(["--feature-gates", gates] if gates else [])]
        _run(args, target, body, save_dir, allowed_exits=(0, 1, 2, 3))


def _counters_seed() -> str:
    from kgpu.metrics.counters import DEFAULT

    lines = ["# DCGM FIELD, Prometheus metric type, help message"]
    lines += [f'{m.name}, {m.type}, "{m.help}"' for m in DEFAULT.metrics]
    return "\n".join(lines) + "\nDCGM_FI_DRIVER_VERSION, label, Driver Version\n"


COUNTERS_SEED = _counters_seed()


@st.composite
def mutated_csv(draw: Any, text: str) -> bytes:
    """A counters CSV with a few fields replaced (odd strings, a quote, a comma), lines
    repeated or dropped, then sometimes damaged as bytes."""
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        fields = lines[i].split(", ")
        j = draw(st.integers(0, len(fields) - 1))
        op = draw(st.sampled_from(["field", "field", "dup", "drop", "join"]))
        if op == "field":
            fields[j] = draw(st.one_of(st.sampled_from(ODD_STRINGS), st.text(max_size=20)))
            lines[i] = ", ".join(fields)
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "drop":
            del lines[i]
        else:
            lines[i] = lines[i] + ", " + draw(st.sampled_from(['"', "gauge", "x"]))
    return draw(textual("\n".join(lines)))


@_settings(ci=40)
@given(data=st.data())
def test_metrics_survives_mutated_counters(data: st.DataObject, save_dir: Path) -> None:
    body = data.draw(mutated_csv(COUNTERS_SEED), label="counters CSV")
    with tempfile.TemporaryDirectory(prefix="kgpu-fuzz-") as tmp:
        target = Path(tmp) / "counters.csv"
        _run(["metrics", "-m", "t4", "--once", "-f", str(target)], target, body, save_dir)


def _configmap_keys() -> dict[str, list[Any]]:
    """Device-plugin configs as the keys of a mounted ConfigMap hold them."""
    out: dict[str, list[Any]] = {}
    for docs in YAML_SEEDS.values():
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
                for key, text in (doc.get("data") or {}).items():
                    if isinstance(text, str) and "version" in text:
                        out[str(key)] = [d for d in yaml.safe_load_all(text) if d is not None]
    return out


CONFIGMAP_KEYS = _configmap_keys()


@_settings(ci=30)
@given(data=st.data())
def test_plan_survives_mutated_configmap_volumes(data: st.DataObject, save_dir: Path) -> None:
    """``kgpu plan -c DIR`` on a directory laid out as the kubelet mounts a ConfigMap (keys
    through a ``..data`` link): one key damaged, sometimes a key that is not a regular file."""
    name = data.draw(st.sampled_from(sorted(CONFIGMAP_KEYS)), label="key")
    body = data.draw(mutated_yaml(CONFIGMAP_KEYS[name]), label="input")
    odd = data.draw(st.sampled_from(["none", "none", "fifo", "dir", "dangling"]), label="other")
    with tempfile.TemporaryDirectory(prefix="kgpu-fuzz-") as tmp:
        volume = Path(tmp) / "config"
        versioned = volume / "..2026_11_24_00_00_00.000000001"
        versioned.mkdir(parents=True)
        (volume / "..data").symlink_to(versioned.name)
        target = versioned / name
        (volume / name).symlink_to(Path("..data") / name)
        if odd == "fifo":
            os.mkfifo(versioned / "pipe")
        elif odd == "dir":
            (versioned / "folder").mkdir()
        elif odd == "dangling":
            (versioned / "gone").symlink_to("nowhere")
        args = ["plan", "--machine", "rtx-2080ti", "-c", str(volume)]
        _run(args, target, body, save_dir, base=volume)


@_settings(ci=20)
@given(data=st.data())
def test_sim_survives_mutated_expect_files(data: st.DataObject, save_dir: Path) -> None:
    """``kgpu sim SCENARIO --expect FILE`` with the expect file damaged (the scenario's own
    ``expect`` key is mutated with the scenarios above)."""
    scenario = EXAMPLES / "expect" / "time-slicing-gate.yaml"
    expect = EXAMPLES / "expect" / "heal-four-node-domain.expect.yaml"
    body = data.draw(mutated_yaml(_docs(expect)), label="expect file")
    for copied in _workdir(expect):
        _run(
            ["sim", str(copied.parent / scenario.name), "--expect", str(copied)],
            copied,
            body,
            save_dir,
        )


@_settings(ci=80)
@given(data=st.data())
def test_machines_and_plan_survive_mutated_snapshots(data: st.DataObject, save_dir: Path) -> None:
    doc = json.loads(SNAPSHOT.read_text())
    body = data.draw(mutated_json(doc), label="snapshot")
    command = data.draw(st.sampled_from(["machines", "plan"]), label="command")
    with tempfile.TemporaryDirectory(prefix="kgpu-fuzz-") as tmp:
        target = Path(tmp) / SNAPSHOT.name
        args = (
            ["machines", str(target)]
            if command == "machines"
            else ["plan", "--machine", str(target)]
        )
        _run(args, target, body, save_dir)
