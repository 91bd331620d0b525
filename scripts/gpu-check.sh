#!/usr/bin/env bash
# The read-only acceptance run for a lent GPU node (kgpu.cli.gpu_check): the agent against a
# fake kubelet, every CDI host path present, labels, the DRA slice, a claim prepared, /metrics
# idle and under a load, scrape time against `kgpu metrics` alone, RSS. One pass/fail table with
# figures. Changes nothing on the GPU (the memory-share step, two MPS clients with 20 and 40 GiB
# limits, sets GPU 0's compute mode and is skipped unless KGPU_GPU_CHECK_ALLOW_COMPUTE_MODE=1,
# as root); the load is the command given with --load, e.g.
#   scripts/gpu-check.sh --load "python3 -c 'import torch; ...matmul loop...'"
# Exit 0: all passed; 1: a check failed; 2: no NVML here (refused, nothing checked).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PYTHON=.venv/bin/python
exec "$PYTHON" -m kgpu.cli.gpu_check "$@"
