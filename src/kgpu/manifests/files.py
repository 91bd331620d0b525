"""``kgpu validate``'s reading of one file: every YAML document classified and checked.

Kubernetes objects get :func:`kgpu.manifests.validate.validate_manifest`; ConfigMaps are also
opened, and entries holding device-plugin or mig-parted configs are checked with the rules the
node view applies; device-plugin configs, mig-parted configs and GPU Operator Helm values are
checked as the agent would load them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgpu.config.fields import load_yaml_documents
from kgpu.config.loader import (
    _add_configmap,
    _add_operator_values,
    _Builder,
    classify,
    other_kgpu_input,
)
from kgpu.config.migparted import parse_mig_parted
from kgpu.config.plugin import parse_plugin_config
from kgpu.errors import FieldError, FieldProblem
from kgpu.manifests.validate import validate_manifest
from kgpu.node.sharing import config_problems
from kgpu.userfiles import read_yaml


@dataclass
class FileReport:
    """What ``kgpu validate`` says about one file."""

    file: str
    ok: list[str] = field(default_factory=list)  # one line per good document
    problems: list[FieldProblem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


_KIND_LABELS = {
    "plugin-config": "device-plugin config",
    "mig-parted": "mig-parted config",
    "operator-values": "GPU Operator Helm values",
    "dra-values": "NVIDIA DRA driver Helm values",
}


def _validate_config_doc(
    doc: Any, kind: str, *, file: str, entry: str, report: FileReport, label: str
) -> None:
    try:
        configs = []  # every device-plugin config found, for the sharing modes' rules
        if kind == "plugin-config":
            parsed = parse_plugin_config(doc, file=file, entry=entry)
            report.warnings.extend(parsed.warnings)
            configs.append((parsed.config, file, entry))
        elif kind == "mig-parted":
            mig = parse_mig_parted(doc, file=file, entry=entry)
            report.warnings.extend(mig.warnings)
        elif kind in ("operator-values", "configmap"):
            builder = _Builder()
            if kind == "operator-values":
                _add_operator_values(builder, doc, file=file)
            else:
                _add_configmap(builder, doc, file=file, where=entry)
            report.warnings.extend(builder.warnings)
            configs.extend((e.config, e.source, e.entry) for e in builder.plugin.values())
    except FieldError as exc:
        report.problems.extend(exc.located(file, entry).problems)
        return
    # what the sharing modes refuse (MPS with migStrategy mixed...): their rules live with the
    # modes, in the node layer
    problems = [p for c, src, where in configs for p in config_problems(c, file=src, entry=where)]
    if problems:
        report.problems.extend(problems)
        return
    report.ok.append(label)


def _name(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata")
    if not isinstance(meta, dict):  # reported by validate_manifest
        return "?"
    ns = meta.get("namespace")
    name = meta.get("name") or meta.get("generateName") or "?"
    return f"{ns}/{name}" if ns else str(name)


def validate_text(text: str, *, file: str) -> FileReport:
    try:
        docs = load_yaml_documents(text, file=file)
    except FieldError as exc:
        report = FileReport(file)
        report.problems.extend(exc.problems)
        return report
    return validate_documents(docs, file=file)


def validate_documents(docs: list[Any], *, file: str) -> FileReport:
    """Check the parsed documents of one file (``kgpu validate`` parses each file once)."""
    report = FileReport(file)
    if not docs:
        report.problems.append(FieldProblem("no YAML documents", file=file))
        return report
    for i, doc in enumerate(docs):
        entry = f"document {i}"
        kind = classify(doc)
        if kind in ("manifest", "configmap"):
            problems = validate_manifest(doc, driver_webhooks=True)
            label = f"{entry}: {doc.get('kind')} {_name(doc)}"
            if problems:
                report.problems.extend(
                    FieldProblem(p.message, p.path, file, entry) for p in problems
                )
                continue
            if kind == "configmap":
                _validate_config_doc(doc, kind, file=file, entry=entry, report=report, label=label)
            else:
                report.ok.append(label)
        elif kind == "dra-values":
            report.ok.append(f"{entry}: {_KIND_LABELS[kind]}")
        elif kind == "unknown":
            hint = other_kgpu_input(doc)
            report.problems.append(
                FieldProblem(
                    "not a Kubernetes manifest (apiVersion/kind), device-plugin config, "
                    "mig-parted config or GPU Operator Helm values" + (f"; {hint}" if hint else ""),
                    file=file,
                    entry=entry,
                )
            )
        else:
            _validate_config_doc(
                doc,
                kind,
                file=file,
                entry=entry,
                report=report,
                label=f"{entry}: {_KIND_LABELS[kind]}",
            )
    return report


def validate_file(path: str | Path) -> FileReport:
    """One file, read through :mod:`kgpu.userfiles` (a regular file, bounded, UTF-8, YAML
    within the limits) and checked."""
    try:
        docs = read_yaml(path)
    except FieldError as exc:
        report = FileReport(str(path))
        report.problems.extend(exc.problems)
        return report
    return validate_documents(docs, file=str(path))


__all__ = ["FileReport", "validate_documents", "validate_file", "validate_text"]
