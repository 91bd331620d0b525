"""What ``kgpu allocate`` and every error path say about inputs issue 28's fuzzing found: a
capacity request or request-policy value that is not a quantity is refused as the API server
refuses it (not a ``QuantityError`` traceback); CEL's ``/`` and ``%`` by zero are CEL
evaluation errors, as cel-go reports them; user text with emoji codes or rich markup is
quoted back exactly as written."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from kgpu.cli import app, output
from kgpu.quantity import K8S_FORMAT

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((REPO / "examples" / "dra" / "allocate-gb200.yaml").read_text())
runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output.console, "_width", 400)
        mp.setattr(output.err_console, "_width", 400)
        result = runner.invoke(app, list(args), env={"COLUMNS": "400"})
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert "Traceback" not in result.output
    return result.exit_code, result.output


def _allocate(tmp_path: Path, doc: dict[str, Any]) -> tuple[int, str]:
    path = tmp_path / "a.yaml"
    path.write_text(yaml.safe_dump(doc))
    return _run("allocate", str(path))


def _first_request(doc: dict[str, Any]) -> dict[str, Any]:
    request: dict[str, Any] = doc["claims"][0]["spec"]["devices"]["requests"][0]["exactly"]
    return request


def test_a_capacity_request_that_is_not_a_quantity(tmp_path: Path) -> None:
    doc = copy.deepcopy(EXAMPLE)
    _first_request(doc)["capacity"] = {"requests": {"memory": "lots"}}
    code, out = _allocate(tmp_path, doc)
    assert code == 1
    assert (
        "a.yaml: claims[0].spec.devices.requests[0].exactly.capacity.requests.memory: "
        f"'lots' is not a quantity: {K8S_FORMAT}"
    ) in out


def test_request_policy_values_that_are_not_quantities(tmp_path: Path) -> None:
    doc = copy.deepcopy(EXAMPLE)
    device = doc["slices"][0]["spec"]["devices"][0]
    device["allowMultipleAllocations"] = True
    device["capacity"]["memory"]["requestPolicy"] = {
        "default": "half",
        "validRange": {"min": "1Gi", "step": "1 Gi"},
    }
    code, out = _allocate(tmp_path, doc)
    assert code == 1
    at = "a.yaml: slices[0].spec.devices[0].capacity.memory.requestPolicy"
    assert f"{at}.default: 'half' is not a quantity" in out
    assert f"{at}.validRange.step: '1 Gi' is not a quantity" in out
    assert "validRange.min" not in out


@pytest.mark.parametrize(("op", "words"), [("/", "division by zero"), ("%", "modulus by zero")])
def test_cel_division_by_zero_is_a_cel_evaluation_error(
    tmp_path: Path, op: str, words: str
) -> None:
    doc = copy.deepcopy(EXAMPLE)
    _first_request(doc)["selectors"] = [{"cel": {"expression": f"7 {op} 0 == 1"}}]
    code, out = _allocate(tmp_path, doc)
    assert code == 3  # the allocator errs, as for any CEL runtime error (README: exit 3)
    assert f"default/inference-gpus: selector #0: CEL runtime error: {words}" in " ".join(
        out.split()
    )


@pytest.mark.parametrize("text", ["x:thumbs_up:y", "a[bold]b[/bold]c", "gpu[/x]:smile:"])
def test_user_text_is_quoted_back_literally(tmp_path: Path, text: str) -> None:
    # issue 28: "x:thumbs_up:y" came back as "x👍y"
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": text, "metadata": {"name": "a"}}))
    code, out = _run("validate", str(path))
    assert code == 1
    assert f"kind: unknown kind {text!r}" in out
    assert "👍" not in out and "😄" not in out


def test_table_cells_show_emoji_codes_literally(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        yaml.safe_dump(
            {
                "nodes": [{"name": "t4", "machine": "t4"}],
                "steps": [{"name": "step :thumbs_up: [b]x[/b]", "advance": "1s"}],
            }
        )
    )
    code, out = _run("sim", str(scenario), "--watch")
    assert code == 0
    assert "step :thumbs_up: [b]x[/b]" in out and "👍" not in out
