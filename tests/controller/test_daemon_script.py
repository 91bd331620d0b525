"""The IMEX daemon container's program (``DAEMON_SCRIPT``) run by a real POSIX shell with a
stand-in ``nvidia-imex``: the config is rendered with the pod IP, the clique's names resolve
through /etc/hosts, and a change of the clique reaches the daemon as SIGUSR1."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from kgpu.computedomain.imex import render_imex_config, render_imex_config_template
from kgpu.computedomain.objects import DAEMON_SCRIPT, daemon_set
from kgpu.testing.poll import eventually

FAKE_IMEX = """#!/bin/sh
echo "$@" > "$IMEX_RUN_DIR/args"
trap 'echo usr1 >> "$IMEX_RUN_DIR/signals"' USR1
trap 'exit 0' TERM
while :; do sleep 0.05; done
"""


@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX shell")
def test_the_daemon_script_renders_config_keeps_hosts_and_signals_changes(tmp_path: Path) -> None:
    imexd = tmp_path / "imexd"
    imexd.mkdir()
    run = tmp_path / "run"
    (imexd / "imexd.cfg.tmpl").write_text(render_imex_config_template())
    (imexd / "hosts").write_text("10.0.0.1\tcompute-domain-daemon-0000\n")
    etc_hosts = tmp_path / "etc-hosts"
    etc_hosts.write_text("127.0.0.1\tlocalhost\n10.9.9.9\tcompute-domain-daemon-0007\n")
    fake = tmp_path / "nvidia-imex"
    fake.write_text(FAKE_IMEX)
    fake.chmod(0o755)
    env = {
        **os.environ,
        "IMEXD_DIR": str(imexd),
        "IMEX_RUN_DIR": str(run),
        "HOSTS_FILE": str(etc_hosts),
        "IMEX_BINARY": str(fake),
        "POD_IP": "192.168.4.2",
        "POLL_S": "0.05",
    }
    proc = subprocess.Popen(["sh", "-c", DAEMON_SCRIPT], env=env)
    try:
        assert eventually(lambda: (run / "args").exists())
        assert (run / "args").read_text().split() == ["-c", f"{run}/imexd.cfg"]
        # the config names the read-only directory's nodes.cfg
        assert (run / "imexd.cfg").read_text() == render_imex_config("192.168.4.2", str(imexd))
        # /imexd is read-only in the pod: the script writes nothing there
        assert sorted(p.name for p in imexd.iterdir()) == ["hosts", "imexd.cfg.tmpl"]
        # the old mapping is replaced, the host's own lines stay
        assert etc_hosts.read_text() == (
            "127.0.0.1\tlocalhost\n10.0.0.1\tcompute-domain-daemon-0000\n"
        )
        (imexd / "hosts").write_text(
            "10.0.0.1\tcompute-domain-daemon-0000\n10.0.0.2\tcompute-domain-daemon-0001\n"
        )
        assert eventually(lambda: (run / "signals").exists())
        assert "10.0.0.2\tcompute-domain-daemon-0001" in etc_hosts.read_text()
        assert (run / "signals").read_text() == "usr1\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_daemon_set_runs_the_script_with_its_pod_ip() -> None:
    from kgpu.computedomain.api import API_VERSION, parse_compute_domain

    domain = parse_compute_domain(
        {
            "apiVersion": API_VERSION,
            "kind": "ComputeDomain",
            "metadata": {"name": "d", "uid": "u"},
            "spec": {"channel": {"resourceClaimTemplate": {"name": "c"}}},
        }
    )
    (container,) = daemon_set(domain)["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["sh", "-c", DAEMON_SCRIPT]
    (env,) = container["env"]
    assert env == {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
