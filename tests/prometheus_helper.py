"""A real Prometheus for the tests that check kgpu against it (metrics, PromQL, dashboard).

Prometheus is Debian's ``prometheus`` package (scripts/test.sh installs it when run as root).
Locally a missing binary skips the test, saying how to get it; under CI=true it fails the test,
so a CI run cannot pass without the real-Prometheus checks having run.

pytest puts tests/ on ``sys.path`` (its conftest sits in no package): import this module as
``prometheus_helper`` from any test directory.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

READY_TIMEOUT_S = 30


def require_binary(name: str) -> str:
    """The binary's path; skip locally when missing, fail under CI=true."""
    path = shutil.which(name)
    if path is None:
        reason = (
            f"{name} is not installed (Debian package 'prometheus'; scripts/test.sh installs it "
            "when run as root)"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason + " and CI=true: the real-Prometheus acceptance test must run")
        pytest.skip(reason)
    return path


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape_config(targets: Sequence[str], interval: str = "1s") -> str:
    """A prometheus.yml scraping ``targets`` (host:port) as one job ``kgpu`` every ``interval``."""
    listed = ", ".join(f"'{t}'" for t in targets)
    return (
        f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n"
        f"scrape_configs:\n  - job_name: kgpu\n    static_configs:\n      - targets: [{listed}]\n"
    )


@contextmanager
def running_prometheus(
    work: Path, config: str, *, data: Path | None = None, args: Sequence[str] = ()
) -> Iterator[str]:
    """A Prometheus on loopback with ``config`` (prometheus.yml text), ready; its URL.

    Its TSDB is ``data`` (default ``work/data``: pass a backfilled one to query old samples) and
    its log ``work/prometheus.log``, shown when it does not become ready in 30 s. Stopped on exit.
    """
    binary = require_binary("prometheus")
    config_path = work / "prometheus.yml"
    config_path.write_text(config)
    port = free_port()
    log_path = work / "prometheus.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={data or work / 'data'}",
                *args,
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not start:\n{log_path.read_text()}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def query(url: str, promql: str) -> list[dict[str, Any]]:
    """An instant query's result vector (asserting the API answered ``success``)."""
    with urllib.request.urlopen(
        f"{url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}", timeout=5
    ) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return list(body["data"]["result"])
