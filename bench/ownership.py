"""Benchmark and long property run: one owner per GPU (issue 21).

    python bench/ownership.py [--steps 10000] [--seeds 1] [--check-every 1] [--json]

Runs ``tests/sim/ownership_chaos.py`` (the suite's short run, 60 steps per seed) for
``--steps`` steps per seed: a node of every built-in machine, the p4de split into MIG devices;
each step a device-plugin pod, a claim pod (1, 2 or 4 GPUs, a MIG device), both at once on one
node (the race), a deletion, an agent restart (ledger rebuilt from the kubelet's device
checkpoint and the DRA checkpoint) or a ``gpuOwnership`` change (shared / devicePlugin / dra /
two splits, with and without time-slicing); after every ``--check-every`` steps the cluster
settles and the properties are checked (no GPU in pods of both APIs, no double holder in the
ledger, no free GPU left unoffered). Exits 1 on the first violation, naming seed and step.

Reports steps/s, the action mix, and how many pod-steps each API ran (both must be busy).
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "sim"))

from ownership_chaos import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, default=1, help="seeds 1..N, one run each")
    parser.add_argument("--check-every", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # refused Allocates are the point, not news
    results = []
    for seed in range(1, args.seeds + 1):
        try:
            out = run(args.steps, seed, check_every=args.check_every)
        except AssertionError as exc:
            print(f"VIOLATION: {exc}", file=sys.stderr)
            return 1
        results.append(
            {
                "seed": seed,
                "steps": out.steps,
                "checks": out.checks,
                "seconds": round(out.seconds, 1),
                "steps_per_s": round(out.steps / out.seconds, 1),
                "actions": dict(sorted(out.actions.items())),
                "pod_steps": dict(sorted(out.running.items())),
            }
        )
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    doc = {"runs": results, "peak_rss_mib": round(rss, 1), "violations": 0}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        for r in results:
            print(
                f"seed {r['seed']}: {r['steps']} steps, {r['checks']} checks, 0 violations, "
                f"{r['seconds']} s ({r['steps_per_s']} steps/s); actions {r['actions']}; "
                f"running pod-steps {r['pod_steps']}"
            )
        print(f"peak RSS {doc['peak_rss_mib']} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
