"""A gpu.nvidia.com DRA plugin process for the SIGKILL tests (not a test module).

Usage: python dra_crash_agent.py ROOT CLAIMS_JSON [CRASH_POINT]

Serves the real sockets under ROOT/kubelet, writes CDI specs under ROOT/cdi, reads
ResourceClaims from CLAIMS_JSON (the API server of the test), and kills itself with SIGKILL
when it reaches CRASH_POINT, so nothing after that step runs and nothing is cleaned up.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from kgpu.drivers.gpu import DRIVER, GpuHandler
from kgpu.hardware.mig import apply_layout
from kgpu.hardware.profiles import load_machine
from kgpu.kubelet.dra.plugin import DraPlugin
from kgpu.kubelet.dra.server import DriverServer, plugin_dir
from kgpu.store import NotFound


class FileStore:
    """Reads claims from a JSON list the test rewrites: enough API server for the plugin."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Any:
        for obj in json.loads(self.path.read_text()):
            meta = obj["metadata"]
            if obj["kind"] == kind and meta["name"] == name and meta["namespace"] == namespace:
                return obj
        raise NotFound(f"{kind} {name!r} not found")


def main() -> None:
    root, claims = Path(sys.argv[1]), Path(sys.argv[2])
    crash_at = sys.argv[3] if len(sys.argv) > 3 else ""
    machine = apply_layout(load_machine("dgx-h100", hostname="node-a"), {0: {"1g.10gb": 7}})
    kubelet_root = root / "kubelet"
    directory = plugin_dir(kubelet_root, DRIVER)

    def hook(point: str) -> None:
        if point == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)

    plugin = DraPlugin(
        GpuHandler(machine, "node-a", directory),
        directory,
        root / "cdi",
        FileStore(claims),  # type: ignore[arg-type]
        crash_hook=hook,
    )
    server = DriverServer(plugin, kubelet_root)
    server.start()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin
    server.stop()


if __name__ == "__main__":
    main()
