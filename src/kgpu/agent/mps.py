"""MPS control daemons for MPS-shared resources.

A control daemon is addressed by its pipe directory, and the node view gives every MPS resource
one pipe directory (``<mpsRoot>/<resource>/pipe``, as upstream), so there is one daemon per MPS
resource, covering that resource's GPUs, with per-GPU defaults: ``set_default_active_thread_
percentage <100 // replicas>`` and ``set_default_device_pinned_mem_limit <index> <MiB>M``.
Its pipe and log directories are the host paths the node view gives (``<mpsRoot>/<resource>/``,
default ``/run/nvidia/mps``), which Allocate mounts into clients.

With ``nvidia-cuda-mps-control`` on PATH (a real node) the daemon is started with ``-d`` and
configured through its control pipe. Without it (simulation) the daemon is modelled: the same
directories, limits and control commands are recorded and reported (nothing is written to the
host), and the state is ``modelled``. kgpu never
changes the GPUs' compute mode (upstream sets EXCLUSIVE_PROCESS); set it in the node's
provisioning if wanted.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from kgpu.node.allocate import mps_directories, mps_shm_directory
from kgpu.node.model import NodeView, ResourceView, Sharing

log = logging.getLogger(__name__)

CONTROL_BINARY = "nvidia-cuda-mps-control"


@dataclass(frozen=True)
class MpsPlan:
    """What one control daemon should enforce (comparable, so a reload restarts only changes)."""

    resource: str
    pipe_directory: str  # host path
    log_directory: str
    shm_directory: str
    gpu_uuids: tuple[str, ...]
    active_thread_percentage: int
    pinned_limits: tuple[tuple[int, str], ...]  # (GPU index, "<MiB>M")


@dataclass
class MpsDaemon:
    plan: MpsPlan
    host_pipe: Path
    host_log: Path
    mode: str  # "nvidia-cuda-mps-control" | "modelled"
    state: str = "stopped"  # "running" | "modelled" | "failed" | "stopped"
    error: str = ""
    commands: list[str] = field(default_factory=list)

    def status(self) -> dict[str, object]:
        return {
            "resource": self.plan.resource,
            "mode": self.mode,
            "state": self.state,
            "pipeDirectory": str(self.host_pipe),
            "logDirectory": str(self.host_log),
            "gpus": list(self.plan.gpu_uuids),
            "activeThreadPercentage": self.plan.active_thread_percentage,
            "pinnedDeviceMemoryLimits": {str(i): v for i, v in self.plan.pinned_limits},
            "controlCommands": list(self.commands),
            "error": self.error,
        }


def plans(view: NodeView) -> dict[str, MpsPlan]:
    out = {}
    for res in view.resources:
        plan = _plan(res)
        if plan is not None:
            out[res.name] = plan
    return out


def _plan(res: ResourceView) -> MpsPlan | None:
    mps_devices = [d for d in res.devices if d.mps is not None]
    if res.sharing is not Sharing.MPS and not mps_devices:
        return None
    pipe, logdir = mps_directories(res)
    per_gpu: dict[int, tuple[str, int, int]] = {}
    for dev in mps_devices:
        assert dev.mps is not None
        per_gpu.setdefault(
            dev.gpu_index,
            (dev.gpu_uuid, dev.mps.pinned_memory_limit_mib, dev.mps.active_thread_percentage),
        )
    pct = min((p for _, _, p in per_gpu.values()), default=100)
    return MpsPlan(
        resource=res.name,
        pipe_directory=pipe,
        log_directory=logdir,
        shm_directory=mps_shm_directory(res),
        gpu_uuids=tuple(u for _, (u, _, _) in sorted(per_gpu.items())),
        active_thread_percentage=pct,
        pinned_limits=tuple((i, f"{m}M") for i, (_, m, _) in sorted(per_gpu.items())),
    )


class MpsManager:
    """Keeps one daemon per MPS resource in line with the current view."""

    def __init__(self, *, use_binary: bool | None = None) -> None:
        binary = shutil.which(CONTROL_BINARY)
        self.binary = binary if (use_binary is None or use_binary) else None
        self.daemons: dict[str, MpsDaemon] = {}

    def sync(self, view: NodeView) -> None:
        wanted = plans(view)
        for name in list(self.daemons):
            if name not in wanted or wanted[name] != self.daemons[name].plan:
                self._stop(self.daemons.pop(name))
        for name, plan in wanted.items():
            if name not in self.daemons:
                self.daemons[name] = self._start(plan)

    def stop_all(self) -> None:
        for name in list(self.daemons):
            self._stop(self.daemons.pop(name))

    def status(self) -> list[dict[str, object]]:
        return [d.status() for _, d in sorted(self.daemons.items())]

    # -- one daemon --------------------------------------------------------------------------

    def _start(self, plan: MpsPlan) -> MpsDaemon:
        daemon = MpsDaemon(
            plan=plan,
            host_pipe=Path(plan.pipe_directory),
            host_log=Path(plan.log_directory),
            mode=CONTROL_BINARY if self.binary else "modelled",
        )
        commands = [
            f"set_default_device_pinned_mem_limit {i} {limit}" for i, limit in plan.pinned_limits
        ]
        commands.append(f"set_default_active_thread_percentage {plan.active_thread_percentage}")
        daemon.commands = commands
        try:
            if self.binary:
                for directory in (plan.pipe_directory, plan.log_directory, plan.shm_directory):
                    Path(directory).mkdir(parents=True, exist_ok=True)
                subprocess.run([self.binary, "-d"], env=self._env(daemon), check=True, timeout=10)
                for command in commands:
                    self._control(daemon, command)
                daemon.state = "running"
            else:
                daemon.state = "modelled"
            log.info(
                "MPS daemon for %s %s: %d%% threads, pinned %s on %s",
                plan.resource,
                daemon.state,
                plan.active_thread_percentage,
                dict(plan.pinned_limits),
                daemon.host_pipe,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            daemon.state = "failed"
            daemon.error = str(exc)
            log.error("MPS daemon for %s failed to start: %s", plan.resource, exc)
        return daemon

    def _stop(self, daemon: MpsDaemon) -> None:
        if daemon.state == "running":
            try:
                self._control(daemon, "quit")
            except (OSError, subprocess.SubprocessError) as exc:
                log.warning("MPS daemon for %s did not quit: %s", daemon.plan.resource, exc)
        daemon.state = "stopped"
        log.info("MPS daemon for %s stopped", daemon.plan.resource)

    def _env(self, daemon: MpsDaemon) -> dict[str, str]:
        env = dict(os.environ)
        env["CUDA_MPS_PIPE_DIRECTORY"] = str(daemon.host_pipe)
        env["CUDA_MPS_LOG_DIRECTORY"] = str(daemon.host_log)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(daemon.plan.gpu_uuids)
        return env

    def _control(self, daemon: MpsDaemon, command: str) -> str:
        assert self.binary is not None
        done = subprocess.run(
            [self.binary],
            input=command,
            env=self._env(daemon),
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
        return done.stdout
