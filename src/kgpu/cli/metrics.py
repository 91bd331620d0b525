"""``kgpu metrics``: the DCGM-compatible exporter on its own."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("metrics")
    def metrics(
        machine: str = typer.Option(
            "nvml",
            "--machine",
            "-m",
            help="nvml for the real GPUs, or a machine profile to simulate",
        ),
        address: str = typer.Option(
            ":9400", "--address", help="HOST:PORT to serve /metrics on (dcgm-exporter's default)"
        ),
        kubelet_root: str = typer.Option(
            "/var/lib/kubelet",
            "--kubelet-root",
            help="kubelet root for pod attribution (pod-resources/kubelet.sock); '' turns it off",
        ),
        hostname_label: str = typer.Option(
            "Hostname",
            "--hostname-label",
            help="Hostname (released dcgm-exporter) or hostname (its main branch)",
        ),
        hostname: str = typer.Option(
            "", "--hostname", help="value of the hostname label (default: $NODE_NAME or the host)"
        ),
        proc_root: str = typer.Option(
            "/proc", "--proc-root", help="where the host's /proc is (process -> pod attribution)"
        ),
        once: bool = typer.Option(
            False, "--once", help="print one scrape to stdout and exit instead of serving"
        ),
        collectors: str = typer.Option(
            "",
            "--collectors",
            "-f",
            envvar="DCGM_EXPORTER_COLLECTORS",
            help="a counters CSV in dcgm-exporter's format selecting the fields "
            "(default: dcgm-exporter's default set)",
        ),
    ) -> None:
        """Serve GPU metrics with dcgm-exporter's names, plus per-pod series on shared GPUs."""
        import os
        import socket
        import sys

        from rich.console import Console

        from kgpu.cli.plain import fail, warn
        from kgpu.cli.signals import StopSignals
        from kgpu.drivers.metrics import MetricsComponent
        from kgpu.errors import FieldError, FieldProblem, KgpuError
        from kgpu.hardware import open_backend
        from kgpu.hardware.backend import BackendError
        from kgpu.metrics.collector import HOSTNAME_LABELS
        from kgpu.metrics.counters import counters_for
        from kgpu.metrics.server import parse_address

        if hostname_label not in HOSTNAME_LABELS:
            fail(
                FieldError(
                    FieldProblem(
                        f"{hostname_label!r} is not allowed; use one of "
                        + ", ".join(HOSTNAME_LABELS),
                        path="--hostname-label",
                    )
                )
            )
        node = hostname or os.environ.get("NODE_NAME", "") or socket.gethostname()
        try:
            counters = counters_for(collectors or None, env={})
            parse_address(address)
            backend = open_backend(machine, hostname=node)
        except (KgpuError, BackendError) as exc:
            fail(exc if isinstance(exc, KgpuError) else str(exc))
        for warning in counters.warnings:
            warn(Console(stderr=True, emoji=False), warning)
        component = MetricsComponent(
            address,
            backend,
            kubelet_root or None,
            node,
            hostname_label=hostname_label,
            proc_root=proc_root,
            counters=counters,
        )
        if once:
            if component.cache is not None:
                component.cache.refresh()
            sys.stdout.write(component.scrape())
            component.stop()
            backend.close()
            return
        stop = StopSignals().install()
        try:
            component.start()
        except OSError as exc:
            said = exc.strerror or ""
            fail(said if address in said else f"cannot serve on {address}: {exc}")
        typer.echo(f"serving /metrics on {address} ({machine}); Ctrl-C stops", err=True)
        try:
            stop.wait_forever()
            typer.echo(f"{stop.name}: stopping the exporter", err=True)
        finally:
            component.stop()
            backend.close()
        if stop.exit_code:
            raise typer.Exit(stop.exit_code)
