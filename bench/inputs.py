"""Input safety figures (issue 11): fuzz throughput and findings, a large Pod through
``kgpu validate``, and 200 concurrent scrapes of the /metrics server.

    python bench/inputs.py --fuzz 2000     # 2,000 fuzzed runs per command (and per input kind:
                                           # counters CSV, ConfigMap dirs, expect files)
    python bench/inputs.py --pod           # a 1.3 MB Pod: kgpu validate vs 4 pure-Python parses
    python bench/inputs.py --scrapes 200   # 200 concurrent scrapes: kgpu's server vs stdlib's

``--fuzz`` uses the strategies and the judge of tests/fuzz (each run: exit 0, or exit 1 with an
``error: file: ...`` line; no traceback, no hang past 10 s, no runaway memory) but keeps going
after a failure, counting each distinct cause once (the first frame of its traceback or its
error line) and saving one input per cause under ``--save`` (default /tmp/kgpu-fuzz-bench).
"""

from __future__ import annotations

import argparse
import collections
import json
import platform
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def fuzz(runs: int, save: Path, commands: list[str]) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "tests"))
    import fuzz.test_fuzz_commands as suite  # type: ignore[import-not-found]

    save.mkdir(parents=True, exist_ok=True)
    tests = {
        "validate": suite.test_validate_survives_mutated_inputs,
        "plan": suite.test_plan_survives_mutated_configs,
        "sim": suite.test_sim_survives_mutated_scenarios,
        "allocate": suite.test_allocate_survives_mutated_inputs,
        "machines": suite.test_machines_and_plan_survive_mutated_snapshots,
        "counters": suite.test_metrics_survives_mutated_counters,
        "configmap-dirs": suite.test_plan_survives_mutated_configmap_volumes,
        "expect": suite.test_sim_survives_mutated_expect_files,
    }
    results: dict[str, Any] = {}
    for name in commands:
        results[name] = _fuzz_one(suite, name, tests[name], runs, save)
        print(json.dumps({name: results[name]}), flush=True)
    return results


def _fuzz_one(suite: Any, name: str, test: Any, runs: int, save: Path) -> dict[str, Any]:
    from fuzz.harness import run_cli  # type: ignore[import-not-found]
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    causes: collections.Counter[str] = collections.Counter()
    counted = [0]

    def judge(args: list[str], target: Path, body: bytes, _save: Any, **kw: Any) -> None:
        target.write_bytes(body)
        base = kw.pop("base", None)
        roots = [target.parent, Path.cwd(), *([base] if base else [])]
        outcome = run_cli(args, roots=roots, **kw)
        counted[0] += 1
        if outcome.failure:
            lines = outcome.details.strip().splitlines()
            where = lines[-3].strip() if len(lines) >= 3 else ""
            cause = f"{outcome.failure[:100]} @ {where}"
            if cause not in causes:
                (save / f"{name}-{len(causes):03d}-{target.name}").write_bytes(body)
            causes[cause] += 1

    suite._run = judge
    inner = test.hypothesis.inner_test

    @settings(
        max_examples=runs,
        phases=[Phase.generate],
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(data=st.data())
    def run(data: Any) -> None:
        inner(data=data, save_dir=save)

    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    return {
        "runs": counted[0],
        "seconds": round(seconds, 1),
        "runs_per_minute": round(counted[0] / seconds * 60),
        "failures": sum(causes.values()),
        "causes": dict(causes),
    }


def large_pod() -> dict[str, Any]:
    """A 1.3 MB Pod (25,000 env entries) through kgpu validate, in process."""
    import tempfile

    import yaml
    from typer.testing import CliRunner

    from kgpu.cli import app

    env = "".join(f'    - name: VAR_{i}\n      value: "{"x" * 20}{i}"\n' for i in range(25_000))
    text = (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: big}\nspec:\n  containers:\n"
        f"  - name: c\n    image: busybox\n    env:\n{env}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pod.yaml"
        path.write_text(text)
        start = time.perf_counter()
        result = CliRunner().invoke(app, ["validate", str(path)])
        validate_s = time.perf_counter() - start
    assert result.exit_code == 0, result.output
    start = time.perf_counter()
    for _ in range(4):  # what validate did before: four parses by the pure-Python loader
        yaml.load(text, Loader=yaml.SafeLoader)
    four_pure_s = time.perf_counter() - start
    return {
        "bytes": len(text),
        "kgpu_validate_s": round(validate_s, 2),
        "four_pure_python_parses_s": round(four_pure_s, 2),
    }


BODY = "".join(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{i}"}} {i}\n' for i in range(2000))


def _scrape(port: int, barrier: threading.Barrier, timeout: float) -> float:
    barrier.wait()
    start = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while conn.recv(65536):
                pass
    except OSError:
        return float("inf")
    return time.perf_counter() - start


def _storm(port: int, clients: int, timeout: float) -> dict[str, Any]:
    barrier = threading.Barrier(clients)
    with ThreadPoolExecutor(clients) as pool:
        times = sorted(pool.map(lambda _: _scrape(port, barrier, timeout), range(clients)))
    done = [t for t in times if t != float("inf")]
    return {
        "clients": clients,
        "answered": len(done),
        "p50_ms": round(statistics.median(done) * 1000, 1) if done else None,
        "p99_ms": round(done[max(0, int(len(done) * 0.99) - 1)] * 1000, 1) if done else None,
        "max_ms": round(done[-1] * 1000, 1) if done else None,
    }


def scrapes(clients: int, timeout: float) -> dict[str, Any]:
    from kgpu.metrics.server import MetricsServer

    server = MetricsServer("127.0.0.1:0", lambda: BODY)
    server.start()
    try:
        ours = _storm(server.port, clients, timeout)
    finally:
        server.stop()

    class Handler(BaseHTTPRequestHandler):  # the standard library's defaults, as kgpu had
        def do_GET(self) -> None:
            body = BODY.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    stdlib = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stdlib.daemon_threads = True
    thread = threading.Thread(target=stdlib.serve_forever, daemon=True)
    thread.start()
    try:
        theirs = _storm(int(stdlib.server_address[1]), clients, timeout)
    finally:
        stdlib.shutdown()
        stdlib.server_close()
    return {"kgpu": ours, "stdlib_backlog_5": theirs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fuzz", type=int, default=0, help="fuzzed runs per command")
    parser.add_argument(
        "--commands",
        default="validate,plan,sim,allocate,machines,counters,configmap-dirs,expect",
        help="which commands",
    )
    parser.add_argument("--save", type=Path, default=Path("/tmp/kgpu-fuzz-bench"))
    parser.add_argument("--pod", action="store_true", help="the 1.3 MB Pod through validate")
    parser.add_argument("--scrapes", type=int, default=0, help="concurrent scrapes")
    parser.add_argument("--timeout", type=float, default=30.0, help="per-scrape timeout (s)")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}",
    }
    jobs: list[tuple[str, Callable[[], Any]]] = []
    if args.fuzz:
        jobs.append(("fuzz", lambda: fuzz(args.fuzz, args.save, args.commands.split(","))))
    if args.pod:
        jobs.append(("large_pod", large_pod))
    if args.scrapes:
        jobs.append(("scrapes", lambda: scrapes(args.scrapes, args.timeout)))
    for key, job in jobs:
        report[key] = job()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
