"""Upstream's CEL library tests (semver, quantity) and DRA selector tests, as data
(``tests/dra/upstream/cel/*.yaml``), run against kgpu's CEL environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.dra import cel
from kgpu.quantity import parse_quantity

HERE = Path(__file__).parent / "upstream" / "cel"


def _cases(name: str) -> list[Any]:
    return [
        pytest.param(c, id=f"{name}:{c['name']}")
        for c in yaml.safe_load((HERE / f"{name}.yaml").read_text())
    ]


def _expected(value: Any) -> Any:
    if isinstance(value, dict) and "semver" in value:
        return cel.semver_value(str(value["semver"]))
    if isinstance(value, dict) and "quantity" in value:
        return cel.quantity_value(str(value["quantity"]))
    return value


@pytest.mark.parametrize("case", _cases("semver") + _cases("quantity"))
def test_library_function(case: dict[str, Any]) -> None:
    if "compileError" in case:
        with pytest.raises(cel.CelCompileError) as err:
            cel.compile_expression(case["expr"])
        assert case["compileError"] in str(err.value)
        return
    program = cel.compile_expression(case["expr"])
    if "runtimeError" in case:
        with pytest.raises(cel.CelRuntimeError) as rt:
            program.value()
        assert case["runtimeError"] in str(rt.value)
        return
    got = program.value()
    if "approx" in case:
        assert abs(got - case["approx"]) < 0.0001
        return
    want = _expected(case["value"])
    assert got == want and type(got) is type(want), (got, want)


def _view(device: dict[str, Any] | None) -> dict[str, Any]:
    d = device or {}
    raw = {
        "name": "d",
        "attributes": d.get("attributes") or {},
        "capacity": d.get("capacity") or {},
    }
    if "allowMultipleAllocations" in d:
        raw["allowMultipleAllocations"] = d["allowMultipleAllocations"]
    return cel.device_view(d.get("driver", ""), raw)


@pytest.mark.parametrize("case", _cases("dra_compile"))
def test_dra_selector(case: dict[str, Any]) -> None:
    if "compileError" in case:
        with pytest.raises(cel.CelCompileError) as err:
            cel.compile_selector(case["expr"])
        assert case["compileError"] in str(err.value)
        return
    selector = cel.compile_selector(case["expr"])
    assert cel.estimated_cost(case["expr"]) <= cel.MAX_COST
    if "matchError" in case:
        # where kgpu's wording differs from cel-go's (upstreamMatchError), any runtime error
        # of the device evaluation is accepted: the selector fails for this device either way
        with pytest.raises(cel.CelRuntimeError) as rt:
            selector.evaluate(_view(case.get("device")))
        assert case["matchError"] in str(rt.value)
        return
    assert selector.evaluate(_view(case.get("device"))) is case["match"]


def test_quantity_values_compare_semantically() -> None:
    assert cel.quantity_value("1Gi") == cel.quantity_value(str(parse_quantity("1024Mi")))
