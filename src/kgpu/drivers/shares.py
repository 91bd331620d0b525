"""The MPS control daemons that enforce DRA memory shares of GPUs (one per shared GPU).

With ``consumableShares: memory`` (:mod:`kgpu.dra.shares`) several claims hold shares of one
GPU. :class:`ShareDaemons` runs that GPU's ``nvidia-cuda-mps-control`` daemon from its first
prepared share to its last: the GPU is put in ``EXCLUSIVE_PROCESS`` first (as
:mod:`kgpu.drivers.mps` does for the device plugin's MPS replicas, with the same functions), so
a process that bypasses MPS is refused by the driver, and the mode it had is restored when the
daemon quits. The daemon's defaults are the policy's smallest share. A Legacy MPS daemon
runs one user's server at a time, so a GPU's shares are all of one user (a share for another
is refused, :func:`~kgpu.node.shares.other_user`) and served by one server, started for that
user with its first share and limited to the LARGEST share prepared on the GPU (the ceiling,
:func:`~kgpu.node.shares.server_limits`)::

    start_server -uid <uid>
    set_device_pinned_mem_limit <server pid> 0 <largest MiB>M
    set_active_thread_percentage <server pid> <largest pct>

The limits are sent again when a larger share is prepared or the largest is unprepared; MPS
applies them to clients that connect afterwards. Each claim's CDI environment carries its own
share, which a client can only lower below the server's: a client that keeps it is held to
its share, one that drops it to the ceiling. The server's pid is the one ``get_server_list``
lists after ``start_server`` and not before (else the one owned by that user). The server is
shut down (``shutdown_server <pid>``) and the daemon quits (``quit``) when the GPU's last share
goes.

Without the control binary (simulation, tests) the daemon is modelled as the device plugin's
are: the same decisions, the same commands recorded (servers get modelled pids), nothing
written to the host; the compute mode is still set through the backend (the simulated one
refuses a non-MPS context while a daemon serves).

Everything needed to rebuild a daemon is in each share's checkpoint record (:meth:`restore`):
after an agent restart a daemon that still answers is adopted, its servers checked against
the recorded pid (a missing server is started again with the ceiling); a daemon that is
gone is started again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kgpu.dra.shares import SharePolicy
from kgpu.drivers.mps import (
    CONTROL_BINARY,
    EventSink,
    Runner,
    control,
    daemon_env,
    emit_event,
    launch_daemon,
    restore_compute_mode,
    set_exclusive,
)
from kgpu.hardware.backend import BackendError, ComputeMode, ComputeModeBackend
from kgpu.kubelet.dra.handler import ClaimError
from kgpu.node.shares import (
    PodLookup,
    Served,
    ShareRefused,
    daemon_commands,
    other_user,
    server_commands,
    server_limits,
)
from kgpu.store import NotFound, ObjectStore

log = logging.getLogger(__name__)

MODELLED = "modelled"
RUNNING = "running"
_FAILURES = (OSError, subprocess.SubprocessError, BackendError, ValueError)


@dataclass(frozen=True)
class GpuRef:
    """The GPU a daemon serves (what the checkpoint records of it)."""

    uuid: str
    index: int
    memory_mib: int


@dataclass
class ShareDaemon:
    """One GPU's daemon and the shares it serves."""

    gpu: GpuRef
    pipe_directory: str  # host paths
    log_directory: str
    shm_directory: str
    mode: str  # CONTROL_BINARY | MODELLED
    state: str = MODELLED  # RUNNING | MODELLED
    commands: list[str] = field(default_factory=list)  # every control command, in order
    served: dict[str, Served] = field(default_factory=dict)  # claim uid -> its share
    previous_compute_mode: ComputeMode | None = None  # restored when the daemon stops
    compute_mode: ComputeMode | None = None  # while it serves; None: not managed
    next_pid: int = 1  # modelled server pids
    server_pid: int | None = None  # the one server (one user per Legacy daemon)
    limits: tuple[int, int] | None = None  # (MiB, %) the server was last set to: the ceiling

    @property
    def ceiling_mib(self) -> int | None:
        """The memory a client of this GPU that drops kgpu's environment may pin."""
        return None if self.limits is None else self.limits[0]

    def status(self) -> dict[str, object]:
        return {
            "gpu": self.gpu.index,
            "gpuUuid": self.gpu.uuid,
            "mode": self.mode,
            "state": self.state,
            "pipeDirectory": self.pipe_directory,
            "serverPid": self.server_pid,
            # the server's limits: the largest share, what a client without kgpu's env gets
            "ceilingMiB": self.ceiling_mib,
            "ceilingActiveThreadPercentage": None if self.limits is None else self.limits[1],
            "shares": [
                {
                    "claim": s.claim,
                    "uid": s.uid,
                    "serverPid": s.pid,
                    "pinnedDeviceMemoryLimitMiB": s.memory_mib,
                    "activeThreadPercentage": s.active_thread_percentage,
                    "ceilingMiB": self.ceiling_mib,
                }
                for s in sorted(self.served.values(), key=lambda s: s.claim)
            ],
            "controlCommands": list(self.commands),
            "computeMode": None if self.compute_mode is None else str(self.compute_mode),
            "previousComputeMode": (
                None if self.previous_compute_mode is None else str(self.previous_compute_mode)
            ),
        }


class ShareDaemons:
    """The daemons of one node's memory-shared GPUs (thread-safe; one per ``GpuHandler``).

    ``root`` holds each GPU's ``<uuid>/{pipe,log,shm}``; ``backend`` sets compute modes
    (None: not managed, as for the device plugin's daemons in tests); ``use_binary`` False
    models the daemons even where the binary exists."""

    def __init__(
        self,
        root: Path,
        policy: SharePolicy,
        *,
        backend: ComputeModeBackend | None = None,
        on_event: EventSink | None = None,
        use_binary: bool | None = None,
        run: Runner | None = None,
    ) -> None:
        binary = shutil.which(CONTROL_BINARY)
        self.binary = binary if (use_binary is None or use_binary) else None
        self.root = root
        self.policy = policy
        self.backend = backend
        self.on_event = on_event
        self._run = run  # mount(8), replaceable in tests (None: mps.py's)
        self._lock = threading.Lock()
        self.daemons: dict[str, ShareDaemon] = {}  # GPU UUID -> its daemon

    # -- reading ---------------------------------------------------------------------------

    def status(self) -> list[dict[str, object]]:
        with self._lock:
            return [d.status() for d in sorted(self.daemons.values(), key=lambda d: d.gpu.index)]

    def daemon(self, gpu_uuid: str) -> ShareDaemon | None:
        with self._lock:
            return self.daemons.get(gpu_uuid)

    def directories(self, gpu_uuid: str) -> tuple[str, str, str]:
        """Host pipe, log and shm directories of a GPU's daemon."""
        base = self.root / gpu_uuid
        return (str(base / "pipe"), str(base / "log"), str(base / "shm"))

    # -- prepare / unprepare ---------------------------------------------------------------

    def serve(
        self,
        gpu: GpuRef,
        claim_uid: str,
        claim: str,
        pod: str,
        uid: int,
        memory_mib: int,
        active_thread_percentage: int,
    ) -> Served:
        """Serve one share: the GPU's daemon started if it is not, its server (of ``uid``)
        started if it is not and raised to this share if it is the largest.
        :class:`ClaimError` (nothing of it left running or raised) when it cannot."""
        with self._lock:
            daemon = self.daemons.get(gpu.uuid)
            others = (
                [] if daemon is None else [s for k, s in daemon.served.items() if k != claim_uid]
            )
            try:  # refused before anything starts
                other_user(others, uid, claim=claim, pod=pod, gpu=gpu.index)
            except ShareRefused as exc:
                raise ClaimError(str(exc)) from None
            if daemon is None:
                daemon = self._start(gpu)
                self.daemons[gpu.uuid] = daemon
            share = Served(claim_uid, claim, uid, memory_mib, active_thread_percentage, 0)
            try:
                if daemon.server_pid is None:
                    daemon.server_pid = self._start_server(daemon, uid)
                self._set_limits(daemon, [*others, share])
            except _FAILURES as exc:
                if others:  # back to what the others need, as far as the daemon lets us
                    with contextlib.suppress(*_FAILURES):
                        self._set_limits(daemon, others)
                else:  # not left serving with the daemon's defaults
                    self._shutdown_server(daemon)
                    self._stop_if_idle(daemon)
                raise ClaimError(
                    f"claim {claim}: the MPS daemon of GPU {gpu.index} ({gpu.uuid}) could not "
                    f"serve user {uid} with its limits: {exc}"
                ) from None
            served = replace(share, pid=daemon.server_pid)
            daemon.served[claim_uid] = served
            log.info(
                "GPU %d share of claim %s: user %d, server %d, %d MiB, %d%% of the SMs "
                "(server limits: %s)",
                gpu.index,
                claim,
                uid,
                served.pid,
                memory_mib,
                active_thread_percentage,
                daemon.limits,
            )
            return served

    def release(self, claim_uid: str) -> None:
        """The claim's share is gone: the server lowered to the largest share left, or, when
        it was the GPU's last, shut down and the daemon stopped (compute mode restored).
        Unknown: nothing."""
        with self._lock:
            for daemon in list(self.daemons.values()):
                if daemon.served.pop(claim_uid, None) is None:
                    continue
                if daemon.served:
                    try:
                        self._set_limits(daemon, list(daemon.served.values()))
                    except _FAILURES as exc:  # still at the higher ceiling: say so
                        log.warning(
                            "MPS server of GPU %d not lowered to its largest share: %s",
                            daemon.gpu.index,
                            exc,
                        )
                    continue
                self._shutdown_server(daemon)
                self._stop_if_idle(daemon)

    # -- restart ---------------------------------------------------------------------------

    def restore(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Rebuild the daemons from the checkpointed shares (:func:`share_record`). A daemon
        that cannot be brought back is a Warning (MpsNotEnforced); restart goes on."""
        by_gpu: dict[str, list[Mapping[str, Any]]] = {}
        for record in records:
            by_gpu.setdefault(str(record.get("gpu")), []).append(record)
        with self._lock:
            for uuid, shares in sorted(by_gpu.items()):
                first = shares[0]
                try:
                    gpu = GpuRef(uuid, int(first["gpuIndex"]), int(first["gpuMemoryMiB"]))
                except (KeyError, TypeError, ValueError) as exc:
                    log.error("checkpoint: a share of GPU %s is unreadable (%r)", uuid, exc)
                    continue
                previous = next(
                    (str(s["previousComputeMode"]) for s in shares if s.get("previousComputeMode")),
                    None,
                )
                try:
                    daemon = self._adopt(gpu, shares, previous)
                except ClaimError as exc:  # could not start again: _start said so in an event
                    log.error("GPU %d memory shares not restored: %s", gpu.index, exc)
                    continue
                except (*_FAILURES, KeyError, TypeError) as exc:
                    log.error("GPU %d memory shares not restored: %s", gpu.index, exc)
                    emit_event(
                        self.on_event,
                        "MpsNotEnforced",
                        f"GPU {gpu.index} ({uuid}): its MPS daemon could not be restored after "
                        f"the agent restarted ({exc}); the memory shares of its "
                        f"{len(shares)} prepared claims are not enforced",
                    )
                    continue
                self.daemons[uuid] = daemon

    def _adopt(
        self, gpu: GpuRef, shares: list[Mapping[str, Any]], previous: str | None
    ) -> ShareDaemon:
        daemon: ShareDaemon | None = None
        live: set[int] = set()
        if self.binary:
            candidate = self._new(gpu)
            candidate.state = RUNNING
            try:
                live = self._servers(candidate)
                daemon = candidate
            except (OSError, subprocess.SubprocessError):
                daemon = None  # gone with the old agent: start it again
        if daemon is None:
            daemon = self._start(gpu)
        elif self.backend is not None:  # adopted: still EXCLUSIVE_PROCESS, whatever happened
            daemon.previous_compute_mode = set_exclusive(self.backend, gpu.index)
            daemon.compute_mode = ComputeMode.EXCLUSIVE_PROCESS
        if previous is not None:  # what the GPU had before the first share, not since
            daemon.previous_compute_mode = ComputeMode(previous)
        served = [
            Served(
                str(r["claimUid"]),
                str(r["claim"]),
                int(r["uid"]),
                int(r["memoryMiB"]),
                int(r["activeThreadPercentage"]),
                int(r["serverPid"]),
            )
            for r in shares
        ]
        pid = served[0].pid
        if daemon.mode != MODELLED and pid not in live:
            pid = self._start_server(daemon, served[0].uid)
        daemon.server_pid = pid
        daemon.next_pid = max(daemon.next_pid, pid + 1)
        if daemon.mode != MODELLED and pid != served[0].pid:
            self._set_limits(daemon, served)  # a new server: the ceiling again
        else:
            daemon.limits = server_limits(served)  # adopted (or modelled) as it was left
        daemon.served = {s.claim_uid: replace(s, pid=pid) for s in served}
        return daemon

    # -- one daemon ------------------------------------------------------------------------

    def _new(self, gpu: GpuRef) -> ShareDaemon:
        pipe, log_dir, shm = self.directories(gpu.uuid)
        return ShareDaemon(gpu, pipe, log_dir, shm, CONTROL_BINARY if self.binary else MODELLED)

    def _start(self, gpu: GpuRef) -> ShareDaemon:
        """The GPU in EXCLUSIVE_PROCESS, then its daemon with the policy's smallest share as
        defaults; :class:`ClaimError` (mode restored, nothing running) when either fails."""
        daemon = self._new(gpu)
        started = False
        try:
            if self.backend is not None:
                daemon.previous_compute_mode = set_exclusive(self.backend, gpu.index)
                daemon.compute_mode = ComputeMode.EXCLUSIVE_PROCESS
            commands = daemon_commands(self.policy.memory_minimum_mib, gpu.memory_mib)
            if self.binary:
                launch_daemon(
                    self.binary,
                    daemon.pipe_directory,
                    daemon.log_directory,
                    daemon.shm_directory,
                    self._env(daemon),
                    self._run,
                )
                started = True
                daemon.state = RUNNING
            for command in commands:
                self._control(daemon, command)
        except _FAILURES as exc:
            if started:
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    self._control(daemon, "quit")
            self._restore_mode(daemon)
            emit_event(
                self.on_event,
                "MpsNotEnforced",
                f"GPU {gpu.index} ({gpu.uuid}): no MPS daemon for its memory shares: {exc}; "
                "claims for shares of it fail until this is fixed",
            )
            raise ClaimError(
                f"GPU {gpu.index} ({gpu.uuid}) cannot enforce memory shares: {exc}"
            ) from None
        log.info(
            "MPS daemon for memory shares of GPU %d %s (pipe %s)",
            gpu.index,
            daemon.state,
            daemon.pipe_directory,
        )
        return daemon

    def _start_server(self, daemon: ShareDaemon, uid: int) -> int:
        """Start the GPU's server for ``uid``; its pid."""
        if daemon.mode == MODELLED:
            self._control(daemon, f"start_server -uid {uid}")
            pid = daemon.next_pid
            daemon.next_pid += 1
            return pid
        before = self._servers(daemon)
        self._control(daemon, f"start_server -uid {uid}")
        after = self._servers(daemon)
        new = after - before
        if len(new) == 1:
            return new.pop()
        # it was running already (a client of that user came first)
        owned = sorted(p for p in after if _owner(p) == uid)
        if not owned:
            raise OSError(
                f"get_server_list names no server of user {uid} after start_server "
                "(a daemon serving another user queues it)"
            )
        return owned[0]

    def _set_limits(self, daemon: ShareDaemon, served: list[Served]) -> None:
        """The server's limits to the largest of ``served`` (sent only when they change)."""
        limits = server_limits(served)
        if limits is None or limits == daemon.limits or daemon.server_pid is None:
            return
        daemon.limits = None  # unknown until every command went through
        for command in server_commands(daemon.server_pid, *limits):
            self._control(daemon, command)
        daemon.limits = limits

    def _shutdown_server(self, daemon: ShareDaemon) -> None:
        pid, daemon.server_pid, daemon.limits = daemon.server_pid, None, None
        if pid is None:
            return
        try:
            self._control(daemon, f"shutdown_server {pid}")
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("MPS server %d of GPU %d did not shut down: %s", pid, daemon.gpu.index, exc)

    def _stop_if_idle(self, daemon: ShareDaemon) -> None:
        """Quit a daemon that serves no share and give its GPU its compute mode back."""
        if daemon.served:
            return
        try:
            self._control(daemon, "quit")
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("MPS daemon of GPU %d did not quit: %s", daemon.gpu.index, exc)
        self._restore_mode(daemon)
        self.daemons.pop(daemon.gpu.uuid, None)
        log.info("MPS daemon for memory shares of GPU %d stopped", daemon.gpu.index)

    def _restore_mode(self, daemon: ShareDaemon) -> None:
        previous = daemon.previous_compute_mode
        if self.backend is None or previous is None:
            daemon.compute_mode = None
            return
        if restore_compute_mode(self.backend, daemon.gpu.index, previous, self.on_event):
            daemon.previous_compute_mode = None
            daemon.compute_mode = None

    def _servers(self, daemon: ShareDaemon) -> set[int]:
        out = self._control(daemon, "get_server_list")
        return {int(p) for p in out.split() if p.isdigit()}

    def _env(self, daemon: ShareDaemon) -> dict[str, str]:
        return daemon_env(daemon.pipe_directory, daemon.log_directory, daemon.gpu.uuid)

    def _control(self, daemon: ShareDaemon, command: str) -> str:
        """Send (or, modelled, record) one control command (queries are not recorded)."""
        if command != "get_server_list":
            daemon.commands.append(command)
        if self.binary is None or daemon.mode == MODELLED:
            return ""
        return control(self.binary, self._env(daemon), command)


def pod_lookup(store: ObjectStore) -> PodLookup:
    """How the agent finds a share's pods: a ``get`` of each pod in ``status.reservedFor``
    (the agent's role then needs ``get`` on pods); a pod that is not there is None."""

    def lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return store.get("v1", "Pod", name, namespace)
        except NotFound:
            return None

    return lookup


def _owner(pid: int) -> int | None:
    """The user a process runs as (its /proc entry's owner); None when it is gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def share_record(
    served: Served, gpu: GpuRef, daemon: ShareDaemon | None, pod: str
) -> dict[str, Any]:
    """What a claim's checkpoint state records of its share (enough to :meth:`restore`)."""
    previous = daemon.previous_compute_mode if daemon is not None else None
    return {
        "claimUid": served.claim_uid,
        "claim": served.claim,
        "pod": pod,
        "gpu": gpu.uuid,
        "gpuIndex": gpu.index,
        "gpuMemoryMiB": gpu.memory_mib,
        "uid": served.uid,
        "memoryMiB": served.memory_mib,
        "activeThreadPercentage": served.active_thread_percentage,
        "serverPid": served.pid,
        # the server's memory limit when the claim was prepared: what its clients that drop
        # kgpu's environment get (the largest share then prepared on the GPU)
        "ceilingMiB": daemon.ceiling_mib if daemon is not None else served.memory_mib,
        "previousComputeMode": None if previous is None else str(previous),
        "pipeDirectory": daemon.pipe_directory if daemon is not None else "",
    }
