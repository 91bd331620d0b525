"""Property (issue 21), a short seeded run of :mod:`ownership_chaos`: device-plugin pods and
claims (one GPU, several, MIG, time-sliced), deletions, agent restarts and policy changes on a
node of every built-in machine never put one GPU in pods of both APIs, never give the ledger two
holders, and never leave a free GPU unoffered. ``bench/ownership.py`` runs 10,000+ steps."""

from __future__ import annotations

import pytest
from ownership_chaos import run


@pytest.mark.parametrize("seed", [1, 2])
def test_one_owner_per_gpu_under_random_steps(seed: int) -> None:
    result = run(60, seed)
    assert result.steps == 60
    # the run exercised what it claims to: both APIs ran pods, agents restarted, policies moved
    assert result.running["dp"] and result.running["dra"]
    assert result.actions["agent restart"] and result.actions["policy change"]
