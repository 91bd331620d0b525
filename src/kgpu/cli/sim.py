"""``kgpu sim [SCENARIO] [-o json] [--watch] [--serve-metrics HOST:PORT] [--report FILE.html]``:
run a simulated cluster. Without a scenario it runs the built-in quickstart, which retells the
seed guides."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command("sim")
    def sim(
        scenario: Annotated[
            Path | None,
            typer.Argument(help="Scenario YAML; omit to run the built-in quickstart."),
        ] = None,
        output: Annotated[
            str, typer.Option("-o", "--output", help="table (default) or json")
        ] = "table",
        watch: Annotated[
            bool,
            typer.Option("--watch", "--steps", help="Show the cluster after every step."),
        ] = False,
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
    ) -> None:
        """Simulate a GPU cluster: apply manifests, schedule, allocate devices, report."""
        import logging

        from kgpu.cli.output import console, fail, print_json
        from kgpu.errors import KgpuError
        from kgpu.sim.quickstart import quickstart_path
        from kgpu.sim.report import render, render_steps
        from kgpu.sim.scenario import load_scenario
        from kgpu.sim.simulation import Simulation

        # the simulator reports what went wrong as events; keep node code's logs off the screen
        logging.getLogger("kgpu").setLevel(logging.ERROR)
        if output not in ("table", "json"):
            fail(f"--output {output!r}: allowed: table, json")
        picture = None
        try:
            loaded = load_scenario(scenario if scenario is not None else quickstart_path())
            simulation = Simulation(loaded, record_steps=watch)
            if report_file is None:
                simulation.run()
            else:
                from kgpu.sim.html import check_target, record_run

                check_target(report_file)
                picture = record_run(simulation)  # runs the same steps, drawing each
        except KgpuError as exc:
            fail(exc)
        try:
            if output == "json":
                report = simulation.report()
                if watch:
                    report["steps"] = simulation.snapshots
                print_json(report)
            else:
                if watch:
                    render_steps(simulation.snapshots, console)
                render(simulation.context, console)
            if report_file is not None and picture is not None:
                from kgpu.sim.html import write_report

                try:
                    size = write_report(report_file, picture)
                except KgpuError as exc:
                    fail(exc)
                typer.echo(f"wrote {report_file} ({size / 1024:.0f} KiB)", err=True)
            if serve_metrics:
                try:
                    from kgpu.sim.metrics import serve_sim_metrics
                except ImportError:
                    fail("--serve-metrics: the metrics exporter is not part of this build")
                typer.echo(
                    f"serving simulated GPU metrics on http://{serve_metrics}/metrics "
                    "(Ctrl-C stops)",
                    err=True,
                )
                try:
                    serve_sim_metrics(simulation, serve_metrics, block=True)
                except (OSError, ValueError, KgpuError) as exc:
                    fail(f"--serve-metrics {serve_metrics}: {exc}")
        finally:
            simulation.close()
