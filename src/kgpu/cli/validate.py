"""``kgpu validate FILE...``: check configs and manifests before they reach a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


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
