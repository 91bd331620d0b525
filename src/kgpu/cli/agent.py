"""``kgpu agent``: the node agent daemon (device plugin, health, MPS, labels, components)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kgpu.agent.options import AgentOptions
from kgpu.cli.options import InCluster, LogLevel, setup_logging

DEFAULTS = AgentOptions()  # each flag's default is the option's


def register(app: typer.Typer) -> None:
    @app.command("agent")
    def agent(
        machine: Annotated[
            str,
            typer.Option(
                "--machine", "-m", help="nvml (real GPUs), a machine profile, or a snapshot .json."
            ),
        ] = DEFAULTS.machine,
        config: Annotated[
            list[Path] | None,
            typer.Option(
                "--config",
                "-c",
                help="Device-plugin config, ConfigMap, mig-parted config or GPU Operator Helm "
                "values (repeatable); re-read when it changes.",
            ),
        ] = None,
        config_name: Annotated[
            str | None,
            typer.Option(
                "--config-name",
                help="Config entry when the node has no nvidia.com/device-plugin.config label.",
            ),
        ] = None,
        mig_config: Annotated[
            str | None,
            typer.Option(
                "--mig-config", help="mig-parted config when there is no nvidia.com/mig.config."
            ),
        ] = None,
        node_name: Annotated[
            str,
            typer.Option("--node-name", envvar="NODE_NAME", help="Node name (default: hostname)."),
        ] = "",
        label: Annotated[
            list[str] | None, typer.Option("--label", "-l", help="Node label k=v (repeatable).")
        ] = None,
        labels_file: Annotated[
            Path | None,
            typer.Option(
                "--labels-file",
                help="The Node's labels as key=value lines (or a JSON/YAML mapping); re-read "
                "when it changes and on SIGHUP.",
            ),
        ] = None,
        kubelet_root: Annotated[
            Path, typer.Option("--kubelet-root", help="The kubelet's root directory.")
        ] = DEFAULTS.kubelet_root,
        nfd_features_dir: Annotated[
            Path | None,
            typer.Option(
                "--nfd-features-dir",
                help="Write the node's labels to <DIR>/kgpu-features for NFD's local source.",
            ),
        ] = None,
        metrics_address: Annotated[
            str | None,
            typer.Option("--metrics-address", help="Serve DCGM-compatible metrics on HOST:PORT."),
        ] = None,
        kubeconfig: Annotated[
            Path | None,
            typer.Option(
                "--kubeconfig",
                help="Talk to the API server of this kubeconfig (DRA: publish ResourceSlices, "
                "read claims and ComputeDomains).",
            ),
        ] = None,
        in_cluster: InCluster = False,
        clique: Annotated[
            str | None,
            typer.Option(
                "--clique",
                help="<clusterUUID>.<cliqueId>: put a built-in profile's GPUs in an NVLink "
                "fabric clique (e.g. gb200), as the fabric manager does on a real tray.",
            ),
        ] = None,
        hostname_label: Annotated[
            str,
            typer.Option(
                "--hostname-label",
                help="Metric label naming the node: Hostname (dcgm-exporter releases) or "
                "hostname (its main branch).",
            ),
        ] = DEFAULTS.hostname_label,
        cdi_root: Annotated[
            Path, typer.Option("--cdi-root", help="Where CDI specs are written (DRA).")
        ] = DEFAULTS.cdi_root,
        dra: Annotated[
            bool | None,
            typer.Option("--dra/--no-dra", help="Serve the DRA kubelet plugin (default: on)."),
        ] = None,
        consumable_shares: Annotated[
            str | None,
            typer.Option(
                "--consumable-shares",
                metavar="MODE",
                help="DRA: share whole GPUs between claims (NVIDIA's modes): disabled, memory "
                "(claims ask for GPU memory, enforced through MPS), unlimited or a share count N "
                "(time-sliced, not enforced). Default: $CONSUMABLE_SHARES, else disabled.",
            ),
        ] = None,
        share_memory_minimum_mib: Annotated[
            int,
            typer.Option(
                "--share-memory-minimum-mib",
                help="memory mode: the smallest share of a GPU's memory, in MiB.",
            ),
        ] = DEFAULTS.share_memory_minimum_mib,
        share_memory_step_mib: Annotated[
            int,
            typer.Option(
                "--share-memory-step-mib",
                help="memory mode: shares are the minimum plus multiples of this, in MiB.",
            ),
        ] = DEFAULTS.share_memory_step_mib,
        device_plugin: Annotated[
            bool,
            typer.Option(
                "--device-plugin/--no-device-plugin",
                help="Serve the kubelet's device-plugin API (off: DRA only, no MPS daemons).",
            ),
        ] = DEFAULTS.device_plugin,
        health_address: Annotated[
            str | None,
            typer.Option(
                "--health-address",
                help="Serve GET /healthz on HOST:PORT (200 once serving and ticking, else 503).",
            ),
        ] = None,
        mig_strategy: Annotated[
            str | None,
            typer.Option(
                "--mig-strategy",
                help="none|single|mixed; beats $MIG_STRATEGY, Helm values and the config file.",
            ),
        ] = None,
        mig_manager: Annotated[
            bool,
            typer.Option(
                "--mig-manager",
                help="Apply the node's mig-parted layout to its GPUs (nothing else changes MIG).",
            ),
        ] = DEFAULTS.mig_manager,
        collectors: Annotated[
            Path | None,
            typer.Option(
                "--collectors",
                "-f",
                help="Counters CSV in dcgm-exporter's format selecting the metrics "
                "(default: $DCGM_EXPORTER_COLLECTORS, else dcgm-exporter's default set).",
            ),
        ] = None,
        fail_on_init_error: Annotated[
            bool | None,
            typer.Option(
                "--fail-on-init-error/--no-fail-on-init-error",
                help="Exit when NVML cannot start (default: $FAIL_ON_INIT_ERROR, the config's "
                "flags.failOnInitError, else yes); no: serve nothing and keep running.",
            ),
        ] = None,
        namespace: Annotated[
            str | None,
            typer.Option(
                "--namespace",
                help="Namespace of the agent's NodeFeature (default: the pod's own).",
            ),
        ] = None,
        kube_qps: Annotated[
            float,
            typer.Option("--kube-qps", help="Requests per second to the API server (average)."),
        ] = DEFAULTS.kube_qps,
        kube_burst: Annotated[
            int,
            typer.Option("--kube-burst", help="Requests to the API server in one burst."),
        ] = DEFAULTS.kube_burst,
        health_quiet_period: Annotated[
            float,
            typer.Option(
                "--health-quiet-period",
                help="Seconds without a critical XID before an answering GPU is Healthy again.",
            ),
        ] = DEFAULTS.health_quiet_period_s,
        health_probe_interval: Annotated[
            float,
            typer.Option("--health-probe-interval", help="Seconds between NVML probes of a GPU."),
        ] = DEFAULTS.health_probe_interval_s,
        ignore_xids: Annotated[
            str,
            typer.Option(
                "--ignore-xids",
                help="More XIDs that never mark a GPU Unhealthy (13,31,43,45,68,109 never do).",
            ),
        ] = "",
        fault_dir: Annotated[
            Path | None,
            typer.Option(
                "--fault-dir",
                help="Simulated machines only: apply fault files (*.json) dropped here.",
            ),
        ] = None,
        status_file: Annotated[
            Path | None,
            typer.Option(
                "--status-file", help="Status JSON (default <kubelet-root>/kgpu/agent-status.json)."
            ),
        ] = None,
        status: Annotated[
            bool,
            typer.Option("--status", help="Print the running agent's status JSON and exit."),
        ] = False,
        log_level: LogLevel = DEFAULTS.log_level,
    ) -> None:
        """Serve the node's GPUs to the kubelet until SIGTERM (SIGHUP reloads)."""
        import logging
        import os
        import signal
        import socket

        from kgpu.cli.output import print_json
        from kgpu.cli.plain import fail
        from kgpu.cli.signals import StopSignals
        from kgpu.errors import FieldError, KgpuError

        given: dict[str, Any] = dict(
            machine=machine,
            config_files=tuple(config or ()),
            config_name=config_name,
            mig_config_name=mig_config,
            node_name=node_name or socket.gethostname(),
            labels_file=labels_file,
            kubelet_root=kubelet_root,
            nfd_features_dir=nfd_features_dir,
            metrics_address=metrics_address,
            hostname_label=hostname_label,
            clique=clique,
            kubeconfig=kubeconfig,
            in_cluster=in_cluster,
            cdi_root=cdi_root,
            dra=dra,
            consumable_shares=consumable_shares,
            share_memory_minimum_mib=share_memory_minimum_mib,
            share_memory_step_mib=share_memory_step_mib,
            device_plugin=device_plugin,
            health_address=health_address,
            mig_strategy=mig_strategy,
            mig_manager=mig_manager,
            collectors=collectors,
            fail_on_init_error=fail_on_init_error,
            namespace=namespace,
            kube_qps=kube_qps,
            kube_burst=kube_burst,
            health_quiet_period_s=health_quiet_period,
            health_probe_interval_s=health_probe_interval,
            fault_dir=fault_dir,
            status_file=status_file,
            log_level=log_level,
        )
        if status:
            import json

            path = AgentOptions(**given).status_path
            try:
                print_json(json.loads(path.read_text()))
            except (OSError, ValueError) as exc:
                fail(f"no agent status at {path}: {exc}")
            return

        from kgpu.agent.daemon import Agent

        # mistakes in the command line fail here, all of them at once, before any socket
        # exists, rather than as a log line from a half-started daemon
        try:
            opts = AgentOptions.parse(
                labels=label or [], ignore_xids=ignore_xids, env=os.environ, **given
            )
        except FieldError as exc:
            fail(exc)

        setup_logging(opts.log_level)
        for note in opts.environment_notes:
            logging.getLogger("kgpu.agent").warning("%s", note)
        for name, variable in sorted(opts.environment.items()):
            logging.getLogger("kgpu.agent").info("%s from $%s", name, variable)
        if opts.collectors is not None:
            from kgpu.metrics.counters import load_counters

            for warning in load_counters(opts.collectors).warnings:
                logging.getLogger("kgpu.agent").warning("%s", warning)
        if labels_file is not None and not labels_file.exists():
            logging.getLogger("kgpu.agent").warning(
                "--labels-file %s does not exist yet: serving with no node labels from it; "
                "it is read as soon as it appears",
                labels_file,
            )

        daemon = Agent(opts)
        stop = StopSignals().install()  # SIGTERM and Ctrl-C (SIGINT)
        signal.signal(signal.SIGHUP, lambda *_: daemon.request_reload())
        try:
            daemon.start()
        except (KgpuError, OSError) as exc:  # OSError: the health address is taken
            try:
                daemon.stop()
            finally:
                fail(exc if isinstance(exc, KgpuError) else (exc.strerror or str(exc)))
        logging.getLogger("kgpu.agent").info(
            "agent ready on %s: %s",
            opts.node_name,
            ", ".join(f"{k}={v}" for k, v in daemon.view().counts().items()) or "no resources",
        )
        while not stop.wait(1.0):
            pass
        logging.getLogger("kgpu.agent").info("%s: removing sockets and exiting", stop.name)
        daemon.stop()
        if stop.exit_code:
            raise typer.Exit(stop.exit_code)
