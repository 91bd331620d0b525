"""Issue 28's low items: modes fixed whatever the umask (directories made with their mode, a
socket bound where nobody else can reach it before it is 0600), the MPS daemon's environment
limited to what it needs, its /dev/shm a size-capped tmpfs, a broken kubeconfig one clean
error."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.agent.nfd import write_features
from kgpu.drivers import mps
from kgpu.drivers.mps import SHM_MOUNT_OPTIONS, MpsManager, MpsPlan, mount_shm
from kgpu.errors import FieldError
from kgpu.kubelet import sockets
from kgpu.kubelet.cdi import write_atomic


@pytest.fixture
def umask_000() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_directories_get_their_mode_under_umask_000(tmp_path: Path, umask_000: None) -> None:
    write_atomic(tmp_path / "cdi" / "deep" / "spec.yaml", "x")
    assert _mode(tmp_path / "cdi") == _mode(tmp_path / "cdi" / "deep") == 0o750
    write_features(tmp_path / "features.d", {"nvidia.com/gpu.present": "true"})
    assert _mode(tmp_path / "features.d") == 0o755


def test_a_socket_is_bound_in_a_private_directory_and_appears_0600(
    tmp_path: Path, umask_000: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[Path, int]] = []
    real_server = sockets.grpc.server

    def server(*args: Any, **kwargs: Any) -> Any:
        inner = real_server(*args, **kwargs)
        real_add = inner.add_insecure_port

        def add_insecure_port(target: str) -> int:
            bound = Path(target.removeprefix("unix://"))
            seen.append((bound.parent, _mode(bound.parent)))
            return int(real_add(target))

        inner.add_insecure_port = add_insecure_port
        return inner

    monkeypatch.setattr(sockets.grpc, "server", server)
    path = tmp_path / "plugins" / "kgpu.sock"
    grpc_server = sockets.serve_unix(path, lambda s: None, workers=1)
    try:
        ((where, mode),) = seen
        assert where != path.parent and where.parent == path.parent and mode == 0o700
        assert stat.S_ISSOCK(path.lstat().st_mode) and _mode(path) == 0o600
        assert _mode(path.parent) == 0o750
        assert not where.exists()  # the private directory is gone
        sockets.wait_listening(path)
    finally:
        grpc_server.stop(None)


def _plan(tmp_path: Path) -> MpsPlan:
    return MpsPlan(
        resource="nvidia.com/gpu",
        gpu_index=0,
        gpu_uuid="GPU-0",
        replicas=2,
        pipe_directory=str(tmp_path / "mps" / "gpu" / "0" / "pipe"),
        log_directory=str(tmp_path / "mps" / "gpu" / "0" / "log"),
        shm_directory=str(tmp_path / "mps" / "shm"),
        active_thread_percentage=50,
        pinned_memory_limit_mib=1024,
    )


def test_the_mps_daemon_gets_only_its_own_environment_and_a_capped_shm(
    tmp_path: Path, umask_000: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "nvidia-cuda-mps-control"
    fake.write_text(f'#!/bin/sh\nenv > "{tmp_path}/env"\ncat > /dev/null\n')
    fake.chmod(0o755)
    monkeypatch.setenv("KUBECONFIG", "/etc/kgpu/secret-kubeconfig")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    mounts: list[list[str]] = []
    manager = MpsManager(use_binary=True, run=mounts.append)
    manager.binary = str(fake)
    plan = _plan(tmp_path)
    daemon = manager._start(plan)
    assert daemon.state == "running", daemon.error
    env = dict(
        line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines() if "=" in line
    )
    assert "KUBECONFIG" not in env and "HTTPS_PROXY" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-0"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == plan.pipe_directory
    assert set(env) - {"PATH", "LD_LIBRARY_PATH", "PWD", "SHLVL", "_"} <= {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_MPS_PIPE_DIRECTORY",
        "CUDA_MPS_LOG_DIRECTORY",
    }
    assert mounts == [["mount", "-t", "tmpfs", "-o", SHM_MOUNT_OPTIONS, "shm", plan.shm_directory]]
    assert "size=65536k" in SHM_MOUNT_OPTIONS and "noexec" in SHM_MOUNT_OPTIONS
    for directory in (plan.pipe_directory, plan.log_directory, plan.shm_directory):
        assert _mode(Path(directory)) == 0o755


def test_without_the_privilege_to_mount_shm_stays_a_directory_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(command: list[str]) -> None:
        raise subprocess.CalledProcessError(32, command, b"", b"mount: permission denied")

    warned: list[str] = []  # the logger itself: another test's logging setup may detach it
    monkeypatch.setattr(mps.log, "warning", lambda msg, *args: warned.append(msg % args))
    assert mount_shm(tmp_path, refuse) is False
    assert len(warned) == 1 and "without a size cap" in warned[0]


@pytest.mark.parametrize(
    "text",
    [
        "a: [",  # not YAML
        "current-context: x\ncontexts: [{name: x, context: 7}]\n",  # a context not a map
        "contexts: 5\n",
        "- 1\n",
    ],
)
def test_a_broken_kubeconfig_is_one_error_naming_the_file(tmp_path: Path, text: str) -> None:
    from kgpu.cluster.kube import KubeStore

    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(FieldError) as caught:
        KubeStore.from_config(str(path))
    assert str(path) in str(caught.value)


def test_the_cli_reports_a_broken_kubeconfig_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text("current-context: x\ncontexts: [{name: x, context: 7}]\n")
    done = subprocess.run(
        [sys.executable, "-m", "kgpu", "controller", "--kubeconfig", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    assert str(path) in done.stderr + done.stdout
