"""``kgpu allocate FILE``: the DRA allocator alone, on one file of resource.k8s.io/v1 objects.

The file (YAML or JSON) has the keys ``node`` (``{name, labels}``), ``classes``, ``slices``,
``allocated`` (claims whose ``status.allocation`` holds devices already in use) and ``claims``
(allocated together, in order, as kube-scheduler allocates the claims of one pod). Exit status:
0 when the claims were allocated, 2 when they cannot be (the answer says why), 1 when the file
is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kgpu.errors import FieldError, FieldProblem

KINDS = {
    "classes": "DeviceClass",
    "slices": "ResourceSlice",
    "allocated": "ResourceClaim",
    "claims": "ResourceClaim",
}


def load_input(path: Path) -> dict[str, Any]:
    """Read and check the file; :class:`FieldError` names the entry and field at fault."""
    import json

    import yaml

    file = str(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise FieldError(FieldProblem(f"cannot read: {exc.strerror}", file=file)) from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise FieldError(FieldProblem(f"not valid YAML/JSON: {exc}", file=file)) from None
    problems: list[FieldProblem] = []
    if not isinstance(data, dict):
        raise FieldError(
            FieldProblem(
                "must be a mapping with keys node, classes, slices, allocated, claims", file=file
            )
        )
    unknown = sorted(set(data) - {"node", *KINDS})
    for key in unknown:
        problems.append(
            FieldProblem(
                "unknown key; allowed: node, classes, slices, allocated, claims", key, file
            )
        )
    node = data.get("node")
    if not isinstance(node, dict) or not isinstance(node.get("name"), str) or not node["name"]:
        problems.append(FieldProblem("must be a mapping with a non-empty name", "node.name", file))
    elif not isinstance(node.get("labels") or {}, dict):
        problems.append(FieldProblem("must be a mapping of label to value", "node.labels", file))
    for key, kind in KINDS.items():
        items = data.get(key) or []
        if not isinstance(items, list):
            problems.append(FieldProblem(f"must be a list of {kind} objects", key, file))
            continue
        for i, obj in enumerate(items):
            where = f"{key}[{i}]"
            if not isinstance(obj, dict):
                problems.append(FieldProblem(f"must be a {kind} object", where, file))
                continue
            if obj.get("kind", kind) != kind:
                problems.append(
                    FieldProblem(
                        f"kind {obj.get('kind')!r}, expected {kind}", f"{where}.kind", file
                    )
                )
            api = obj.get("apiVersion", "resource.k8s.io/v1")
            if api != "resource.k8s.io/v1":
                problems.append(
                    FieldProblem(
                        f"apiVersion {api!r}; kgpu allocate reads resource.k8s.io/v1",
                        f"{where}.apiVersion",
                        file,
                    )
                )
            if not (obj.get("metadata") or {}).get("name"):
                problems.append(FieldProblem("required", f"{where}.metadata.name", file))
            if not isinstance(obj.get("spec"), dict):
                problems.append(FieldProblem("required", f"{where}.spec", file))
                continue
            if key == "claims":
                problems += _check_claim(obj, where, file)
    if problems:
        raise FieldError(problems)
    return data


def _check_claim(claim: dict[str, Any], where: str, file: str) -> list[FieldProblem]:
    problems = []
    requests = ((claim["spec"].get("devices") or {}).get("requests")) or []
    if not isinstance(requests, list) or not requests:
        return [
            FieldProblem("at least one request is required", f"{where}.spec.devices.requests", file)
        ]
    for j, req in enumerate(requests):
        at = f"{where}.spec.devices.requests[{j}]"
        if not isinstance(req, dict) or not req.get("name"):
            problems.append(FieldProblem("required", f"{at}.name", file))
            continue
        if bool(req.get("exactly")) == bool(req.get("firstAvailable")):
            problems.append(
                FieldProblem("exactly one of exactly, firstAvailable is required", at, file)
            )
        elif req.get("exactly") and not req["exactly"].get("deviceClassName"):
            problems.append(FieldProblem("required", f"{at}.exactly.deviceClassName", file))
        mode = (req.get("exactly") or {}).get("allocationMode", "ExactCount")
        if mode not in ("ExactCount", "All"):
            problems.append(
                FieldProblem(
                    f"{mode!r}; allowed: ExactCount, All", f"{at}.exactly.allocationMode", file
                )
            )
    return problems


def run(data: dict[str, Any]) -> dict[str, Any]:
    """The JSON answer: ``{"allocations": [...] | None, "error": None | message}``."""
    from kgpu.dra.allocator import CANNOT_ALLOCATE, AllocationError, allocate

    claims = data.get("claims") or []
    try:
        results = allocate(
            data["node"],
            claims,
            classes=data.get("classes") or [],
            slices=data.get("slices") or [],
            allocated=data.get("allocated") or [],
        )
    except AllocationError as exc:
        return {"allocations": None, "error": str(exc)}
    if results is None:
        return {"allocations": None, "error": CANNOT_ALLOCATE}
    out = []
    for claim, result in zip(claims, results, strict=True):
        meta = claim.get("metadata") or {}
        entry: dict[str, Any] = {
            "claim": f"{meta.get('namespace') or 'default'}/{meta.get('name')}",
            "results": result["devices"]["results"],
            "nodeSelector": result.get("nodeSelector"),
        }
        if result["devices"].get("config"):
            entry["config"] = result["devices"]["config"]
        out.append(entry)
    return {"allocations": out, "error": None}


def register(app: typer.Typer) -> None:
    @app.command("allocate")
    def allocate_cmd(
        file: Annotated[
            Path,
            typer.Argument(
                help="YAML/JSON with node, classes, slices, allocated, claims "
                "(resource.k8s.io/v1 objects)"
            ),
        ],
        output: Annotated[str, typer.Option("-o", "--output", help="table or json")] = "table",
    ) -> None:
        """Run the DRA allocator (kube-scheduler semantics) on one file."""
        from kgpu.cli.output import console, fail, print_json

        if output not in ("table", "json"):
            fail(f"--output {output!r}: allowed: table, json")
        try:
            data = load_input(file)
        except FieldError as exc:
            fail(exc)
        answer = run(data)
        if output == "json":
            print_json(answer)
        else:
            _print_table(console, answer)
        if answer["allocations"] is None:
            raise typer.Exit(2)


def _print_table(console: Any, answer: dict[str, Any]) -> None:
    from rich.table import Table

    if answer["allocations"] is None:
        console.print(f"[red]not allocated:[/red] {answer['error']}", highlight=False)
        return
    table = Table(title="Allocation")
    for col in ("Claim", "Request", "Driver", "Pool", "Device", "Node selector"):
        table.add_column(col)
    for entry in answer["allocations"]:
        sel = entry.get("nodeSelector")
        where = _describe_selector(sel) if sel else "any node"
        for i, res in enumerate(entry["results"]):
            device = res["device"] + (" (admin)" if res.get("adminAccess") else "")
            table.add_row(
                entry["claim"] if i == 0 else "",
                res["request"],
                res["driver"],
                res["pool"],
                device,
                where if i == 0 else "",
            )
    console.print(table)


def _describe_selector(sel: dict[str, Any]) -> str:
    parts = []
    for term in sel.get("nodeSelectorTerms") or []:
        for r in (term.get("matchFields") or []) + (term.get("matchExpressions") or []):
            values = ",".join(r.get("values") or [])
            parts.append(f"{r.get('key')} {r.get('operator')} {values}".strip())
    return "; ".join(parts)
