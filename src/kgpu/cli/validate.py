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


def looks_like_scenario(path: Path) -> bool:
    """A one-document file whose top level has a scenario's keys and no apiVersion/kind."""
    import yaml

    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return False
    if len(docs) != 1 or not isinstance(docs[0], dict):
        return False
    keys = set(docs[0])
    return not keys & {"apiVersion", "kind"} and bool(keys & {"nodes", "apply", "steps"})


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
                "kgpu sim scenarios."
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
            report = validate_scenario(path) if looks_like_scenario(path) else validate_file(path)
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
