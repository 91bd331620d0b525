"""Agent RSS with a simulated backend vs NVML over the fake NVML (issue 22): what kgpu's NVML
path costs in memory, without a GPU. Run each case in a fresh interpreter:

    python bench/rss_nvml.py sim
    python bench/rss_nvml.py fake-nvml

The agent runs in-process with metrics on (8 x H100 ``dgx-h100``), the fake kubelet too; after
20 scrapes the process's ``VmRSS`` is printed. Imports happen inside :func:`main` so the
interpreter's own RSS is read first.
"""

from __future__ import annotations

import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def rss() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(x for x in status if x.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


def main(kind: str) -> None:
    base = rss()
    from kgpu.agent.daemon import Agent, AgentOptions
    from kgpu.drivers.metrics import MetricsComponent
    from kgpu.hardware.profiles import load_machine
    from kgpu.hardware.simulated import SimulatedBackend
    from kgpu.testing.fake_kubelet import FakeKubelet

    imported = rss()
    sim = SimulatedBackend(load_machine("dgx-h100", hostname="n"))
    backend: object = sim
    if kind == "fake-nvml":
        from kgpu.hardware.nvml import NvmlBackend
        from kgpu.testing.fake_nvml import FakeNvml

        backend = NvmlBackend(FakeNvml(sim))
    root = Path(tempfile.mkdtemp(prefix="r"))
    opts = AgentOptions(
        machine="nvml" if kind == "fake-nvml" else "dgx-h100",
        kubelet_root=root,
        cdi_root=root / "cdi",
        node_name="n",
        dra=False,
        metrics_address="127.0.0.1:0",
    )
    agent = Agent(opts, backend=backend)  # type: ignore[arg-type]
    with FakeKubelet(root) as kubelet:
        agent.start()
        try:
            kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 8)
            metrics = next(c for c in agent.components if isinstance(c, MetricsComponent))
            for _ in range(20):
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics") as r:
                    r.read()
            time.sleep(1)
            print(
                f"{kind}: python {base:.1f} MiB, after imports {imported:.1f}, "
                f"agent serving {rss():.1f} MiB; pynvml loaded: {'pynvml' in sys.modules}"
            )
        finally:
            agent.stop()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sim")
