"""Upstream's allocator test table, as data (``tests/dra/upstream/allocator/*.yaml``), run
against ``kgpu allocate``'s engine.

The cases are kubernetes' own (allocator_testing.go, 1.35/1.36); the YAML uses a few shorthands
that this module expands into real v1 objects, exactly as upstream's test helpers do (see
``tests/dra/upstream/README.md``). Each case runs with upstream's feature set for it: the gates
it names are on, every other one is off.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.cli.allocate import run
from kgpu.dra.features import Features
from kgpu.quantity import parse_quantity

HERE = Path(__file__).parent / "upstream" / "allocator"
API = "resource.k8s.io/v1"
Obj = dict[str, Any]


def _cases() -> list[Any]:
    out = []
    for path in sorted(HERE.glob("*.yaml")):
        for case in yaml.safe_load(path.read_text()) or []:
            out.append(pytest.param(case, id=f"{path.stem}:{case['name']}"))
    return out


# -- expanding the shorthands ------------------------------------------------------------------


def node_selector(short: Mapping[str, Any]) -> Obj:
    """``{label: [values]}`` (``metadata.name`` as a field) or a full NodeSelector."""
    if "nodeSelectorTerms" in short:
        return dict(short)
    exprs = [
        {"key": k, "operator": "In", "values": list(v)}
        for k, v in short.items()
        if k != "metadata.name"
    ]
    fields = [
        {"key": k, "operator": "In", "values": list(v)}
        for k, v in short.items()
        if k == "metadata.name"
    ]
    term: Obj = {}
    if exprs:
        term["matchExpressions"] = exprs
    if fields:
        term["matchFields"] = fields
    return {"nodeSelectorTerms": [term]}


def device_class(c: Mapping[str, Any]) -> Obj:
    if "selectors" in c:
        exprs = list(c["selectors"])
    elif "multiAlloc" in c:
        flag = "true" if c["multiAlloc"] else "false"
        exprs = [f'device.driver == "{c["driver"]}" && device.allowMultipleAllocations == {flag}']
    else:
        exprs = [f'device.driver == "{c["driver"]}"']
    spec: Obj = {"selectors": [{"cel": {"expression": e}} for e in exprs]}
    if "config" in c:
        attr = c["config"]
        spec["config"] = [{"opaque": {"driver": c["driver"], "parameters": {attr: f"{attr}Value"}}}]
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": c["name"]}, "spec": spec}


def counters(short: Mapping[str, Any] | None) -> Obj:
    return {k: {"value": str(v)} for k, v in (short or {}).items()}


def device(d: Mapping[str, Any]) -> Obj:
    out: Obj = {k: v for k, v in d.items() if k not in ("capacityFromCounters", "policyRange")}
    caps: Obj = {}
    if d.get("capacityFromCounters"):
        for c in d.get("consumesCounters") or []:
            caps.update(counters(c.get("counters")))
    for name, value in (d.get("capacity") or {}).items():
        caps[name] = dict(value) if isinstance(value, dict) else {"value": str(value)}
    for name, value in (d.get("policyRange") or {}).items():
        caps[name] = {
            "value": str(value),
            "requestPolicy": {
                "default": "2",
                "validRange": {"min": "2", "step": "2", "max": "4"},
            },
        }
    if caps:
        out["capacity"] = caps
    if "consumesCounters" in d:
        out["consumesCounters"] = [
            {"counterSet": c["counterSet"], "counters": counters(c.get("counters"))}
            for c in d["consumesCounters"]
        ]
    if isinstance(d.get("nodeSelector"), dict):
        out["nodeSelector"] = node_selector(d["nodeSelector"])
    return out


def resource_slice(s: Mapping[str, Any]) -> Obj:
    pool = s["pool"] if isinstance(s["pool"], dict) else {"name": s["pool"]}
    spec: Obj = {
        "driver": s["driver"],
        "pool": {
            "name": pool["name"],
            "generation": pool.get("generation", 1),
            "resourceSliceCount": pool.get("count", 1),
        },
    }
    if "node" in s:
        spec["nodeName"] = s["node"]
    elif s.get("allNodes"):
        spec["allNodes"] = True
    elif "nodeSelector" in s:
        spec["nodeSelector"] = node_selector(s["nodeSelector"])
    elif s.get("perDeviceNodeSelection"):
        spec["perDeviceNodeSelection"] = True
    devices = [device(d) for d in s.get("devices") or []]
    devices += [{"name": f"device-{i}"} for i in range(s.get("deviceCount", 0))]
    if devices:
        spec["devices"] = devices
    if "sharedCounters" in s:
        spec["sharedCounters"] = [
            {
                "name": c["name"],
                **({"counters": counters(c["counters"])} if "counters" in c else {}),
            }
            for c in s["sharedCounters"]
        ]
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": s["name"]},
        "spec": spec,
    }


def _selectors(exprs: list[str]) -> list[Obj]:
    return [{"cel": {"expression": e}} for e in exprs]


def _exact(r: Mapping[str, Any]) -> Obj:
    out: Obj = {"deviceClassName": r.get("class", "")}
    mode = r.get("mode", "ExactCount")
    out["allocationMode"] = mode
    if "count" in r:
        out["count"] = r["count"]
    elif mode == "ExactCount":
        out["count"] = 1
    if "selectors" in r:
        out["selectors"] = _selectors(r["selectors"])
    for key in ("tolerations", "adminAccess", "capacity"):
        if key in r:
            out[key] = r[key]
    out.update(r.get("exactlyExtra") or {})
    return out


def request(r: Mapping[str, Any]) -> Obj:
    if "firstAvailable" in r:
        return {
            "name": r["name"],
            "firstAvailable": [{"name": sub["name"], **_exact(sub)} for sub in r["firstAvailable"]],
        }
    return {"name": r["name"], "exactly": _exact(r)}


def claim(c: Mapping[str, Any]) -> Obj:
    devices: Obj = {"requests": [request(r) for r in c.get("requests") or []]}
    for key in ("constraints", "config"):
        if key in c:
            devices[key] = c[key]
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": c["name"]},
        "spec": {"devices": devices},
    }


def held(case: Mapping[str, Any]) -> list[Obj]:
    """Upstream's allocatedDevices and allocatedCapacityDevices, as allocated claims."""
    results: list[Obj] = [
        {"request": "r", "driver": d, "pool": p, "device": n}
        for d, p, n in case.get("allocated") or []
    ]
    for i, share in enumerate(case.get("allocatedCapacity") or []):
        d, p, n = share["device"]
        results.append(
            {
                "request": "r",
                "driver": d,
                "pool": p,
                "device": n,
                "shareID": f"00000000-0000-4000-8000-{i:012d}",
                "consumedCapacity": {k: str(v) for k, v in share["consumedCapacity"].items()},
            }
        )
    if not results:
        return []
    return [
        {
            "apiVersion": API,
            "kind": "ResourceClaim",
            "metadata": {"name": "allocated"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
            "status": {"allocation": {"devices": {"results": results}}},
        }
    ]


def input_of(case: Mapping[str, Any]) -> Obj:
    node = case.get("node") or {"name": "node-1", "region": "region-1"}
    return {
        "node": {"name": node["name"], "labels": {"region": node["region"], "planet": "earth"}},
        "classes": [device_class(c) for c in case.get("classes") or []],
        "slices": [resource_slice(s) for s in case.get("slices") or []],
        "allocated": held(case),
        "claims": [claim(c) for c in case.get("claims") or []],
    }


# -- comparing ---------------------------------------------------------------------------------


def _canon_selector(sel: Mapping[str, Any] | None) -> Any:
    if sel is None:
        return None
    return sorted(
        tuple(
            sorted(
                (part, r["key"], r["operator"], tuple(sorted(r.get("values") or [])))
                for part in ("matchExpressions", "matchFields")
                for r in term.get(part) or []
            )
        )
        for term in sel.get("nodeSelectorTerms") or []
    )


def _want_selector(want: Any) -> Any:
    if want is None:
        return None
    if isinstance(want, str):
        return node_selector({"metadata.name": [want]})
    return node_selector(want)


def _canon_result(r: Mapping[str, Any]) -> Any:
    out = []
    for k, v in sorted(r.items()):
        if v in ([], None, False, {}):
            continue
        if k == "shareID":
            v = "any" if v else ""
        elif k == "consumedCapacity":
            v = tuple(sorted((n, parse_quantity(str(q))) for n, q in v.items()))
        elif isinstance(v, list):
            v = tuple(tuple(sorted(x.items())) if isinstance(x, dict) else x for x in v)
        out.append((k, v))
    return tuple(out)


def _want_result(r: Any) -> Any:
    if isinstance(r, list):
        r = dict(zip(("request", "driver", "pool", "device"), r, strict=True))
    return _canon_result(r)


def _want_results(entry: Mapping[str, Any]) -> list[Any]:
    out = [_want_result(r) for r in entry.get("results") or []]
    for request_name, driver, pool, count, start in entry.get("resultRanges") or []:
        out += [
            _want_result([request_name, driver, pool, f"device-{i}"])
            for i in range(start, start + count)
        ]
    return out


def _unqualified(text: str) -> str:
    """Upstream's claims have no namespace (klog prints just the name); kgpu names every claim
    namespace/name, and claims without a namespace live in "default"."""
    return text.replace("default/", "")


@pytest.mark.parametrize("case", _cases())
def test_upstream_allocator_case(case: dict[str, Any]) -> None:
    data = input_of(case)
    before = copy.deepcopy(data)
    answer = run(data, Features.enabled(case.get("features") or []))
    # as upstream checks too: the allocator modifies none of the objects it was given
    assert data == before
    if "error" in case:
        assert answer["allocations"] is None, answer
        assert case["error"] in _unqualified(answer["error"] or ""), answer
        return
    if "expect" not in case:
        assert answer == {
            "allocations": None,
            "error": None,
            "unsatisfiable": answer.get("unsatisfiable"),
        }, answer
        assert str(answer["unsatisfiable"]).startswith("cannot allocate all claims")
        return
    assert answer["error"] is None, answer
    got = answer["allocations"]
    assert got is not None, answer
    want = case["expect"]
    assert len(got) == len(want), answer
    for entry, expected in zip(got, want, strict=True):
        assert _canon_selector(entry["nodeSelector"]) == _canon_selector(
            _want_selector(expected.get("nodeSelector"))
        ), entry
        assert sorted(_canon_result(r) for r in entry["results"]) == sorted(
            _want_results(expected)
        ), entry
        assert entry.get("config", []) == expected.get("config", []), entry


def test_every_case_has_a_unique_name() -> None:
    names = [p.values[0]["name"] for p in _cases()]
    assert len(names) == len(set(names)) and len(names) > 180
