"""``kgpu allocate`` on shared GPUs (issue 27): an H100 80GB published with ``--consumable-shares
memory`` (tests/dra/data/shares-h100-80gb.yaml) takes claims of 20Gi and 40Gi on one GPU, each
with its own ``shareID`` and ``consumedCapacity``; a 60Gi claim beside them is unsatisfiable with
the allocator's reason; a request off the grid is rounded up as kube-scheduler rounds, and the
table says so; a release without ``DRAConsumableCapacity`` refuses capacity requests as the real
allocator does."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from kgpu.cli import app

DATA = Path(__file__).resolve().parent / "data" / "shares-h100-80gb.yaml"
runner = CliRunner()


def allocate(doc: dict[str, Any], tmp_path: Path, *flags: str) -> tuple[int, str]:
    f = tmp_path / f"in-{len(list(tmp_path.iterdir()))}.yaml"
    f.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["allocate", str(f), *flags], env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def data() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(DATA.read_text())
    return doc


def claim(name: str, memory: str) -> dict[str, Any]:
    c = copy.deepcopy(data()["claims"][0])
    c["metadata"].update(name=name, uid=f"uid-{name}")
    c["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] = memory
    return c


def test_20gi_and_40gi_share_gpu_0_with_their_own_share(tmp_path: Path) -> None:
    code, out = allocate(data(), tmp_path, "-o", "json")
    assert code == 0, out
    first, second = (a["results"] for a in json.loads(out)["allocations"])
    assert [r["device"] for r in first + second] == ["gpu-0", "gpu-0"]
    assert first[0]["shareID"] != second[0]["shareID"]
    assert first[0]["consumedCapacity"] == {"memory": "20Gi", "computeShares": "0"}
    assert second[0]["consumedCapacity"] == {"memory": "40Gi", "computeShares": "0"}


def test_60gi_beside_them_is_unsatisfiable_with_the_allocators_reason(tmp_path: Path) -> None:
    doc = data()
    code, out = allocate(doc, tmp_path, "-o", "json")
    answer = json.loads(out)
    held = []
    for c, a in zip(doc["claims"], answer["allocations"], strict=True):
        c["status"] = {"allocation": {"devices": {"results": a["results"]}}}
        held.append(c)
    # the third pod, scheduled after the first two: 20Gi + 40Gi + 60Gi > the GPU's 79Gi
    code, out = allocate({**doc, "allocated": held, "claims": [claim("inference-60g", "60Gi")]},
                         tmp_path, "-o", "json")  # fmt: skip
    assert code == 2, out
    why = json.loads(out)["unsatisfiable"]
    assert why.startswith("cannot allocate all claims: claim default/inference-60g")
    assert why.endswith("1 on h100-node match, 0 with counters and capacity left"), why
    # alone on the GPU, 60Gi fits: it is the others' shares that leave too little
    code, _ = allocate({**doc, "claims": [claim("inference-60g", "60Gi")]}, tmp_path)
    assert code == 0
    # above the GPU's memory: unsatisfiable even alone
    code, out = allocate({**doc, "claims": [claim("huge", "80Gi")]}, tmp_path, "-o", "json")
    why = json.loads(out)["unsatisfiable"]
    assert code == 2 and why.startswith("cannot allocate all claims: claim default/huge"), why


def test_a_request_off_the_grid_is_rounded_up_and_the_table_says_so(tmp_path: Path) -> None:
    doc = {**data(), "claims": [claim("odd", "20000Mi")]}
    code, out = allocate(doc, tmp_path, "-o", "json")
    assert code == 0
    (result,) = json.loads(out)["allocations"][0]["results"]
    assert result["consumedCapacity"]["memory"] == "20Gi"  # 20000Mi -> the next 1Gi step
    assert set(result) == {"request", "driver", "pool", "device", "shareID", "consumedCapacity"}
    code, table = allocate(doc, tmp_path)
    assert code == 0
    flat = " ".join(table.split())
    assert "memory 20000Mi rounded up to 20Gi on gpu-0" in flat, table
    assert f"share {result['shareID'][:8]}: computeShares 0, memory 20Gi" in flat
    # an exact request gets no note
    code, exact = allocate({**data(), "claims": [claim("even", "20Gi")]}, tmp_path)
    assert code == 0 and "rounded" not in exact


def test_without_the_gate_capacity_requests_are_refused_and_gpus_are_exclusive(
    tmp_path: Path,
) -> None:
    code, out = allocate(data(), tmp_path, "--kubernetes-version", "1.35", "-o", "json")
    assert code == 3
    assert json.loads(out)["error"] == (
        "claim default/inference-20g, request gpu: has capacity requests, but the "
        "DRAConsumableCapacity feature is disabled"
    )
    # claims that name no capacity: the shared GPU is allocated whole, to one claim only
    plain = []
    for name in ("a", "b"):
        c = claim(name, "1Gi")
        del c["spec"]["devices"]["requests"][0]["exactly"]["capacity"]
        plain.append(c)
    code, out = allocate({**data(), "claims": plain}, tmp_path, "--kubernetes-version", "1.35",
                         "-o", "json")  # fmt: skip
    assert code == 2, out
    code, out = allocate({**data(), "claims": plain[:1]}, tmp_path, "--kubernetes-version",
                         "1.35", "-o", "json")  # fmt: skip
    assert code == 0
    (result,) = json.loads(out)["allocations"][0]["results"]
    assert "shareID" not in result and "consumedCapacity" not in result
    # the gate turned on, as on a 1.35 cluster that enables it: shared again
    code, out = allocate(data(), tmp_path, "--kubernetes-version", "1.35",
                         "--feature-gates", "DRAConsumableCapacity=true", "-o", "json")  # fmt: skip
    assert code == 0 and all(
        a["results"][0]["device"] == "gpu-0" for a in json.loads(out)["allocations"]
    )
