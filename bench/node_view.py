"""How long ``build_node_view`` takes per node, as the simulator calls it for thousands of nodes.

Run: ``python bench/node_view.py [--nodes N]``. Each node has its own hostname (so its own GPU
UUIDs and no cache hits across nodes); a second pass over the same nodes shows the cached path
an agent or simulator takes when nothing changed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from kgpu.config import load_config_files, load_config_strings
from kgpu.hardware.profiles import load_machine
from kgpu.node.view import build_node_view

ACCEPTANCE = Path(__file__).resolve().parents[2] / "shared" / "acceptance"

SPLIT = """
sharing:
  timeSlicing:
    resources: [{name: gpu, rename: nvidia.com/gpu.ts, devices: [0, 1, 2, 3], replicas: 8}]
  mps:
    resources: [{name: gpu, rename: nvidia.com/gpu.mps, devices: [4, 5, 6, 7], replicas: 4}]
"""


def _time(label: str, nodes: int, profile: str, configs: object, labels: dict[str, str]) -> None:
    machines = [load_machine(profile, hostname=f"{profile}-{i}") for i in range(nodes)]
    start = time.perf_counter()
    for m in machines:
        build_node_view(m, configs, labels)  # type: ignore[arg-type]
    cold = time.perf_counter() - start
    start = time.perf_counter()
    for m in machines:
        build_node_view(m, configs, labels)  # type: ignore[arg-type]
    warm = time.perf_counter() - start
    print(
        f"{label:<44} {nodes:>5} nodes  cold {cold * 1000 / nodes:7.3f} ms/node "
        f"({cold:6.2f} s)  cached {warm * 1e6 / nodes:7.1f} us/node"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=2000)
    args = parser.parse_args()
    n = args.nodes
    _time(
        "rtx-2080ti, time-slicing x6 (guide row 2)",
        n,
        "rtx-2080ti",
        load_config_files([ACCEPTANCE / "seed-guides/time-slicing-config-2080ti.yaml"]),
        {},
    )
    _time(
        "p4de.24xlarge, p4de-half-balanced mixed (row 7)",
        n,
        "p4de.24xlarge",
        load_config_files([ACCEPTANCE / "seed-guides/gpu-operator-values.yaml"]),
        {"nvidia.com/mig.config": "p4de-half-balanced"},
    )
    _time(
        "dgx-h100, time-slicing x8 + MPS x4 split",
        n,
        "dgx-h100",
        load_config_strings({"split.yaml": SPLIT}),
        {},
    )


if __name__ == "__main__":
    main()
