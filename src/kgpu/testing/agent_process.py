"""Drive ``kgpu agent`` as a child process, the way an end-to-end test or a demo does."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path


class AgentProcess:
    """``kgpu agent`` in a child process with a fault directory, status file and log file
    under ``root`` (which is also the kubelet root). DRA is off unless ``args`` turn it on."""

    def __init__(self, root: Path, args: list[str], *, node_name: str = "node-a") -> None:
        self.root = root
        self.fault_dir = root / "faults"
        self.fault_dir.mkdir(exist_ok=True)
        self.status_path = root / "status.json"
        self.log_path = root / "agent.log"
        cmd = [
            sys.executable,
            "-m",
            "kgpu",
            "agent",
            "--kubelet-root",
            str(root),
            "--node-name",
            node_name,
            "--fault-dir",
            str(self.fault_dir),
            "--status-file",
            str(self.status_path),
            *(args if "--dra" in args else ["--no-dra", *args]),
        ]
        self._log = self.log_path.open("w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        self._faults = 0

    def log(self) -> str:
        return self.log_path.read_text()

    def status(self, timeout_s: float = 10) -> dict[str, object]:
        """The agent's status file, waiting for its first write: the agent writes it at the end
        of its start, after the kubelet may already have seen (and used) its plugins."""
        deadline = time.monotonic() + timeout_s
        while not self.status_path.exists():
            assert self.proc.poll() is None, f"agent exited:\n{self.log()}"
            assert time.monotonic() < deadline, f"no status file:\n{self.log()}"
            time.sleep(0.02)
        return dict(json.loads(self.status_path.read_text()))

    def inject(self, fault: dict[str, object]) -> None:
        """Drop a fault file (written aside, renamed into place) and wait until it is applied."""
        self._faults += 1
        name = f"{self._faults:03d}.json"
        tmp = self.fault_dir / f".{name}.tmp"
        tmp.write_text(json.dumps(fault))
        tmp.rename(self.fault_dir / name)
        deadline = time.monotonic() + 10
        while not (self.fault_dir / f"{name}.done").exists():
            assert not (self.fault_dir / f"{name}.error").exists(), (
                self.fault_dir / f"{name}.error"
            ).read_text()
            assert time.monotonic() < deadline, "fault file not applied"
            time.sleep(0.02)

    def terminate(self, timeout_s: float = 10) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self._log.close()
