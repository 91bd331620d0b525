"""``scripts/gpu-check.sh``'s memory-share step (issue 27): two MPS clients, 20 GiB and 40 GiB.

What kgpu's DRA memory shares rely on, checked on a real GPU: GPU 0 in ``EXCLUSIVE_PROCESS``,
one MPS control daemon, its one MPS server (``start_server -uid``: a Legacy daemon serves one
user at a time, so both clients run as one user) with its pinned device-memory limit set
through the control interface (``set_device_pinned_mem_limit``) to the largest share, 40 GiB,
as kgpu's node side does (docs/memory-sharing.md). The 20 GiB client keeps kgpu's environment
(``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M``) and must be held to 20 GiB; the 40 GiB client
has no limit in its environment and must be held to the server's. Each must see at most its
limit free and fail to allocate beyond it.

It changes the GPU's compute mode (restored after), so it is skipped unless
``KGPU_GPU_CHECK_ALLOW_COMPUTE_MODE=1``: GPUs lent to this project are read-only. It needs root
(to set the compute mode and run clients as other users), ``nvidia-cuda-mps-control`` on the
PATH and ``libcuda.so.1``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ALLOW_ENV = "KGPU_GPU_CHECK_ALLOW_COMPUTE_MODE"
CHECK = "memory shares: MPS clients see and keep their limits"
#: the clients' Linux user (an id no account uses): one user per GPU, as kgpu requires
USER = 61000
#: (limit in MiB, whether the client carries it in its environment) of the two clients; the
#: server is limited to the largest (the ceiling a client without kgpu's environment gets)
CLIENTS = ((20 * 1024, True), (40 * 1024, False))
#: MiB a client may see free beyond its limit (the limit is on pinned memory in whole pages)
SLACK_MIB = 512
CONTROL = "nvidia-cuda-mps-control"

#: The client: a CUDA context on the daemon's GPU (through MPS: CUDA_MPS_PIPE_DIRECTORY), its
#: free memory, then one allocation 1 GiB under the limit (must work) and one 1 GiB over it
#: (must fail). Prints one JSON line; errors are CUresult codes.
CLIENT = r"""
import ctypes, json, sys
limit = int(sys.argv[1]) << 20
cuda = ctypes.CDLL("libcuda.so.1")
out = {}
def call(name, *args):
    return int(getattr(cuda, name)(*args))
out["init"] = call("cuInit", 0)
dev = ctypes.c_int()
ctx = ctypes.c_void_p()
out["ctx"] = call("cuDeviceGet", ctypes.byref(dev), 0) or call(
    "cuCtxCreate_v2", ctypes.byref(ctx), 0, dev)
free, total = ctypes.c_size_t(), ctypes.c_size_t()
out["info"] = call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
out["free_mib"], out["total_mib"] = free.value >> 20, total.value >> 20
ptr = ctypes.c_uint64()
out["under"] = call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(limit - (1 << 30)))
if out["under"] == 0:
    call("cuMemFree_v2", ptr)
out["over"] = call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(limit + (1 << 30)))
print(json.dumps(out))
"""
CUDA_ERROR_OUT_OF_MEMORY = 2


def skip_reason(environ: Mapping[str, str]) -> str:
    """Why the step does not run here ("" when it may)."""
    if environ.get(ALLOW_ENV) != "1":
        return (
            f"skipped: it sets GPU 0's compute mode to EXCLUSIVE_PROCESS (restored after); "
            f"lent GPUs are read-only. {ALLOW_ENV}=1 allows it"
        )
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "skipped: needs root (compute mode, clients run as other users)"
    if shutil.which(CONTROL) is None:
        return f"skipped: {CONTROL} is not on the PATH"
    return ""


def judge(limit_mib: int, report: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether one client's report shows its limit enforced, and the figure for the table:
    free memory at most the limit (with :data:`SLACK_MIB`), an allocation 1 GiB under it
    working and one 1 GiB over it refused with CUDA_ERROR_OUT_OF_MEMORY."""
    for step in ("init", "ctx", "info"):
        if report.get(step) != 0:
            return False, f"{limit_mib} MiB client: {step} failed (CUresult {report.get(step)})"
    free = int(report.get("free_mib", -1))
    under, over = report.get("under"), report.get("over")
    ok = 0 <= free <= limit_mib + SLACK_MIB and under == 0 and over == CUDA_ERROR_OUT_OF_MEMORY
    return ok, (
        f"{limit_mib} MiB client: {free} of {report.get('total_mib')} MiB free, "
        f"limit-1GiB {'ok' if under == 0 else f'refused ({under})'}, "
        f"limit+1GiB {'refused' if over == CUDA_ERROR_OUT_OF_MEMORY else f'CUresult {over}'}"
    )


def _client_python() -> str:
    """A Python the clients' users can run: the system's (a virtualenv under /root is not
    theirs to read), else this one."""
    return shutil.which("python3", path="/usr/bin:/bin") or sys.executable


def _control(command: str, env: Mapping[str, str]) -> str:
    done = subprocess.run(
        [CONTROL],
        input=command + "\n",
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=30,
        check=False,
    )
    return done.stdout.strip()


def _server_pid(uid: int, env: Mapping[str, str], wait_s: float = 10.0) -> int | None:
    """The pid of the daemon's server running as ``uid`` (``get_server_list``), waiting up to
    ``wait_s`` for a server just started."""
    deadline = time.monotonic() + wait_s
    while True:
        pid = _listed_server(uid, env)
        if pid is not None or time.monotonic() >= deadline:
            return pid
        time.sleep(0.5)


def _listed_server(uid: int, env: Mapping[str, str]) -> int | None:
    for word in _control("get_server_list", env).split():
        if not word.isdigit():
            continue
        try:
            status = Path(f"/proc/{word}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and int(line.split()[1]) == uid:
                return int(word)
    return None


def _restore(backend: Any, index: int, mode: Any, tries: int = 5) -> str:
    """Put GPU ``index`` back in ``mode``, retrying while the daemon's servers exit; the last
    error ("" when restored)."""
    problem = ""
    for _ in range(tries):
        try:
            backend.set_compute_mode(index, mode)
            return ""
        except Exception as exc:  # NVML: in use while the servers wind down
            problem = str(exc)
            time.sleep(1)
    return problem


def run_memory_shares(backend: Any, environ: Mapping[str, str] | None = None) -> list[Any]:
    """The step's rows (:class:`kgpu.cli.gpu_check.Row`): one skipped row with the reason, or
    one row per client."""
    from kgpu.cli.gpu_check import Row
    from kgpu.hardware.backend import ComputeMode

    reason = skip_reason(os.environ if environ is None else environ)
    if reason:
        return [Row(CHECK, None, reason)]
    machine = backend.snapshot()
    gpu = machine.gpus[0]
    ceiling = max(limit for limit, _ in CLIENTS)
    if gpu.memory_mib < ceiling + 2048:
        return [Row(CHECK, None, f"skipped: GPU 0 has {gpu.memory_mib} MiB, too little")]
    work = Path(tempfile.mkdtemp(prefix="kgpu-mps-check-"))
    pipes, logs = work / "pipe", work / "log"
    for d in (work, pipes, logs):
        d.mkdir(exist_ok=True)
        d.chmod(0o777)  # the clients run as other users and must reach the pipes
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": gpu.uuid,
        "CUDA_MPS_PIPE_DIRECTORY": str(pipes),
        "CUDA_MPS_LOG_DIRECTORY": str(logs),
    }
    before = backend.compute_mode(gpu.index)
    rows: list[Any] = []
    started = False
    try:
        backend.set_compute_mode(gpu.index, ComputeMode.EXCLUSIVE_PROCESS)
        subprocess.run([CONTROL, "-d"], env=env, check=True, timeout=30)
        started = True
        time.sleep(1)
        _control(f"start_server -uid {USER}", env)
        pid = _server_pid(USER, env)
        if pid is None:
            rows.append(Row(CHECK, False, f"no MPS server for uid {USER} ({logs})"))
            return rows
        _control(f"set_device_pinned_mem_limit {pid} 0 {ceiling}M", env)
        for limit, in_env in CLIENTS:
            client_env = {
                "PATH": env.get("PATH", "/usr/bin:/bin"),
                "CUDA_MPS_PIPE_DIRECTORY": str(pipes),
            }
            if in_env:  # kgpu's environment: lowers the server's limit to the share
                client_env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={limit}M"
            done = subprocess.run(
                [_client_python(), "-c", CLIENT, str(limit)],
                env=client_env,
                user=USER,
                cwd="/",
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            try:
                report = json.loads(done.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                rows.append(Row(CHECK, False, f"{limit} MiB: {done.stderr.strip()[-200:]}"))
                continue
            ok, figure = judge(limit, report)
            rows.append(Row(CHECK, ok, figure))
    except Exception as exc:  # NVML, the daemon or a client: the row says which, then restore
        rows.append(Row(CHECK, False, f"{type(exc).__name__}: {exc}"))
    finally:
        if started:
            _control("quit", env)
            time.sleep(1)
        problem = _restore(backend, gpu.index, before)
        if problem:  # say so: the GPU is left in EXCLUSIVE_PROCESS
            rows.append(Row("compute mode restored", False, f"{before}: {problem}"))
        shutil.rmtree(work, ignore_errors=True)
    return rows
