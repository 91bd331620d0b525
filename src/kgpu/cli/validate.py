"""``kgpu validate FILE...``: check configs and manifests before they reach a cluster.

Manifests get :func:`kgpu.manifests.validate_manifest`, the check ``kgpu sim`` runs on what it
applies (the API server's rules, the official schema, ComputeDomains by their controller's
parser), so a file ``validate`` accepts is one the simulator runs; scenarios are loaded by the
simulator's own loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from kgpu.manifests import FileReport


def _one_mapping(path: Path) -> dict[object, object] | None:
    """The file's only YAML document when it is a mapping without apiVersion/kind."""
    import yaml

    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    if len(docs) != 1 or not isinstance(docs[0], dict) or {"apiVersion", "kind"} & set(docs[0]):
        return None
    return docs[0]


def looks_like_scenario(path: Path) -> bool:
    """A one-document file whose top level has a scenario's keys and no apiVersion/kind."""
    doc = _one_mapping(path)
    return (
        doc is not None
        and not looks_like_expect(path)
        and bool(set(doc) & {"nodes", "apply", "steps"})
    )


def looks_like_expect(path: Path) -> bool:
    """A ``kgpu sim --expect`` file: ``final`` and/or ``steps`` whose entries name a ``step``."""
    doc = _one_mapping(path)
    if doc is None or not set(doc) <= {"final", "steps"}:
        return False
    steps = doc.get("steps")
    return "final" in doc or (
        isinstance(steps, list) and any(isinstance(s, dict) and "step" in s for s in steps)
    )


def validate_expect(path: Path) -> FileReport:
    """Check an expect file on its own: everything but whether its steps exist, which
    ``kgpu sim SCENARIO --expect FILE`` checks against the scenario."""
    from kgpu.errors import FieldError
    from kgpu.manifests import FileReport
    from kgpu.sim.expect import load_expectations

    report = FileReport(str(path))
    try:
        expect = load_expectations(path, None)
    except FieldError as exc:
        report.problems.extend(exc.problems)
        return report
    report.ok.append(
        f"kgpu sim expect file ({expect.assertions} assertion(s) at {len(expect.blocks)} "
        "point(s); the steps it names are checked by kgpu sim SCENARIO --expect FILE)"
    )
    return report


def validate_scenario(path: Path) -> FileReport:
    """Check a ``kgpu sim`` scenario with the parser ``kgpu sim`` runs (nodes, configs, every
    manifest it applies, every step)."""
    from kgpu.errors import FieldError, FieldProblem, KgpuError
    from kgpu.manifests import FileReport
    from kgpu.sim.scenario import load_scenario

    report = FileReport(str(path))
    try:
        scenario = load_scenario(path)
    except FieldError as exc:
        report.problems.extend(exc.problems)
        return report
    except KgpuError as exc:
        report.problems.append(FieldProblem(str(exc), file=str(path)))
        return report
    nodes = sum(spec.count for spec in scenario.nodes)
    report.ok.append(
        f"kgpu sim scenario {scenario.name} ({nodes} node(s), {len(scenario.apply)} "
        f"object(s) to apply, {len(scenario.steps)} step(s))"
    )
    return report


def register(app: typer.Typer) -> None:
    @app.command("validate")
    def validate(
        files: Annotated[
            list[Path],
            typer.Argument(
                help="YAML files: device-plugin configs, ConfigMaps, mig-parted "
                "configs, GPU Operator Helm values, Kubernetes manifests (multi-document is fine), "
                "kgpu sim scenarios and expect files."
            ),
        ],
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print errors only.")] = False,
    ) -> None:
        """Check each file; exit 1 with field-level errors (file, document, path)."""
        from rich.markup import escape

        from kgpu.cli.output import console, err_console
        from kgpu.cli.plain import warn
        from kgpu.manifests import schema_validation_available, validate_file

        failed = False
        for path in files:
            if looks_like_expect(path):
                report = validate_expect(path)
            elif looks_like_scenario(path):
                report = validate_scenario(path)
            else:
                report = validate_file(path)
            for problem in report.problems:
                err_console.print(
                    f"[red]error:[/red] {escape(str(problem))}", highlight=False, soft_wrap=True
                )
            if not quiet:
                for warning in report.warnings:
                    warn(err_console, str(warning))
            if report.problems:
                failed = True
                continue
            if not quiet:
                for line in report.ok:
                    console.print(
                        escape(f"ok {report.file}: {line}"), highlight=False, soft_wrap=True
                    )
        if not quiet and not schema_validation_available():
            err_console.print(
                "note: kubernetes-validate is not installed; core Kubernetes kinds got "
                "structural checks only (pip install kubernetes-validate for the full schema)",
                highlight=False,
            )
        if failed:
            raise typer.Exit(1)
