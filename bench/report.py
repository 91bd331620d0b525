"""Benchmark: ``kgpu sim --report`` on a large cluster: file size, capture cost, browser time.

The scenario: N nodes, 60 % dgx-h100 and 40 % p4de.24xlarge split into 1g.10gb MIG devices
(56 MIG devices a node: the heaviest cells to draw), a 1-GPU Deployment of 3 pods per node and an
8-GPU Deployment of one pod per 10 nodes, then seven steps over 16 simulated minutes (scale up,
an XID, a failed node, scale down).

Measured: the run alone, the same run recording a frame per step (what ``--report`` adds), the
time to render the page in Python, the HTML size, and, when Debian's ``chromium`` is installed,
the wall time of ``chromium --headless --dump-dom`` (start, parse, script, layout) and the
page script's own time (``data-render-ms``: unpacking and drawing the last step's map).

Usage: python bench/report.py [--nodes 1000] [--max-nodes 1000] [--out report.html]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from kgpu.sim.html import record_run, render_page
from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.testing.manifests import deployment


def scenario(nodes: int) -> dict[str, Any]:
    dgx = nodes * 6 // 10
    return {
        "name": f"report-bench-{nodes}",
        "nodes": [
            {"name": "dgx", "count": dgx, "machine": "dgx-h100"},
            {
                "name": "a100",
                "count": nodes - dgx,
                "machine": "p4de.24xlarge",
                "labels": {"nvidia.com/mig.config": "all-1g.10gb"},
            },
        ],
        "apply": [
            deployment("one-gpu", nodes * 3, {"nvidia.com/gpu": 1}, container="main"),
            deployment("eight-gpu", nodes // 10, {"nvidia.com/gpu": 8}, container="main"),
        ],
        "steps": [
            {"advance": "1m"},
            {"scale": {"name": "one-gpu", "replicas": nodes * 4}},
            {"advance": "5m"},
            {"xid": {"node": "dgx-3", "gpu": 2, "xid": 79}},
            {"failNode": "dgx-10"},
            {"advance": "10m"},
            {"scale": {"name": "eight-gpu", "replicas": nodes // 20}},
        ],
    }


def browser_time(page: Path) -> dict[str, Any]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        return {"browser": "chromium not installed"}
    with tempfile.TemporaryDirectory() as profile:
        t0 = time.perf_counter()
        done = subprocess.run(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={profile}",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        wall = time.perf_counter() - t0
    found = re.search(r'data-render-ms="(\d+)"', done.stdout)
    return {
        "chromiumDumpDomSeconds": round(wall, 2),
        "pageScriptMs": int(found.group(1)) if found else None,
        "domBytes": len(done.stdout),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--max-nodes", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    data = scenario_from_dict(scenario(args.nodes))

    t0 = time.perf_counter()
    plain = Simulation(data, plugins=False).run()
    run_s = time.perf_counter() - t0
    plain.close()

    t0 = time.perf_counter()
    sim = Simulation(data, plugins=False)
    picture = record_run(sim, max_nodes=args.max_nodes)
    recorded_s = time.perf_counter() - t0
    pods = len(sim.pods)
    sim.close()

    t0 = time.perf_counter()
    html = render_page(picture)
    render_s = time.perf_counter() - t0
    out = args.out or Path(tempfile.mkdtemp()) / "report.html"
    out.write_text(html)
    result = {
        "python": platform.python_version(),
        "nodes": args.nodes,
        "pods": pods,
        "frames": len(picture["frames"]),
        "nodesDrawnPerFrame": len(picture["frames"][-1]["nodes"]),
        "runSeconds": round(run_s, 2),
        "runWithReportSeconds": round(recorded_s, 2),
        "renderPageSeconds": round(render_s, 2),
        "htmlKiB": round(len(html.encode()) / 1024),
        **browser_time(out),
        "maxRssMiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
