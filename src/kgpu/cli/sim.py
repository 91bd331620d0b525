"""``kgpu sim [SCENARIO] [-o table|wide|json|yaml] [--watch] [--expect FILE]
[--serve-metrics HOST:PORT] [--report FILE.html]``: run a simulated cluster. Without a scenario
it runs the built-in quickstart, which retells the seed guides. With expectations (``--expect
FILE`` or the scenario's ``expect`` key) it exits 1 when one does not hold, listing each, so CI
can gate on it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kgpu.cli.fromcluster import FromCluster, InCluster, Kubeconfig, MachineMap, Namespaces
from kgpu.cli.output import OUTPUT_FORMATS, output_option

#: ``kgpu sim``'s formats: every command's, and ``summary`` (node groups, pods per workload,
#: events per reason: for clusters too large to print).
SIM_FORMATS = (*OUTPUT_FORMATS, "summary")

if TYPE_CHECKING:
    from rich.console import Console

    from kgpu.cli.fromcluster import ClusterArgs
    from kgpu.sim.expect import ExpectResult
    from kgpu.sim.fromcluster import Imported
    from kgpu.sim.simulation import Simulation


def register(app: typer.Typer) -> None:
    @app.command("sim")
    def sim(
        scenario: Annotated[
            Path | None,
            typer.Argument(
                metavar="SCENARIO",
                help="Scenario YAML (- reads standard input); omit to run the built-in quickstart.",
            ),
        ] = None,
        output: Annotated[
            str,
            output_option(
                SIM_FORMATS, "summary (node groups, pods per workload, events per reason)"
            ),
        ] = "table",
        watch: Annotated[
            bool,
            typer.Option("--watch", "--steps", help="Show the cluster after every step."),
        ] = False,
        expect: Annotated[
            Path | None,
            typer.Option(
                "--expect",
                metavar="FILE",
                help="Assertions on the run (final state, per step); exit 1 listing each that "
                "fails. Checked together with the scenario's own expect key.",
            ),
        ] = None,
        serve_metrics: Annotated[
            str | None,
            typer.Option(
                "--serve-metrics",
                metavar="HOST:PORT",
                help="After the run, serve the simulated GPUs' DCGM metrics until Ctrl-C.",
            ),
        ] = None,
        report_file: Annotated[
            Path | None,
            typer.Option(
                "--report",
                metavar="FILE.html",
                help="Also write one self-contained HTML page: the cluster map after every "
                "step and plots over the simulated clock.",
            ),
        ] = None,
        from_cluster: FromCluster = False,
        kubeconfig: Kubeconfig = None,
        in_cluster: InCluster = False,
        namespace: Namespaces = None,
        machine_map: MachineMap = None,
        save_file: Annotated[
            Path | None,
            typer.Option(
                "--save",
                metavar="FILE",
                help="With --from-cluster: also write the imported cluster as a scenario file "
                "(kgpu sim FILE replays it).",
            ),
        ] = None,
        anonymize: Annotated[
            bool,
            typer.Option(
                "--anonymize",
                help="With --save: replace names, images and UUIDs consistently.",
            ),
        ] = False,
    ) -> None:
        """Simulate a GPU cluster: apply manifests, schedule, allocate devices, report."""
        import logging

        from kgpu.cli.fromcluster import ClusterArgs, save, scenario_from_cluster
        from kgpu.cli.output import (
            argument_error,
            check_output,
            fail,
            is_data,
            print_data,
            stream_json,
            table_console,
        )
        from kgpu.cli.sim_progress import ProgressBar
        from kgpu.errors import KgpuError
        from kgpu.sim.expect import ExpectRun, load_expectations
        from kgpu.sim.quickstart import quickstart_path
        from kgpu.sim.report import render, render_summary, report_parts
        from kgpu.sim.scenario import load_scenario
        from kgpu.sim.simulation import Simulation

        # the simulator reports what went wrong as events; keep node code's logs off the screen
        logging.getLogger("kgpu").setLevel(logging.ERROR)
        check_output(output, SIM_FORMATS)
        cluster = ClusterArgs(
            kubeconfig, in_cluster, tuple(namespace or ()), tuple(machine_map or ())
        )
        _check_cluster_flags(from_cluster, cluster, save_file, anonymize)
        if scenario is not None and str(scenario) != "-" and not scenario.is_file():
            why = (
                "is a directory; name a scenario file in it"
                if scenario.is_dir()
                else ("no such file")
            )
            fail(argument_error("SCENARIO", f"{scenario}: {why}"))
        imported = None
        try:
            if from_cluster:
                loaded, imported = scenario_from_cluster(cluster, scenario)
                if save_file is not None:
                    size = save(imported, save_file, anonymize)
                    typer.echo(f"wrote {save_file} ({size / 1024:.0f} KiB)", err=True)
            else:
                loaded = load_scenario(scenario if scenario is not None else quickstart_path())
            expectations = loaded.expect
            if expect is not None:
                expectations = expectations + load_expectations(expect, loaded.steps)
            simulation = Simulation(loaded, record_steps=watch)
            checker = None
            if expectations.blocks:
                checker = ExpectRun(expectations, loaded.steps)
                observe = checker.observe
                simulation.observers.append(lambda step: observe(simulation.context, step))
            if watch and not is_data(output):
                out = table_console(output)
                printer = _StepPrinter(simulation, out, 0 if output == "wide" else None)
                simulation.observers.append(lambda _step: printer.print_latest())
            picture = None
            with ProgressBar(simulation, sys.stderr):
                if report_file is None:
                    simulation.run()
                else:
                    from kgpu.sim.html import check_target, record_run

                    check_target(report_file)
                    picture = record_run(simulation)  # runs the same steps, drawing each
            result = checker.finish(simulation.context) if checker is not None else None
            if imported is not None:
                _hold_to_cluster(simulation, imported)
        except KgpuError as exc:
            fail(exc)
        try:
            if is_data(output):
                parts = list(report_parts(simulation.context, copies=False))
                if imported is not None:
                    extra = {
                        "unsupported": imported.unsupported,
                        "warnings": imported.warnings,
                    }
                    parts = [
                        (k, iter([*extra[k], *v]) if k in extra else v) for k, v in parts
                    ]
                if watch:
                    parts.append(("steps", iter(simulation.snapshots)))
                if result is not None:
                    parts.append(("expect", result.to_json()))
                if output == "json":
                    stream_json(parts)  # written as built: 100,000 pods never held whole
                else:
                    print_data(
                        {k: list(v) if isinstance(v, Iterator) else v for k, v in parts}, output
                    )
            elif output == "summary":
                render_summary(simulation.context, table_console(output))
            else:
                render(
                    simulation.context,
                    table_console(output),
                    cell_limit=0 if output == "wide" else None,
                )
                if imported is not None:
                    _print_import(imported)
            if result is not None:
                _print_expect(result)
            if report_file is not None and picture is not None:
                from kgpu.sim.html import write_report

                try:
                    size = write_report(report_file, picture)
                except KgpuError as exc:
                    fail(exc)
                typer.echo(f"wrote {report_file} ({size / 1024:.0f} KiB)", err=True)
            if serve_metrics:
                _serve(simulation, serve_metrics)
        finally:
            simulation.close()
        if result is not None and not result.ok:
            raise typer.Exit(1)


def _check_cluster_flags(
    from_cluster: bool, cluster: ClusterArgs, save_file: Path | None, anonymize: bool
) -> None:
    """The flags that only mean something with --from-cluster (or --save), refused without."""
    from kgpu.cli.output import fail
    from kgpu.errors import FieldError, FieldProblem

    needs = {
        "--kubeconfig": cluster.kubeconfig is not None,
        "--in-cluster": cluster.in_cluster,
        "--namespace": bool(cluster.namespaces),
        "--machine-map": bool(cluster.machine_map),
        "--save": save_file is not None,
    }
    problems = [
        FieldProblem("only with --from-cluster", flag)
        for flag, given in needs.items()
        if given and not from_cluster
    ]
    if anonymize and save_file is None:
        problems.append(FieldProblem("only with --save FILE", "--anonymize"))
    if problems:
        fail(FieldError(problems))


def _hold_to_cluster(simulation: Simulation, imported: Imported) -> None:
    """Warn where a simulated node advertises other GPU amounts than the API server reports."""
    from kgpu.sim.fromcluster import differences
    from kgpu.sim.report import node_json

    imported.warnings.extend(
        differences(imported.expected, (node_json(n) for n in simulation.nodes))
    )


def _print_import(imported: Imported) -> None:
    """What the import skipped and approximated, on stderr after the cluster tables."""
    from kgpu.cli.output import err_console
    from kgpu.cli.plain import cell

    for line in imported.unsupported:
        err_console.print(
            f"[yellow]unsupported[/yellow] {cell(line)}", highlight=False, soft_wrap=True
        )
    for line in imported.warnings:
        err_console.print(f"[yellow]warning[/yellow] {cell(line)}", highlight=False, soft_wrap=True)


class _StepPrinter:
    """--watch: each step printed (and flushed) as soon as it has run. Only the latest
    snapshot is kept once printed: a table run holds one step's picture, not every step's."""

    def __init__(self, simulation: Simulation, out: Console, limit: int | None) -> None:
        self.simulation, self.out, self.limit, self.printed = simulation, out, limit, 0

    def print_latest(self) -> None:
        from kgpu.sim.report import render_step

        snapshots = self.simulation.snapshots
        render_step(snapshots[-1], self.printed, self.out, cell_limit=self.limit)
        self.printed += 1
        del snapshots[:-1]
        self.out.file.flush()


def _print_expect(result: ExpectResult) -> None:
    """What held and what did not, on stderr (stdout stays the report, -o json included)."""
    from kgpu.cli.output import err_console
    from kgpu.cli.plain import cell

    color = "green" if result.ok else "red"
    err_console.print(
        f"[{color}]{cell(result.summary())}[/{color}]", highlight=False, soft_wrap=True
    )
    for failure in result.failures:
        err_console.print(
            f"[red]FAIL[/red] {cell(failure.line())}", highlight=False, soft_wrap=True
        )


def _serve(simulation: object, address: str) -> None:
    from kgpu.cli.output import fail
    from kgpu.cli.signals import StopSignals
    from kgpu.errors import KgpuError

    try:
        from kgpu.sim.metrics import serve_sim_metrics
    except ImportError:
        fail("--serve-metrics: the metrics exporter is not part of this build")
    try:
        server = serve_sim_metrics(simulation, address)
    except (OSError, ValueError, KgpuError) as exc:
        fail(f"--serve-metrics {address}: {exc}")
    typer.echo(
        f"serving simulated GPU metrics on http://{address}/metrics (Ctrl-C stops)", err=True
    )
    stop = StopSignals().install()
    try:
        stop.wait_forever()
        typer.echo(f"{stop.name}: stopping the metrics server", err=True)
    finally:
        server.stop()
    if stop.exit_code:
        raise typer.Exit(stop.exit_code)
