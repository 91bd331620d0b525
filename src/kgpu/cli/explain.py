"""``kgpu explain pod NS/NAME [SCENARIO | --from-cluster ...] [-o FORMAT]``: why a pod is
Pending, node by node in kube-scheduler's words, the DRA allocator's reasons per claim, what
each node advertises, and changes that let it run, each checked by simulating it
(:mod:`kgpu.sim.explain`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kgpu.cli.fromcluster import FromCluster, InCluster, Kubeconfig, MachineMap, Namespaces
from kgpu.cli.output import output_option

if TYPE_CHECKING:
    from rich.console import Console

    from kgpu.sim.explain import Explanation


def register(app: typer.Typer) -> None:
    from kgpu.cli.commands import KgpuTyper

    explain = KgpuTyper(
        name="explain",
        help="Why a pod is Pending and what would let it run, from a scenario or the cluster.",
        no_args_is_help=True,
    )
    app.add_typer(explain, name="explain")

    @explain.command("pod")
    def pod(
        name: Annotated[str, typer.Argument(metavar="NS/NAME", help="The pod (namespace/name).")],
        scenario: Annotated[
            Path | None,
            typer.Argument(
                metavar="SCENARIO",
                help="Scenario YAML (with --from-cluster: laid on top of the cluster).",
            ),
        ] = None,
        output: Annotated[str, output_option()] = "table",
        from_cluster: FromCluster = False,
        kubeconfig: Kubeconfig = None,
        in_cluster: InCluster = False,
        namespace: Namespaces = None,
        machine_map: MachineMap = None,
    ) -> None:
        """Explain a pod: the verdict per node, per claim, and changes that let it run."""
        import logging

        from kgpu.cli.fromcluster import ClusterArgs, scenario_from_cluster
        from kgpu.cli.output import (
            argument_error,
            check_output,
            fail,
            is_data,
            print_data,
            table_console,
        )
        from kgpu.errors import FieldError, FieldProblem, KgpuError
        from kgpu.sim.explain import explain_pod, pod_key
        from kgpu.sim.scenario import load_scenario

        logging.getLogger("kgpu").setLevel(logging.ERROR)
        check_output(output)
        cluster = ClusterArgs(
            kubeconfig, in_cluster, tuple(namespace or ()), tuple(machine_map or ())
        )
        if not from_cluster:
            given = [
                flag
                for flag, on in (
                    ("--kubeconfig", kubeconfig is not None),
                    ("--in-cluster", in_cluster),
                    ("--namespace", bool(namespace)),
                    ("--machine-map", bool(machine_map)),
                )
                if on
            ]
            if given:
                fail(FieldError([FieldProblem("only with --from-cluster", f) for f in given]))
            if scenario is None:
                fail(
                    argument_error(
                        "SCENARIO", "give a scenario file, or --from-cluster for the live cluster"
                    )
                )
        if scenario is not None and not scenario.is_file():
            fail(argument_error("SCENARIO", f"{scenario}: no such file"))
        try:
            key = pod_key(name)
            if from_cluster:
                loaded, _ = scenario_from_cluster(cluster, scenario)
            else:
                assert scenario is not None
                loaded = load_scenario(scenario)
            found = explain_pod(loaded, key)
        except KgpuError as exc:
            fail(exc)
        if is_data(output):
            print_data(found.to_json(), output)
        else:
            _render(found, table_console(output))


def _render(found: Explanation, out: Console) -> None:
    from rich.table import Table

    from kgpu.cli.output import header
    from kgpu.cli.plain import add_row

    where = f"on {found.node}" if found.node else ""
    header(out, f"pod {found.pod}", f"{found.phase} {where}".strip())
    if found.message:
        out.print(f"FailedScheduling: {found.message}", highlight=False, markup=False)
    table = Table(title="Nodes")
    for column in ("NODE", "VERDICT", "GPU RESOURCES USED/ALLOCATABLE", "CONFIG"):
        table.add_column(column)
    for node in found.nodes:
        gpus = ", ".join(
            f"{r} {node['allocated'].get(r, 0)}/{n}" for r, n in node["allocatable"].items()
        )
        config = node.get("deviceConfig") or "-"
        if node.get("migConfig"):
            config += f" (mig {node['migConfig']})"
        add_row(table, node["name"], node.get("verdict") or "-", gpus or "-", config)
    out.print(table)
    for entry in found.claims:
        out.print(f"Claims {', '.join(entry['claims'])}:", highlight=False, markup=False)
        for node, why in (entry.get("nodes") or {}).items():
            out.print(f"  {node}: {why}", highlight=False, markup=False)
        if entry.get("error"):
            out.print(f"  {entry['error']}", highlight=False, markup=False)
    if found.phase != "Pending" or found.node:
        return
    if not found.suggestions:
        out.print(
            f"No change kgpu tries lets it run ({found.tried} simulated).",
            highlight=False,
            markup=False,
        )
        return
    out.print("Changes that let it run (each simulated):", highlight=False, markup=False)
    for s in found.suggestions:
        out.print(f"  - {s.change}: {s.result}", highlight=False, markup=False)
