"""``kgpu controller`` as a user runs it: bad flags are refused all at once naming each flag;
the real process against the stand-in leads, answers /healthz and /readyz, and on SIGTERM
releases the Lease and exits 0."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from controller_cluster import NAMESPACE, Cluster, wait_for  # type: ignore[import-not-found]
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.testing.apiserver import write_kubeconfig


def test_bad_flags_are_refused_together_naming_each_flag(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "controller",
            "--kubeconfig",
            str(tmp_path / "missing"),
            "--health-address",
            "nowhere",
            "--webhook-address",
            ":8443",
            "--device-classes",
            "gpus,tpus",
            "--leader-elect-lease-duration",
            "5",
            "--log-level",
            "loud",
            "--imex-daemon-image",
            "",
        ],
    )
    assert result.exit_code == 1
    text = result.output
    for expected in (
        "--log-level: 'loud': allowed debug, info, warning, error",
        "--health-address: 'nowhere' is not HOST:PORT",
        "--webhook-cert-dir: needed with --webhook-address",
        "--device-classes: 'tpus': allowed gpus, compute-domains",
        "--leader-elect-lease-duration: 5s must be greater than the renew deadline (10s)",
        "--imex-daemon-image: '' is not an image reference",
        "no such file",
    ):
        assert expected in text, text
    assert "Traceback" not in text


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


def test_the_process_leads_reports_health_and_releases_the_lease_on_sigterm(
    cluster: Cluster,
) -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kgpu",
            "controller",
            "--kubeconfig",
            str(write_kubeconfig(cluster.root / "kc-process", cluster.server.url)),
            "--namespace",
            NAMESPACE,
            "--identity",
            "proc-1",
            "--health-address",
            f"127.0.0.1:{port}",
            "--leader-elect-lease-duration",
            "3",
            "--leader-elect-renew-deadline",
            "2",
            "--leader-elect-retry-period",
            "0.5",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert wait_for(lambda: _get(f"{base}/readyz")[0] == 200, seconds=30)
        assert wait_for(lambda: _get(f"{base}/healthz")[1].startswith("leader"), seconds=10)
        lease = cluster.admin.get("coordination.k8s.io/v1", "Lease", "kgpu-controller", NAMESPACE)
        assert lease["spec"]["holderIdentity"] == "proc-1"
        assert _get(f"{base}/other")[0] == 404
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lease = cluster.admin.get("coordination.k8s.io/v1", "Lease", "kgpu-controller", NAMESPACE)
    assert lease["spec"]["holderIdentity"] == ""  # released: a standby need not wait
