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
    from kgpu.cluster.store import group_of
    from kgpu.computedomain.api import GROUP, KIND, parse_compute_domain
    from kgpu.config.fields import load_yaml_documents
    from kgpu.errors import FieldError, FieldProblem

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


def register(app: typer.Typer) -> None:
    @app.command("validate")
    def validate(
        files: Annotated[
            list[Path],
            typer.Argument(
                help="YAML files: device-plugin configs, ConfigMaps, mig-parted "
                "configs, GPU Operator Helm values, Kubernetes manifests (multi-document is fine)."
            ),
        ],
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print errors only.")] = False,
    ) -> None:
        """Check each file; exit 1 with field-level errors (file, document, path)."""
        from kgpu.cli.output import console, err_console
        from kgpu.config.manifests import schema_validation_available, validate_file

        failed = False
        for path in files:
            report = validate_file(path)
            check_compute_domains(path, report)
            for problem in report.problems:
                err_console.print(f"[red]error:[/red] {problem}", highlight=False, soft_wrap=True)
            if not quiet:
                for warning in report.warnings:
                    err_console.print(
                        f"[yellow]warning:[/yellow] {warning}", highlight=False, soft_wrap=True
                    )
            if report.problems:
                failed = True
                continue
            if not quiet:
                for line in report.ok:
                    console.print(f"ok {report.file}: {line}", highlight=False, soft_wrap=True)
        if not quiet and not schema_validation_available():
            err_console.print(
                "note: kubernetes-validate is not installed; core Kubernetes kinds got "
                "structural checks only (pip install kubernetes-validate for the full schema)",
                highlight=False,
            )
        if failed:
            raise typer.Exit(1)
