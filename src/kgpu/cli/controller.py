"""``kgpu controller``: ComputeDomains, DeviceClasses and the clique placement webhook on a
cluster, leader-elected (docs/computedomains.md, docs/cluster.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kgpu.cli.options import InCluster, LogLevel, setup_logging
from kgpu.computedomain.objects import DAEMON_IMAGE, DRIVER_NAMESPACE


def register(app: typer.Typer) -> None:
    @app.command("controller")
    def controller(
        kubeconfig: Annotated[
            Path | None,
            typer.Option("--kubeconfig", help="Talk to the API server of this kubeconfig."),
        ] = None,
        in_cluster: InCluster = False,
        namespace: Annotated[
            str,
            typer.Option(
                "--namespace",
                envvar="POD_NAMESPACE",
                help="Where the IMEX DaemonSets, daemon claim templates, ComputeDomainCliques "
                "and the leader Lease live.",
            ),
        ] = DRIVER_NAMESPACE,
        identity: Annotated[
            str,
            typer.Option(
                "--identity",
                envvar="POD_NAME",
                help="This replica's name in the Lease (default: the hostname).",
            ),
        ] = "",
        health_address: Annotated[
            str | None,
            typer.Option(
                "--health-address",
                help="Serve /healthz (loops alive) and /readyz (informers listed, webhook "
                "serving) on HOST:PORT; standbys are healthy and ready.",
            ),
        ] = None,
        webhook_address: Annotated[
            str | None,
            typer.Option(
                "--webhook-address",
                help="Serve the mutating admission webhook (POST /mutate-pods, HTTPS) that "
                "places a ComputeDomain's pods in one NVLink clique, on HOST:PORT.",
            ),
        ] = None,
        webhook_cert_dir: Annotated[
            Path | None,
            typer.Option(
                "--webhook-cert-dir", help="Directory holding the webhook's tls.crt and tls.key."
            ),
        ] = None,
        webhook_client_ca: Annotated[
            Path | None,
            typer.Option(
                "--webhook-client-ca",
                help="Require a client certificate signed by this CA (the API server's, when "
                "kube-apiserver is configured to present one to webhooks).",
            ),
        ] = None,
        device_classes: Annotated[
            str,
            typer.Option(
                "--device-classes",
                help="DeviceClass groups kept present: gpus, compute-domains (comma-separated; "
                "empty: none).",
            ),
        ] = "gpus,compute-domains",
        imex_daemon_image: Annotated[
            str,
            typer.Option(
                "--imex-daemon-image",
                help="Image of the IMEX daemons the ComputeDomain DaemonSets run (it must "
                "hold nvidia-imex, as upstream's driver image does).",
            ),
        ] = DAEMON_IMAGE,
        lease_name: Annotated[
            str, typer.Option("--lease-name", help="Name of the leader Lease.")
        ] = "kgpu-controller",
        lease_duration: Annotated[
            float,
            typer.Option(
                "--leader-elect-lease-duration",
                help="Seconds a standby waits after the leader's last renewal before taking over.",
            ),
        ] = 15.0,
        renew_deadline: Annotated[
            float,
            typer.Option(
                "--leader-elect-renew-deadline",
                help="Seconds the leader keeps trying to renew before it stops writing.",
            ),
        ] = 10.0,
        retry_period: Annotated[
            float,
            typer.Option(
                "--leader-elect-retry-period", help="Seconds between attempts to take or renew."
            ),
        ] = 2.0,
        workers: Annotated[
            int, typer.Option("--workers", help="Domains synced in parallel.", min=1, max=64)
        ] = 2,
        qps: Annotated[
            float,
            typer.Option(
                "--kube-api-qps",
                help="Client-side limit: requests per second (kube-controller-manager's default).",
            ),
        ] = 20.0,
        burst: Annotated[
            int, typer.Option("--kube-api-burst", help="Client-side limit: burst.", min=1)
        ] = 30,
        log_level: LogLevel = "info",
    ) -> None:
        """Run the ComputeDomain controller until SIGTERM (exit 1 if it loses the Lease)."""
        import logging
        import signal
        import socket
        import threading

        from kgpu.cli.plain import fail
        from kgpu.cluster.kube import connection_problems
        from kgpu.controller import Controller, ControllerOptions
        from kgpu.controller.deviceclasses import GROUPS
        from kgpu.controller.leaderelection import LeaseConfig
        from kgpu.errors import FieldError, FieldProblem, KgpuError
        from kgpu.metrics.server import parse_address

        problems: list[FieldProblem] = []
        levels = ("debug", "info", "warning", "error")
        if log_level.lower() not in levels:
            problems.append(
                FieldProblem(f"{log_level!r}: allowed {', '.join(levels)}", "--log-level")
            )
        addresses: dict[str, tuple[str, int] | None] = {}
        for option, value in (
            ("--health-address", health_address),
            ("--webhook-address", webhook_address),
        ):
            addresses[option] = None
            if value is not None:
                try:
                    addresses[option] = parse_address(value, option)
                except FieldError as exc:
                    problems.extend(exc.problems)
        if webhook_address is not None:
            if webhook_cert_dir is None:
                problems.append(
                    FieldProblem(
                        "needed with --webhook-address (tls.crt, tls.key)", "--webhook-cert-dir"
                    )
                )
            else:
                for name in ("tls.crt", "tls.key"):
                    if not (webhook_cert_dir / name).is_file():
                        problems.append(
                            FieldProblem(
                                f"{webhook_cert_dir / name}: no such file", "--webhook-cert-dir"
                            )
                        )
        if webhook_client_ca is not None and not webhook_client_ca.is_file():
            problems.append(
                FieldProblem(f"{webhook_client_ca}: no such file", "--webhook-client-ca")
            )
        groups = tuple(g.strip() for g in device_classes.split(",") if g.strip())
        for group in groups:
            if group not in GROUPS:
                problems.append(
                    FieldProblem(f"{group!r}: allowed {', '.join(GROUPS)}", "--device-classes")
                )
        if not imex_daemon_image.strip() or any(c.isspace() for c in imex_daemon_image):
            problems.append(
                FieldProblem(
                    f"{imex_daemon_image!r} is not an image reference "
                    "(REGISTRY/NAME:TAG or NAME@sha256:DIGEST)",
                    "--imex-daemon-image",
                )
            )
        me = identity or socket.gethostname()
        try:
            LeaseConfig(
                lease_name, namespace, me, lease_duration, renew_deadline, retry_period
            ).check()
        except FieldError as exc:
            problems.extend(exc.problems)
        problems.extend(connection_problems(kubeconfig, in_cluster))
        if problems:
            fail(FieldError(problems))

        setup_logging(log_level)
        log = logging.getLogger("kgpu.controller")
        try:
            from kgpu.cluster.kube import KubeStore

            source = None if kubeconfig is None else str(kubeconfig)
            store = KubeStore.from_config(
                source, qps=qps, burst=burst, user_agent=f"kgpu-controller/{me}"
            )
            # the Lease and the webhook's reads each get a client (and a rate limit) of
            # their own: admission traffic never delays a renewal
            lease_store = KubeStore.from_config(source, user_agent=f"kgpu-controller/{me}")
            webhook_store = KubeStore.from_config(
                source, qps=qps, burst=burst, user_agent=f"kgpu-controller/{me}"
            )
        except KgpuError as exc:
            fail(exc)
        options = ControllerOptions(
            namespace=namespace,
            identity=me,
            lease_name=lease_name,
            lease_duration_s=lease_duration,
            renew_deadline_s=renew_deadline,
            retry_period_s=retry_period,
            workers=workers,
            device_classes=groups,
            daemon_image=imex_daemon_image,
            health_address=addresses["--health-address"],
            webhook_address=addresses["--webhook-address"],
            webhook_cert_dir=webhook_cert_dir,
            webhook_client_ca=webhook_client_ca,
        )
        try:
            ctl = Controller(store, options, lease_store=lease_store, webhook_store=webhook_store)
            ctl.start()
        except (KgpuError, OSError) as exc:
            fail(f"cannot start the controller: {exc}")
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        log.info(
            "controller %s started against %s (namespace %s); waiting for Lease %s",
            me,
            store.host,
            namespace,
            lease_name,
        )
        while not stop.is_set() and not ctl.wait(0.5):
            pass
        lost = ctl.lost_leadership
        ctl.stop()
        for client in (store, lease_store, webhook_store):
            client.close()
        if lost:
            fail("lost the leader Lease; exiting so that a fresh replica takes part again")
