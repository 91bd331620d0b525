"""The suite's short run of ``bench/from_cluster.py``: 20 nodes and 200 pods from a stand-in in
another process, through the real client; every bound pod stays where it is, every node holds
the GPUs the API server says, and the pods asking for 8 GPUs stay Pending. The 5,000-node run
and its figures are in BENCHMARKS.md."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "from_cluster.py"


def test_short_import_run(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_from_cluster", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.run(20, 200, tmp_path)
    assert result["bound_moved"] == 0
    assert result["gpu_counts_match"] is True
    assert result["pending"] == 200 - 200 * 3 // 5 - 200 // 3
    assert result["warnings"] == 0
