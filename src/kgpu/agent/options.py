"""What ``kgpu agent`` is told to do, with every default defined here once and every check of
a user's choices made here, before any socket exists.

The CLI builds :class:`AgentOptions` from its flags (each flag's default read from this
class), and tests and benchmarks build it directly; both go through
:meth:`AgentOptions.problems`, so a mistake fails the same way wherever the options came from:
all problems at once, each naming its flag (``--metrics-address: 'x' is not HOST:PORT ...``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kgpu.cluster.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from kgpu.config.plugin import MIG_STRATEGIES
from kgpu.dra.shares import DISABLED, SharePolicy, parse_share_policy
from kgpu.errors import FieldError, FieldProblem
from kgpu.kubelet.cdi import DEFAULT_CDI_ROOT
from kgpu.node import health

DEFAULT_KUBELET_ROOT = Path("/var/lib/kubelet")
#: Under the kubelet root, unless ``--status-file`` says otherwise.
STATUS_FILE = Path("kgpu") / "agent-status.json"
#: Held (``flock``) by the agent serving a kubelet root; a second agent there exits.
LOCK_FILE = Path("kgpu") / "agent.lock"
LOG_LEVELS = ("debug", "info", "warning", "error")
HOSTNAME_LABELS = ("Hostname", "hostname")  # dcgm-exporter releases; its main branch
#: ``parse_share_policy`` paths -> the agent's flags
_SHARE_FLAGS = {
    "--consumable-shares.memoryMinimumMiB": "--share-memory-minimum-mib",
    "--consumable-shares.memoryStepMiB": "--share-memory-step-mib",
}


@dataclass
class AgentOptions:
    machine: str = "nvml"
    config_files: tuple[Path, ...] = ()
    config_name: str | None = None
    mig_config_name: str | None = None
    node_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    labels_file: Path | None = None
    kubelet_root: Path = DEFAULT_KUBELET_ROOT
    nfd_features_dir: Path | None = None
    metrics_address: str | None = None
    clique: str | None = None  # built-in profiles only: their NVLink fabric clique
    # the Kubernetes API server: a kubeconfig file, the pod's service account, or neither (an
    # in-memory store: ResourceSlices stay in the agent and claims cannot be read)
    kubeconfig: Path | None = None
    in_cluster: bool = False
    hostname_label: str = HOSTNAME_LABELS[0]
    cdi_root: Path = DEFAULT_CDI_ROOT
    dra: bool | None = None  # None: on
    device_plugin: bool = True  # False: no device-plugin servers (and no MPS daemons): DRA only
    health_address: str | None = None  # GET /healthz on HOST:PORT
    mig_strategy: str | None = None  # beats Helm values' mig.strategy and flags.migStrategy
    mig_manager: bool = False  # apply mig-parted layouts to the GPUs (nothing else changes them)
    collectors: Path | None = None  # a counters CSV in dcgm-exporter's format
    metrics_pods: bool | None = None  # None/True: metrics name the pods holding devices
    # None: the selected device-plugin config's flags.failOnInitError, else true
    fail_on_init_error: bool | None = None
    cdi_disabled_hooks: frozenset[str] | None = None  # CDI_DISABLE_HOOKS
    # device-plugin config flags set from upstream's environment variables, over every config
    # file's (``DevicePluginConfig.with_flags``)
    plugin_flags: tuple[tuple[str, Any], ...] = ()
    # which upstream environment variable set which option or flag, and what was not used
    environment: Mapping[str, str] = field(default_factory=dict)
    environment_notes: tuple[str, ...] = ()
    kube_qps: float = DEFAULT_QPS
    kube_burst: int = DEFAULT_BURST
    kube_sync_timeout_s: float = 10.0  # at start, for the first list of the agent's Node
    namespace: str | None = None  # for the NodeFeature; default: the pod's (service account)
    health_quiet_period_s: float = health.DEFAULT_QUIET_PERIOD_S
    health_probe_interval_s: float = 5.0
    ignore_xids: frozenset[int] = frozenset()
    fault_dir: Path | None = None
    status_file: Path | None = None
    log_level: str = "info"
    watch_interval_s: float = 0.2  # config, labels, fault files, SIGHUP
    # /healthz fails when a loop of the agent has not run for this long (the liveness probe
    # restarts a hung agent)
    health_stall_s: float = 30.0
    # the device-plugin side: kubelet restarts, removed sockets, due registrations
    kubelet_poll_s: float = 0.1
    register_timeout_s: float = 5.0
    # DRA consumable shares of whole GPUs (kgpu.dra.shares): NVIDIA's --consumable-shares
    # modes; None: $CONSUMABLE_SHARES, else disabled
    consumable_shares: str | None = None
    share_memory_minimum_mib: int = 1024
    share_memory_step_mib: int = 1024

    @property
    def status_path(self) -> Path:
        return self.status_file or self.kubelet_root / STATUS_FILE

    @property
    def lock_path(self) -> Path:
        return self.kubelet_root / LOCK_FILE

    @property
    def share_policy(self) -> SharePolicy:
        """The consumable-shares policy these options give the DRA driver (checked by
        :meth:`problems`; FieldError naming the flag when it is not usable)."""
        return parse_share_policy(
            self.consumable_shares or DISABLED,
            memory_minimum_mib=self.share_memory_minimum_mib,
            memory_step_mib=self.share_memory_step_mib,
            path="--consumable-shares",
        )

    @property
    def store_configured(self) -> bool:
        return self.kubeconfig is not None or self.in_cluster

    @classmethod
    def parse(
        cls,
        *,
        labels: Iterable[str] = (),
        ignore_xids: str = "",
        env: Mapping[str, str] | None = None,
        **given: Any,
    ) -> AgentOptions:
        """Options from command-line text (``--label k=v`` items, an ``--ignore-xids`` list)
        and, with ``env``, the upstream device plugin's and dcgm-exporter's environment
        variables (:mod:`kgpu.agent.upstream`; a flag given wins over its variable); FieldError
        listing every problem, the parsing and :meth:`problems` ones together."""
        from kgpu.agent.upstream import read_environment
        from kgpu.node.label_syntax import parse_label_args

        problems: list[FieldProblem] = []
        if env is not None:
            settings, env_problems = read_environment(env, given)
            problems.extend(env_problems)
            given = dict(given)
            for name, value in settings.options.items():
                if name == "config_files":
                    given[name] = (*tuple(given.get(name) or ()), *value)
                elif name == "collectors":
                    given[name] = Path(value)
                else:
                    given[name] = value
            given["plugin_flags"] = (*tuple(given.get("plugin_flags") or ()), *settings.flags)
            given["environment"] = settings.sources
            given["environment_notes"] = settings.notes
        opts = cls(**given)
        try:
            opts = replace(opts, labels=parse_label_args(labels))
        except FieldError as exc:
            problems.extend(exc.problems)
        try:
            opts = replace(opts, ignore_xids=health.parse_xid_list(ignore_xids))
        except ValueError as exc:
            problems.append(FieldProblem(str(exc), "--ignore-xids"))
        problems.extend(opts.problems())
        if problems:
            raise FieldError(problems)
        return opts

    def problems(self) -> list[FieldProblem]:
        """Every mistake in these options, each naming its flag; [] when they are usable."""
        from kgpu.cluster.kube import connection_problems
        from kgpu.metrics.server import parse_address

        out: list[FieldProblem] = []
        if self.log_level.lower() not in LOG_LEVELS:
            out.append(
                FieldProblem(f"{self.log_level!r}: allowed {', '.join(LOG_LEVELS)}", "--log-level")
            )
        if self.metrics_address is not None:
            try:
                parse_address(self.metrics_address, "--metrics-address")
            except FieldError as exc:
                out.extend(exc.problems)
        if self.labels_file is not None and self.labels_file.is_dir():
            out.append(
                FieldProblem(f"{self.labels_file}: is a directory, not a file", "--labels-file")
            )
        if self.hostname_label not in HOSTNAME_LABELS:
            out.append(
                FieldProblem(
                    f"{self.hostname_label!r}: allowed {', '.join(HOSTNAME_LABELS)}",
                    "--hostname-label",
                )
            )
        if self.fault_dir is not None and self.machine == "nvml":
            out.append(FieldProblem("works only with a simulated --machine", "--fault-dir"))
        if not self.health_quiet_period_s >= 0:
            out.append(
                FieldProblem(
                    f"{self.health_quiet_period_s!r}: must be seconds >= 0", "--health-quiet-period"
                )
            )
        if not self.health_probe_interval_s > 0:
            out.append(
                FieldProblem(
                    f"{self.health_probe_interval_s!r}: must be seconds > 0",
                    "--health-probe-interval",
                )
            )
        if self.clique is not None:
            from kgpu.hardware import open_backend

            try:  # a built-in profile loads in microseconds; nvml and snapshots refuse at once
                open_backend(self.machine, hostname=self.node_name, clique=self.clique).close()
            except FieldError as exc:
                out.extend(
                    FieldProblem(p.message, "--clique" if "clique" in p.path else p.path, p.file)
                    for p in exc.problems
                )
        if self.health_address is not None:
            try:
                parse_address(self.health_address, "--health-address")
            except FieldError as exc:
                out.extend(exc.problems)
        if self.mig_strategy is not None and self.mig_strategy not in MIG_STRATEGIES:
            out.append(
                FieldProblem(
                    f"{self.mig_strategy!r}: allowed {', '.join(MIG_STRATEGIES)}", "--mig-strategy"
                )
            )
        if self.collectors is not None:
            from kgpu.metrics.counters import load_counters

            try:
                load_counters(self.collectors)
            except FieldError as exc:
                out.extend(FieldProblem(p.message, p.path, p.file, p.entry) for p in exc.problems)
        if not self.kube_qps > 0:
            out.append(
                FieldProblem(f"{self.kube_qps!r}: must be requests per second > 0", "--kube-qps")
            )
        if self.kube_burst < 1:
            out.append(FieldProblem(f"{self.kube_burst!r}: must be >= 1", "--kube-burst"))
        out.extend(connection_problems(self.kubeconfig, self.in_cluster))
        out.extend(self._share_problems())
        return out

    def _share_problems(self) -> list[FieldProblem]:
        """The consumable-shares flags' mistakes, each naming its own flag."""
        try:
            policy = self.share_policy
        except FieldError as exc:
            return [FieldProblem(p.message, _SHARE_FLAGS.get(p.path, p.path)) for p in exc.problems]
        if policy.enabled and self.dra is False:
            return [
                FieldProblem(
                    f"{policy.mode!r} needs the DRA driver, which --no-dra turns off: drop one",
                    "--consumable-shares",
                )
            ]
        return []

    def validate(self) -> None:
        """FieldError with every problem of :meth:`problems`."""
        problems = self.problems()
        if problems:
            raise FieldError(problems)
