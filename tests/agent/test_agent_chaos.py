"""The agent under chaos (issue 11): crashes, socket deletions, kubelet restarts, hung and
refusing kubelets, bad fault files, config swaps and a second agent, each at least once, with
every invariant of :mod:`kgpu.testing.chaos` checked after every step.

A few seconds by default; a long run: ``KGPU_CHAOS_SECONDS=600 KGPU_CHAOS_SEED=7 python -m
pytest tests/agent/test_agent_chaos.py`` (or ``python bench/agent.py --chaos-seconds 3600``
for RSS over time). The health bound here is 1 s, generous for a shared CI machine; the
benchmark reports the measured latencies against the 100 ms goal.
"""

from __future__ import annotations

import json
import os

import pytest

from kgpu.testing.chaos import ACTIONS, run_chaos
from kgpu.testing.split_node import short_root

pytestmark = pytest.mark.slow


def test_the_agent_keeps_its_promises_under_chaos() -> None:
    seconds = float(os.environ.get("KGPU_CHAOS_SECONDS", "2"))
    seed = int(os.environ.get("KGPU_CHAOS_SEED", "1"))
    with short_root("kgc") as root:
        report = run_chaos(root, seed=seed, seconds=seconds, health_bound_s=1.0)
        log = (root / "chaos-agent.log").read_text()
    summary = report.summary()
    assert not report.violations, json.dumps(summary, indent=2) + "\n" + log[-4000:]
    assert set(report.steps) == set(ACTIONS)
    assert report.health_s, summary  # XIDs were measured, a hung Register among them
    assert report.agents_started >= 2  # a crash and a restart happened
    assert "Traceback" not in log, log[-4000:]
