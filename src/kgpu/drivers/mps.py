"""MPS control daemons: one per MPS-shared GPU.

Upstream runs one control daemon per MPS resource over all of that resource's GPUs. kgpu runs
one per GPU, because every MPS client uses exactly one GPU (a request for MPS replicas of more
than one GPU is refused, see ``kgpu.node.allocate``) and a daemon per GPU can carry that GPU's
own per-client defaults, survives a neighbour GPU's trouble and says which GPU its clients use.
Each daemon is addressed by the pipe directory the node view gives that GPU
(``<mpsRoot>/<resource>/<gpu index>/pipe``, log next to it), which Allocate mounts into the
GPU's clients at upstream's container path ``/mps/<resource>/pipe``.

With ``nvidia-cuda-mps-control`` on PATH (a real node) the daemon is started with ``-d`` and
``CUDA_VISIBLE_DEVICES`` set to its GPU's UUID only, then configured through its control pipe:
``set_default_active_thread_percentage <100 // replicas>`` and
``set_default_device_pinned_mem_limit 0 <memory / replicas>M`` (ordinal 0: the daemon sees one
GPU; upstream also sets the limit by ordinal because limits set by UUID were not applied).
Without the binary (simulation) the daemon is modelled: the same directories, limits and
control commands are recorded and reported (nothing is written to the host), and the state is
``modelled``.

Before a daemon starts, its GPU's compute mode is set to ``EXCLUSIVE_PROCESS`` (as NVIDIA's MPS
daemon setup does), through the backend's :class:`~kgpu.hardware.backend.ComputeModeBackend`,
and the mode it had is restored when the daemon stops (agent stop, a config that no longer
shares that GPU with MPS, a changed plan). Without it a client that drops
``CUDA_MPS_PIPE_DIRECTORY`` opens its own context beside the MPS server and none of the limits
apply; with it the driver refuses that client. A GPU whose mode cannot be set gets no daemon
(state ``failed``, the error says why) and :func:`withhold_failed` marks its MPS replicas
Unhealthy, so kubelet never hands out a share that would not be enforced.

:class:`MpsComponent` is the agent's component around :class:`MpsManager`: every view syncs the
daemons (only a changed plan restarts one; health changes leave them alone), and a background
thread asks running daemons for their clients, which come and go without any event.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from kgpu.hardware.backend import BackendError, ComputeMode, ComputeModeBackend
from kgpu.kubelet.dirs import ensure_directory
from kgpu.node.model import NodeView
from kgpu.node.sharing.mps import daemon_default_commands, mps_shm_directory

log = logging.getLogger(__name__)

#: records an event: (type ``Warning``/``Normal``, reason, message)
EventSink = Callable[[str, str, str], None]

CONTROL_BINARY = "nvidia-cuda-mps-control"
#: The agent's environment variables a daemon inherits: the rest (API credentials' paths,
#: proxies, kgpu's settings) is none of its business.
MPS_ENV_KEEP = ("PATH", "LD_LIBRARY_PATH")
#: Pipe, log and shm directories: clients (any user) must reach the pipe; set whatever the
#: umask.
MPS_DIRECTORY_MODE = 0o755
#: The shared /dev/shm of daemons and clients, as upstream's mps-control-daemon mounts it: a
#: tmpfs capped at 64 MiB, so clients cannot fill the node's memory or disk through it.
SHM_MOUNT_OPTIONS = "rw,nosuid,nodev,noexec,relatime,size=65536k"

Runner = Callable[[list[str]], object]


def _run(command: list[str]) -> object:
    return subprocess.run(command, check=True, capture_output=True, timeout=10)


def mount_shm(path: Path, run: Runner = _run) -> bool:
    """Mount the size-capped tmpfs at ``path`` unless something is mounted there already (it
    is shared by every daemon of the node, and kept across agent restarts as upstream keeps
    it). Without the privilege to mount, ``path`` stays a plain directory, said once in the
    log; False then."""
    if os.path.ismount(path):
        return True
    try:
        run(["mount", "-t", "tmpfs", "-o", SHM_MOUNT_OPTIONS, "shm", str(path)])
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning(
            "MPS shm %s stays a plain directory, without a size cap: cannot mount a tmpfs "
            "there (%s); the chart's privileged agent can",
            path,
            exc,
        )
        return False
    return True


def emit_event(on_event: EventSink | None, reason: str, message: str) -> None:
    """Record a Warning through ``on_event`` (None: nowhere); a failing sink is logged only."""
    if on_event is None:
        return
    try:
        on_event("Warning", reason, message)
    except Exception as exc:
        log.warning("cannot record event %s: %s", reason, exc)


def set_exclusive(backend: ComputeModeBackend, index: int) -> ComputeMode | None:
    """Put GPU ``index`` in EXCLUSIVE_PROCESS before an MPS daemon starts there, so only the
    MPS server may hold a context on it. Returns the mode it had when kgpu changed it (None:
    it was already exclusive); raises BackendError saying what to do."""
    try:
        before = backend.compute_mode(index)
        if before != ComputeMode.EXCLUSIVE_PROCESS:
            backend.set_compute_mode(index, ComputeMode.EXCLUSIVE_PROCESS)
    except BackendError as exc:
        raise BackendError(
            f"could not set GPU {index} to compute mode {ComputeMode.EXCLUSIVE_PROCESS}, "
            f"which MPS needs to enforce its limits ({exc}); run the agent as root with "
            "the GPU not in use by other processes"
        ) from None
    log.info(
        "GPU %d compute mode %s for its MPS daemon (was %s)",
        index,
        ComputeMode.EXCLUSIVE_PROCESS,
        before,
    )
    return None if before == ComputeMode.EXCLUSIVE_PROCESS else before


def restore_compute_mode(
    backend: ComputeModeBackend, index: int, previous: ComputeMode, on_event: EventSink | None
) -> bool:
    """Give GPU ``index`` back the compute mode it had before kgpu changed it; False (logged,
    a ComputeModeNotRestored Warning with the command to run) when that fails."""
    try:
        backend.set_compute_mode(index, previous)
    except BackendError as exc:
        log.error(
            "GPU %d stays in compute mode %s: restoring %s failed: %s (nvidia-smi -i %d -c %s)",
            index,
            ComputeMode.EXCLUSIVE_PROCESS,
            previous,
            exc,
            index,
            previous.name,
        )
        emit_event(
            on_event,
            "ComputeModeNotRestored",
            f"GPU {index} stays in compute mode {ComputeMode.EXCLUSIVE_PROCESS} after its MPS "
            f"daemon stopped: {exc}; run nvidia-smi -i {index} -c {previous.name}",
        )
        return False
    log.info("GPU %d compute mode %s restored", index, previous)
    return True


def daemon_env(pipe_directory: str, log_directory: str, gpu_uuid: str) -> dict[str, str]:
    """What an MPS daemon (and its control client) needs, nothing of the agent's own
    environment (its API credentials' paths, proxy settings, config): where to find the
    driver's binaries and libraries, its pipe and log directories and its GPU."""
    env = {key: os.environ[key] for key in MPS_ENV_KEEP if key in os.environ}
    env["CUDA_MPS_PIPE_DIRECTORY"] = pipe_directory
    env["CUDA_MPS_LOG_DIRECTORY"] = log_directory
    env["CUDA_VISIBLE_DEVICES"] = gpu_uuid
    return env


def launch_daemon(
    binary: str,
    pipe_directory: str,
    log_directory: str,
    shm_directory: str,
    env: Mapping[str, str],
    run: Runner | None = None,
) -> None:
    """Start one control daemon (``-d``): its pipe, log and shm directories made with the mode
    clients need, the shm's size-capped tmpfs mounted (:func:`mount_shm`, ``run`` doing the
    mount; None: mount(8) itself), then the daemon with ``env`` (:func:`daemon_env`)."""
    for directory in (pipe_directory, log_directory, shm_directory):
        ensure_directory(Path(directory), MPS_DIRECTORY_MODE)
    mount_shm(Path(shm_directory), run or _run)
    subprocess.run([binary, "-d"], env=dict(env), check=True, timeout=10)


def control(binary: str, env: Mapping[str, str], command: str) -> str:
    """One command to a running daemon through ``nvidia-cuda-mps-control`` (its stdout)."""
    done = subprocess.run(
        [binary],
        input=command,
        env=dict(env),
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    )
    return done.stdout


@dataclass(frozen=True)
class MpsPlan:
    """What one GPU's control daemon should enforce (comparable: a reload restarts only the
    daemons whose plan changed)."""

    resource: str
    gpu_index: int
    gpu_uuid: str
    replicas: int  # clients the GPU is shared between
    pipe_directory: str  # host paths
    log_directory: str
    shm_directory: str
    active_thread_percentage: int
    pinned_memory_limit_mib: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.resource, self.gpu_uuid)

    @property
    def commands(self) -> list[str]:
        return daemon_default_commands(self.pinned_memory_limit_mib, self.active_thread_percentage)


@dataclass
class MpsDaemon:
    plan: MpsPlan
    mode: str  # "nvidia-cuda-mps-control" | "modelled"
    state: str = "stopped"  # "running" | "modelled" | "failed" | "stopped"
    error: str = ""
    commands: list[str] = field(default_factory=list)
    clients: list[int] | None = None  # client PIDs the running daemon reported; None: unknown
    # the GPU's compute mode before kgpu set EXCLUSIVE_PROCESS for this daemon (restored when
    # it stops); None: kgpu did not change it
    previous_compute_mode: ComputeMode | None = None
    compute_mode: ComputeMode | None = None  # the mode while it serves; None: not managed

    def status(self) -> dict[str, object]:
        plan = self.plan
        return {
            "resource": plan.resource,
            "gpu": plan.gpu_index,
            "gpuUuid": plan.gpu_uuid,
            "mode": self.mode,
            "state": self.state,
            "pipeDirectory": plan.pipe_directory,
            "logDirectory": plan.log_directory,
            "visibleDevices": plan.gpu_uuid,
            "maxClients": plan.replicas,
            "clients": None if self.clients is None else list(self.clients),
            "activeThreadPercentage": plan.active_thread_percentage,
            "pinnedDeviceMemoryLimitMiB": plan.pinned_memory_limit_mib,
            "controlCommands": list(self.commands),
            "computeMode": None if self.compute_mode is None else str(self.compute_mode),
            "previousComputeMode": (
                None if self.previous_compute_mode is None else str(self.previous_compute_mode)
            ),
            "error": self.error,
        }


def plans(view: NodeView) -> dict[tuple[str, str], MpsPlan]:
    """One plan per (MPS resource, GPU), from the MPS limits the view gives each replica."""
    out: dict[tuple[str, str], MpsPlan] = {}
    counts: dict[tuple[str, str], int] = {}
    for res in view.resources:
        for dev in res.devices:
            if dev.mps is None:
                continue
            key = (res.name, dev.gpu_uuid)
            counts[key] = counts.get(key, 0) + 1
            out.setdefault(
                key,
                MpsPlan(
                    resource=res.name,
                    gpu_index=dev.gpu_index,
                    gpu_uuid=dev.gpu_uuid,
                    replicas=0,
                    pipe_directory=dev.mps.pipe_directory,
                    log_directory=dev.mps.log_directory,
                    shm_directory=mps_shm_directory(dev.mps),
                    active_thread_percentage=dev.mps.active_thread_percentage,
                    pinned_memory_limit_mib=dev.mps.pinned_memory_limit_mib,
                ),
            )
    return {key: replace(plan, replicas=counts[key]) for key, plan in out.items()}


def withhold_failed(view: NodeView, failed: Mapping[str, str]) -> NodeView:
    """``view`` with the MPS replicas of the GPUs in ``failed`` (UUID -> why) Unhealthy: a
    daemon that could not start or put its GPU in EXCLUSIVE_PROCESS enforces nothing, so its
    shares are not offered. Other resources on those GPUs are left alone."""
    if not failed:
        return view
    return replace(
        view,
        resources=tuple(
            replace(
                res,
                devices=tuple(
                    replace(dev, healthy=False)
                    if dev.mps is not None and dev.gpu_uuid in failed
                    else dev
                    for dev in res.devices
                ),
            )
            for res in view.resources
        ),
    )


class MpsManager:
    """Keeps one daemon per MPS-shared GPU in line with the current view.

    ``backend`` sets the GPUs' compute mode; without one (a test of the daemons alone) the
    mode is not managed and the status says so (``computeMode: null``). ``on_event`` records
    a Warning (on the Node, in the agent) when a GPU's shares are not enforced."""

    def __init__(
        self,
        *,
        use_binary: bool | None = None,
        backend: ComputeModeBackend | None = None,
        on_event: EventSink | None = None,
        run: Runner = _run,
    ) -> None:
        binary = shutil.which(CONTROL_BINARY)
        self.binary = binary if (use_binary is None or use_binary) else None
        self.backend = backend
        self.on_event = on_event
        self._run = run  # mount(8), replaceable in tests
        self.daemons: dict[tuple[str, str], MpsDaemon] = {}

    def sync(self, view: NodeView) -> None:
        wanted = plans(view)
        for key in list(self.daemons):
            if key not in wanted or wanted[key] != self.daemons[key].plan:
                self._stop(self.daemons.pop(key))
        for key, plan in sorted(wanted.items(), key=lambda kv: (kv[0][0], kv[1].gpu_index)):
            if key not in self.daemons:
                self.daemons[key] = self._start(plan)

    def stop_all(self) -> None:
        for key in list(self.daemons):
            self._stop(self.daemons.pop(key))

    def status(self) -> list[dict[str, object]]:
        ordered = sorted(self.daemons.values(), key=lambda d: (d.plan.resource, d.plan.gpu_index))
        return [d.status() for d in ordered]

    def failed(self) -> dict[str, str]:
        """GPU UUID -> error, for the GPUs whose daemon failed (their replicas are withheld)."""
        return {d.plan.gpu_uuid: d.error for d in self.daemons.values() if d.state == "failed"}

    @property
    def running(self) -> bool:
        return any(d.state == "running" for d in self.daemons.values())

    def refresh_clients(self) -> bool:
        """Ask every running daemon for its clients (``get_server_list``, then
        ``get_client_list`` per server). True if any list changed."""
        changed = False
        for daemon in list(self.daemons.values()):
            if daemon.state != "running":
                continue
            try:
                servers = self._control(daemon, "get_server_list").split()
                pids = sorted(
                    int(pid)
                    for server in servers
                    for pid in self._control(daemon, f"get_client_list {server}").split()
                    if pid.isdigit()
                )
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                log.debug("MPS daemon of GPU %d: no client list: %s", daemon.plan.gpu_index, exc)
                continue
            if pids != daemon.clients:
                daemon.clients = pids
                changed = True
        return changed

    # -- one daemon --------------------------------------------------------------------------

    def _start(self, plan: MpsPlan) -> MpsDaemon:
        daemon = MpsDaemon(plan=plan, mode=CONTROL_BINARY if self.binary else "modelled")
        daemon.commands = plan.commands
        started = False
        try:
            self._exclusive(daemon)
            if self.binary:
                launch_daemon(
                    self.binary,
                    plan.pipe_directory,
                    plan.log_directory,
                    plan.shm_directory,
                    self._env(daemon),
                    self._run,
                )
                started = True
                for command in daemon.commands:
                    self._control(daemon, command)
                daemon.state = "running"
                daemon.clients = []
            else:
                daemon.state = "modelled"
            log.info(
                "MPS daemon for %s on GPU %d %s: %d clients, %d%% threads, pinned %dM, pipe %s",
                plan.resource,
                plan.gpu_index,
                daemon.state,
                plan.replicas,
                plan.active_thread_percentage,
                plan.pinned_memory_limit_mib,
                plan.pipe_directory,
            )
        except (OSError, subprocess.SubprocessError, BackendError) as exc:
            daemon.state = "failed"
            daemon.error = str(exc)
            log.error(
                "MPS daemon for %s on GPU %d failed to start: %s; its MPS replicas are not offered",
                plan.resource,
                plan.gpu_index,
                exc,
            )
            if started:  # running but unconfigured: _stop only quits "running" daemons
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    self._control(daemon, "quit")
            self._restore(daemon)
            self._event(
                "MpsNotEnforced",
                f"GPU {plan.gpu_index} ({plan.gpu_uuid}): no MPS daemon: {exc}; its "
                f"{plan.replicas} replicas of {plan.resource} are Unhealthy until this is fixed "
                "and the agent restarts or its config changes",
            )
        return daemon

    def _event(self, reason: str, message: str) -> None:
        emit_event(self.on_event, reason, message)

    def _exclusive(self, daemon: MpsDaemon) -> None:
        """Put the daemon's GPU in EXCLUSIVE_PROCESS (remembering its mode) before the daemon
        starts, so only the MPS server may hold a context there. Raises BackendError."""
        if self.backend is None:
            return
        daemon.previous_compute_mode = set_exclusive(self.backend, daemon.plan.gpu_index)
        daemon.compute_mode = ComputeMode.EXCLUSIVE_PROCESS

    def _restore(self, daemon: MpsDaemon) -> None:
        """Give the GPU back the compute mode it had before kgpu changed it."""
        previous = daemon.previous_compute_mode
        if self.backend is None or previous is None:
            return
        if restore_compute_mode(self.backend, daemon.plan.gpu_index, previous, self.on_event):
            daemon.previous_compute_mode = None
            daemon.compute_mode = None

    def _stop(self, daemon: MpsDaemon) -> None:
        plan = daemon.plan
        if daemon.state == "running":
            try:
                self._control(daemon, "quit")
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning(
                    "MPS daemon for %s on GPU %d did not quit: %s",
                    plan.resource,
                    plan.gpu_index,
                    exc,
                )
        daemon.state = "stopped"
        self._restore(daemon)
        log.info("MPS daemon for %s on GPU %d stopped", plan.resource, plan.gpu_index)

    def _env(self, daemon: MpsDaemon) -> dict[str, str]:
        plan = daemon.plan
        return daemon_env(plan.pipe_directory, plan.log_directory, plan.gpu_uuid)

    def _control(self, daemon: MpsDaemon, command: str) -> str:
        assert self.binary is not None
        return control(self.binary, self._env(daemon), command)


class MpsComponent:
    """The MPS daemons as an agent component (``start``/``stop``/``on_view``)."""

    name = "mps"

    def __init__(
        self,
        *,
        use_binary: bool | None = None,
        refresh_interval_s: float = 5.0,
        on_change: Callable[[], None] | None = None,
        backend: ComputeModeBackend | None = None,
        on_event: EventSink | None = None,
    ) -> None:
        self.manager = MpsManager(use_binary=use_binary, backend=backend, on_event=on_event)
        self.refresh_interval_s = refresh_interval_s
        self._on_change = on_change or (lambda: None)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def on_view(self, view: NodeView) -> None:
        with self._lock:
            if not self._stopping.is_set():
                self.manager.sync(view)

    def start(self) -> None:
        self._stopping.clear()
        self._thread = threading.Thread(target=self._refresh_loop, name="mps-clients", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        with self._lock:
            self.manager.stop_all()

    def status(self) -> list[dict[str, object]]:
        with self._lock:
            return self.manager.status()

    def failed(self) -> dict[str, str]:
        """GPU UUID -> why, for the GPUs whose MPS replicas must not be offered."""
        with self._lock:
            return self.manager.failed()

    def served(self, view: NodeView) -> NodeView:
        """``view`` as the components after this one should serve it (failed GPUs' MPS
        replicas Unhealthy)."""
        return withhold_failed(view, self.failed())

    def _refresh_loop(self) -> None:
        while not self._stopping.wait(self.refresh_interval_s):
            with self._lock:
                changed = self.manager.running and self.manager.refresh_clients()
            if changed:
                self._on_change()
