"""kube-scheduler's own plugin tests, ported as data, run against the simulator's filters.

Each YAML file in this folder holds the cases of one upstream test table (its ``source`` names
the file, commit and test function): the pod, the nodes, the pods already on them, and the
status upstream expects per node -- the framework code and the reasons. The harness builds the
simulator's :class:`~kgpu.sim.scheduler.Scheduler` over those nodes and pods, runs the same
PreFilter, then the named plugin's Filter on each node (as the upstream test calls that plugin
alone), and compares. ``kubernetesVersion`` is the release whose wording the table expects;
``alsoAt`` re-runs the table at another release with the reasons rewritten as that release
words them, and a case's ``wantAt`` gives its expectation from a release that decides it
differently (holding for later releases too, until a newer ``wantAt`` entry). Every table runs
at 1.36 and 1.37, the newest releases, besides the ones it was written for. ``skipped`` lists
the cases of the table that cannot be expressed here, and why.
"""

from __future__ import annotations

import copy
import fnmatch
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.node.selectors import parse_taints
from kgpu.sim.kubeversion import DEFAULT_VERSION, parse_version
from kgpu.sim.podspec import pod_requirements
from kgpu.sim.quantity import to_units
from kgpu.sim.scheduler import FILTER_ORDER, Scheduler
from kgpu.sim.state import PodRecord, SimNode
from kgpu.store import MemoryStore

HERE = Path(__file__).parent
FILES = sorted(HERE.glob("*.yaml"))
CODES = ("Success", "Unschedulable", "UnschedulableAndUnresolvable")

Obj = dict[str, Any]


def _load(path: Path) -> Obj:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict) and data.get("source") and data.get("cases"), path
    assert data.get("plugin") in (*FILTER_ORDER, None), f"{path}: unknown plugin"
    return data


def _runs() -> list[Any]:
    """One test per (file, case, release)."""
    out = []
    for path in FILES:
        data = _load(path)
        versions = [(str(data.get("kubernetesVersion", DEFAULT_VERSION)), None)]
        versions += [(str(v), rw) for v, rw in (data.get("alsoAt") or {}).items()]
        for case in data["cases"]:
            for version, rewrite in versions:
                out.append(
                    pytest.param(
                        data, case, version, rewrite, id=f"{path.stem}:{case['name']}@{version}"
                    )
                )
    return out


def _node(raw: Obj, defaults: Obj) -> SimNode:
    merged = {**defaults, **raw}
    meta = merged.get("metadata") or {}
    spec = merged.get("spec") or {}
    allocatable = (merged.get("status") or {}).get("allocatable") or {"pods": "110"}
    alloc = {str(r): to_units(str(r), v) for r, v in allocatable.items()}
    return SimNode(
        name=str(meta["name"]),
        machine=None,
        view=None,
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        scenario_labels={},
        taints=parse_taints(spec.get("taints")),
        unschedulable=bool(spec.get("unschedulable")),
        capacity=dict(alloc),
        allocatable=alloc,
    )


def _record(pod: Obj, index: int) -> PodRecord:
    meta = pod.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("name", f"pod-{index}")
    pod.setdefault("spec", {}).setdefault("containers", [])
    return PodRecord(f"{meta['namespace']}/{meta['name']}", pod, pod_requirements(pod), index)


def _expected(want: Any, nodes: list[SimNode]) -> dict[str, Obj | None]:
    """``want`` per node: one status for a single-node case, else a map by node name."""
    if len(nodes) == 1 and not (isinstance(want, dict) and nodes[0].name in want):
        return {nodes[0].name: want}
    assert isinstance(want, dict), want
    return {n.name: want.get(n.name) for n in nodes}


def _want_at(case: Obj, version: str) -> Any:
    """The case's expectation at ``version``: the newest ``wantAt`` entry not after it, else
    ``want``."""
    at = parse_version(version)
    earlier = [k for k in case.get("wantAt") or {} if parse_version(str(k)) <= at]
    if not earlier:
        return case.get("want")
    return case["wantAt"][max(earlier, key=lambda k: parse_version(str(k)))]


def _rewrite(reasons: list[str], rule: Obj | None) -> list[str]:
    if rule is None:
        return reasons
    return [rule["becomes"] if fnmatch.fnmatchcase(r, rule["reason"]) else r for r in reasons]


@pytest.mark.parametrize(("table", "case", "version", "rewrite"), _runs())
def test_upstream_filter_case(table: Obj, case: Obj, version: str, rewrite: Obj | None) -> None:
    case = copy.deepcopy(case)  # YAML anchors share objects between cases
    store = MemoryStore()
    for name, labels in (table.get("namespaces") or {}).items():
        store.create(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
        )
    sched = Scheduler([], store, parse_version(version))
    defaults = table.get("nodeDefaults") or {}
    raw_nodes = case.get("nodes") or [case.get("node") or {"metadata": {"name": "node"}}]
    nodes = [_node(n, defaults) for n in raw_nodes]
    for node in nodes:
        sched.upsert_node(node)
    by_name = {n.name: n for n in nodes}
    for i, raw in enumerate(case.get("pods") or []):
        rec = _record(raw, i)
        where = by_name.get(str(raw["spec"]["nodeName"]))
        if where is None:  # upstream's snapshot lists no NodeInfo for a pod's unknown node
            continue
        where.pods[rec.key] = rec
        sched.assume(rec, where)
    pod = _record(case.get("pod") or {}, 10_000)
    cycle = sched.cycle(pod.req)
    want = _expected(_want_at(case, version), nodes)
    got: dict[str, Obj | None] = {}
    for node in nodes:
        verdict = sched.node_verdict(pod, node, cycle, table.get("plugin"))
        got[node.name] = (
            None if verdict is None else {"code": verdict.code, "reasons": list(verdict.reasons)}
        )
    for name, expect in want.items():
        result = got[name]
        if expect is None:
            assert result is None, f"{name}: expected to fit, got {result}"
            continue
        assert expect["code"] in CODES
        assert result is not None, f"{name}: expected {expect}, the node passed"
        assert result["code"] == expect["code"], f"{name}: {result}"
        if "reasons" in expect:
            assert result["reasons"] == _rewrite(list(expect["reasons"]), rewrite), name


def test_every_table_says_what_it_skips() -> None:
    """Each table names its source and lists the upstream cases it leaves out, with a reason."""
    assert len(FILES) >= 6
    for path in FILES:
        data = _load(path)
        runs = {str(data.get("kubernetesVersion")), *map(str, data.get("alsoAt") or {})}
        assert {"1.36", "1.37"} <= runs, f"{path}: not run at the newest releases"
        for item in data.get("skipped") or []:
            assert item.get("name") and item.get("why"), f"{path}: {item}"
