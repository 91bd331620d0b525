"""``kgpu validate FILE...``: check configs and manifests before they reach a cluster.

Manifests get :func:`kgpu.manifests.validate_manifest`, the check ``kgpu sim`` runs on what it
applies (the API server's rules, the official schema, ComputeDomains by their controller's
parser), so a file ``validate`` accepts is one the simulator runs; scenarios are loaded by the
simulator's own loader.

With ``--consumable-shares memory`` (and the grid flags ``kgpu agent`` and ``kgpu plan`` take),
ResourceClaims and ResourceClaimTemplates also get the chart's memory-share admission check
(:mod:`kgpu.dra.sharecheck`): a ``gpu.nvidia.com`` memory request below the minimum or off the
step is an error naming its field and the sizes to ask, as the cluster would refuse it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from kgpu.dra.shares import SharePolicy
    from kgpu.manifests import FileReport


def _one_mapping(docs: list[Any]) -> dict[Any, Any] | None:
    """The file's only YAML document when it is a mapping without apiVersion/kind."""
    if len(docs) != 1 or not isinstance(docs[0], dict) or {"apiVersion", "kind"} & set(docs[0]):
        return None
    return docs[0]


def looks_like_scenario(docs: list[Any]) -> bool:
    """One document whose top level has a scenario's keys and no apiVersion/kind."""
    doc = _one_mapping(docs)
    return (
        doc is not None
        and not looks_like_expect(docs)
        and bool(set(doc) & {"nodes", "apply", "steps"})
    )


def looks_like_expect(docs: list[Any]) -> bool:
    """A ``kgpu sim --expect`` file: ``final`` and/or ``steps`` whose entries name a ``step``."""
    doc = _one_mapping(docs)
    if doc is None or not set(doc) <= {"final", "steps"}:
        return False
    steps = doc.get("steps")
    return "final" in doc or (
        isinstance(steps, list) and any(isinstance(s, dict) and "step" in s for s in steps)
    )


def validate_expect(path: Path, doc: dict[str, Any]) -> FileReport:
    """Check an expect file on its own: everything but whether its steps exist, which
    ``kgpu sim SCENARIO --expect FILE`` checks against the scenario."""
    from kgpu.errors import FieldError
    from kgpu.manifests import FileReport
    from kgpu.sim.expect.schema import parse_expectations
    from kgpu.userfiles import display_name

    report = FileReport(display_name(path))
    try:
        expect = parse_expectations(doc, display_name(path), None)
    except FieldError as exc:
        report.problems.extend(exc.problems)
        return report
    report.ok.append(
        f"kgpu sim expect file ({expect.assertions} assertion(s) at {len(expect.blocks)} "
        "point(s); the steps it names are checked by kgpu sim SCENARIO --expect FILE)"
    )
    return report


def validate_scenario(path: Path, doc: dict[str, Any]) -> FileReport:
    """Check a ``kgpu sim`` scenario with the parser ``kgpu sim`` runs (nodes, configs, every
    manifest it applies, every step)."""
    from kgpu.errors import FieldError, FieldProblem, KgpuError
    from kgpu.manifests import FileReport
    from kgpu.sim.scenario import parse_scenario
    from kgpu.userfiles import display_name

    report = FileReport(display_name(path))
    try:
        scenario = parse_scenario(doc, display_name(path), path.resolve().parent)
    except FieldError as exc:
        report.problems.extend(exc.problems)
        return report
    except KgpuError as exc:
        report.problems.append(FieldProblem(str(exc), file=display_name(path)))
        return report
    nodes = sum(spec.count for spec in scenario.nodes)
    report.ok.append(
        f"kgpu sim scenario {scenario.name} ({nodes} node(s), {len(scenario.apply)} "
        f"object(s) to apply, {len(scenario.steps)} step(s))"
    )
    return report


def looks_like_allocate_input(docs: list[Any]) -> bool:
    """A ``kgpu allocate`` input: one mapping with ``node`` and its lists of objects."""
    from kgpu.cli.allocate import KEYS

    doc = _one_mapping(docs)
    return doc is not None and "node" in doc and set(doc) <= set(KEYS)


def validate_allocate_input(path: Path, doc: dict[str, Any]) -> FileReport:
    """Check a ``kgpu allocate`` input with the checks ``kgpu allocate`` runs before
    allocating (shapes, the official schema, CEL that compiles)."""
    from kgpu.cli.allocate import check_input
    from kgpu.errors import FieldError
    from kgpu.manifests import FileReport
    from kgpu.userfiles import display_name

    report = FileReport(display_name(path))
    try:
        data = check_input(doc, display_name(path))
    except FieldError as exc:
        report.problems.extend(exc.problems)
        return report
    report.ok.append(
        f"kgpu allocate input for node {data['node']['name']} ({len(data['claims'])} claim(s) "
        f"to allocate, {len(data['slices'])} slice(s), {len(data['classes'])} class(es))"
    )
    return report


def check_shares(report: FileReport, docs: list[Any], shares: SharePolicy) -> None:
    """Add the memory-share admission problems of each claim or claim template that passed
    the manifest checks (:func:`kgpu.dra.sharecheck.share_problems`)."""
    from kgpu.dra.sharecheck import share_problems
    from kgpu.errors import FieldProblem

    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or doc.get("kind") not in (
            "ResourceClaim",
            "ResourceClaimTemplate",
        ):
            continue
        entry = f"document {i}"
        if any(p.entry == entry for p in report.problems):
            continue  # not a valid object: the API server refuses it before admission
        report.problems.extend(
            FieldProblem(p.message, p.path, report.file, entry) for p in share_problems(doc, shares)
        )


def validate_path(path: Path, shares: SharePolicy | None = None) -> FileReport:
    """One file, read and parsed once (:mod:`kgpu.userfiles`), checked as what it is: an
    expect file, a scenario, or configs and manifests (claims also against ``shares``, the
    cluster's GPU share policy, when given)."""
    from kgpu.errors import FieldError
    from kgpu.manifests import FileReport, validate_documents
    from kgpu.userfiles import display_name, read_yaml

    try:
        docs = read_yaml(path)
    except FieldError as exc:
        report = FileReport(display_name(path))
        report.problems.extend(exc.problems)
        return report
    if looks_like_expect(docs):
        return validate_expect(path, docs[0])
    if looks_like_scenario(docs):
        return validate_scenario(path, docs[0])
    if looks_like_allocate_input(docs):
        return validate_allocate_input(path, docs[0])
    report = validate_documents(docs, file=display_name(path))
    if shares is not None:
        check_shares(report, docs, shares)
    return report


def register(app: typer.Typer) -> None:
    @app.command("validate")
    def validate(
        files: Annotated[
            list[Path],
            typer.Argument(
                help="YAML files: device-plugin configs, ConfigMaps, mig-parted "
                "configs, GPU Operator Helm values, Kubernetes manifests (multi-document is fine), "
                "kgpu sim scenarios, expect files and kgpu allocate inputs; - reads standard "
                "input."
            ),
        ],
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print errors only.")] = False,
        consumable_shares: Annotated[
            str,
            typer.Option(
                "--consumable-shares",
                metavar="MODE",
                help="The cluster's GPU share mode (the chart's consumableShares): "
                "with memory, ResourceClaims and templates are checked as its admission policy "
                "checks them (memory requests on the share grid).",
            ),
        ] = "disabled",
        share_memory_minimum_mib: Annotated[
            int,
            typer.Option(
                "--share-memory-minimum-mib",
                min=1,
                help="Smallest memory share of a GPU, in MiB (shareMemoryMinimumMiB).",
            ),
        ] = 1024,
        share_memory_step_mib: Annotated[
            int,
            typer.Option(
                "--share-memory-step-mib",
                min=1,
                help="Step of the memory share grid, in MiB (shareMemoryStepMiB).",
            ),
        ] = 1024,
    ) -> None:
        """Check each file; exit 1 with field-level errors (file, document, path)."""
        from rich.markup import escape

        from kgpu.cli.output import console, err_console
        from kgpu.cli.plain import warn
        from kgpu.dra.shares import parse_share_policy
        from kgpu.errors import MAX_PROBLEMS_SHOWN, FieldError, more_problems
        from kgpu.manifests import schema_validation_available

        try:
            shares = parse_share_policy(
                consumable_shares,
                memory_minimum_mib=share_memory_minimum_mib,
                memory_step_mib=share_memory_step_mib,
                path="--consumable-shares",
            )
        except FieldError as exc:
            raise typer.BadParameter(
                exc.problems[0].message, param_hint="--consumable-shares"
            ) from None
        failed = False
        for path in files:
            report = validate_path(path, shares if shares.enforced else None)
            for problem in report.problems[:MAX_PROBLEMS_SHOWN]:
                err_console.print(
                    f"[red]error:[/red] {escape(str(problem))}", highlight=False, soft_wrap=True
                )
            if len(report.problems) > MAX_PROBLEMS_SHOWN:
                rest = more_problems(len(report.problems) - MAX_PROBLEMS_SHOWN)
                err_console.print(f"[red]error:[/red] {escape(rest)}", highlight=False)
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
