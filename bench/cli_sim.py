"""Benchmark: ``kgpu sim`` end to end through the command line on the 100,000-GPU cluster.

The same cluster and workloads as ``bench/sim.py --case mixed --plugins`` (12,500 dgx-h100
nodes, a Deployment of 80,000 one-GPU pods then one of 20,000 eight-GPU pods, each applied in its
own step), written as a scenario file and run as a user would: ``kgpu sim FILE -o json`` (the
whole report streamed to a file) and ``kgpu sim FILE -o summary``, each in a fresh process. Then
``bench/sim.py --single`` on the same sizes in a fresh process, for the ratio the issue sets
(at most 1.5x the bench's setup + scheduling time, under 2 GiB RSS with ``-o json``).

Reports wall seconds, max RSS (of the child process) and the output's size; the machine's load
average before each run (the numbers are only comparable at similar load).

Usage: python bench/cli_sim.py [--nodes 12500] [--pods 100000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from kgpu.testing.manifests import deployment

BENCH = Path(__file__).resolve().parent


def write_scenario(folder: Path, nodes: int, pods: int) -> Path:
    eight = pods // 5
    workloads = {
        "one-gpu.yaml": deployment(
            "one-gpu", pods - eight, {"nvidia.com/gpu": 1}, container="main", image="cuda"
        ),
        "eight-gpu.yaml": deployment(
            "eight-gpu", eight, {"nvidia.com/gpu": 8}, container="main", image="cuda"
        ),
    }
    for name, obj in workloads.items():
        (folder / name).write_text(yaml.safe_dump(obj, sort_keys=False))
    scenario = {
        "name": f"dgx-{nodes}",
        "description": f"{nodes:,} dgx-h100 nodes, {pods:,} pods (bench/sim.py's mixed case)",
        "nodes": [{"name": "dgx", "count": nodes, "machine": "dgx-h100"}],
        "steps": [{"name": f"apply {n}", "apply": [n]} for n in workloads],
    }
    path = folder / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    return path


def timed(cmd: list[str], out: Path) -> dict[str, Any]:
    """Run ``cmd`` with stdout to ``out``: wall seconds, the child's own max RSS (wait4),
    output bytes, and the load average before it started."""
    load = os.getloadavg()[0]
    errors = out.with_suffix(".stderr")
    start = time.perf_counter()
    with out.open("wb") as handle, errors.open("wb") as err:
        proc = subprocess.Popen(cmd, stdout=handle, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {code}: {errors.read_text()[-2000:]}")
    return {
        "wallSeconds": round(wall, 1),
        "cpuSeconds": round(usage.ru_utime + usage.ru_stime, 1),
        "maxRssMiB": round(usage.ru_maxrss / 1024),
        "outputBytes": out.stat().st_size,
        "load": round(load, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=12500)
    parser.add_argument("--pods", type=int, default=100000)
    parser.add_argument("--keep", type=Path, help="write the scenario and outputs here")
    parser.add_argument("--skip-bench", action="store_true", help="only the CLI runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kgpu-cli-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        scenario = write_scenario(folder, args.nodes, args.pods)
        kgpu = [sys.executable, "-m", "kgpu"]
        rows: dict[str, Any] = {}
        # one fresh process each
        rows["kgpu sim -o json"] = timed(
            [*kgpu, "sim", str(scenario), "-o", "json"], folder / "out.json"
        )
        with (folder / "out.json").open() as handle:
            report = json.load(handle)
        rows["kgpu sim -o json"]["pods"] = len(report["pods"])
        del report
        rows["kgpu sim -o summary"] = timed(
            [*kgpu, "sim", str(scenario), "-o", "summary"], folder / "out.txt"
        )
        if not args.skip_bench:
            cmd = [sys.executable, str(BENCH / "sim.py"), "--single", "--case", "mixed"]
            cmd += ["--plugins", "--nodes", str(args.nodes), "--pods", str(args.pods)]
            row = timed(cmd, folder / "bench.json")
            result = json.loads((folder / "bench.json").read_text())
            row["setupPlusScheduleSeconds"] = round(
                result["setupSeconds"] + result["scheduleSeconds"], 1
            )
            row["pods"] = result["pods"]
            rows["bench/sim.py --single"] = row
        json_row, bench = rows["kgpu sim -o json"], rows.get("bench/sim.py --single")
        if bench:
            rows["ratio"] = {
                "wall": round(json_row["wallSeconds"] / bench["wallSeconds"], 2),
                "cpu": round(json_row["cpuSeconds"] / bench["cpuSeconds"], 2),
            }
        print(json.dumps(rows, indent=2))
        if args.keep is None:
            for name in ("out.json", "out.txt", "out.stderr", "bench.json", "bench.stderr"):
                (folder / name).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
