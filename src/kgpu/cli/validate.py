"""``kgpu validate FILE...``: check configs and manifests before they reach a cluster.

The structural checks live in :mod:`kgpu.config.manifests`, which sits below the ComputeDomain
code; ComputeDomains that pass them are also run through the parser the controller and the
simulator use (:func:`kgpu.computedomain.api.parse_compute_domain`), so a domain ``validate``
accepts is one they accept.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from kgpu.config.manifests import FileReport


def check_compute_domains(path: Path, report: FileReport) -> None:
    """Add the ComputeDomain parser's problems to ``report`` for documents that had none."""
    from kgpu.computedomain.api import GROUP, KIND, parse_compute_domain
    from kgpu.config.fields import load_yaml_documents
    from kgpu.errors import FieldError, FieldProblem
    from kgpu.store import group_of

    try:
        docs = load_yaml_documents(path.read_text(), file=report.file)
    except (OSError, FieldError):
        return  # validate_file has reported it
    flagged = {p.entry for p in report.problems}
    for index, doc in enumerate(docs):
        entry = f"document {index}"
        if not isinstance(doc, dict) or doc.get("kind") != KIND or entry in flagged:
            continue
        api = doc.get("apiVersion")
        if not isinstance(api, str) or group_of(api) != GROUP:
            continue
        try:
            parse_compute_domain(doc)
        except FieldError as exc:
            report.problems.extend(
                FieldProblem(p.message, p.path, report.file, entry) for p in exc.problems
            )
            report.ok = [line for line in report.ok if not line.startswith(f"{entry}: ")]


def check_sharing_rules(report: FileReport) -> None:
    """What the sharing modes refuse in the file's device-plugin configs (MPS with migStrategy
    mixed...): their rules live with the modes, a layer above the file formats."""
    from kgpu.node.sharing import config_problems

    for entry in report.plugin_configs:
        report.problems.extend(config_problems(entry.config, file=entry.source, entry=entry.entry))


def check_dra_objects(path: Path, report: FileReport) -> None:
    """Add what the API server and the GPU driver's webhook refuse in DRA objects (selectors
    that do not compile, bad ``gpu.nvidia.com`` parameters): the schema accepts both."""
    from kgpu.config.fields import load_yaml_documents
    from kgpu.dra.checks import dra_object_problems
    from kgpu.errors import FieldError, FieldProblem

    try:
        docs = load_yaml_documents(path.read_text(), file=report.file)
    except (OSError, FieldError):
        return  # validate_file has reported it
    flagged = {p.entry for p in report.problems}
    for index, doc in enumerate(docs):
        entry = f"document {index}"
        if entry in flagged:
            continue
        problems = dra_object_problems(doc)
        if problems:
            report.problems.extend(
                FieldProblem(p.message, p.path, report.file, entry) for p in problems
            )
            report.ok = [line for line in report.ok if not line.startswith(f"{entry}: ")]


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
    from kgpu.config.manifests import FileReport
    from kgpu.errors import FieldError, FieldProblem, KgpuError
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
        from kgpu.config.manifests import schema_validation_available, validate_file

        failed = False
        for path in files:
            if looks_like_scenario(path):
                report = validate_scenario(path)
            else:
                report = validate_file(path)
                check_sharing_rules(report)
                check_compute_domains(path, report)
                check_dra_objects(path, report)
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
