"""The agent side of the chaos run: an in-process agent in its own process, so that the run
can SIGKILL it as a crash would, with a control pipe for XIDs.

    python -m kgpu.testing.chaos_agent ROOT

ROOT is the kubelet root that :class:`kgpu.testing.agent_rig.AgentRig` lays out (its
``split.yaml``, ``faults/``, ``status.json``). Each line on stdin ``xid <gpu index>`` injects
XID 79 into the simulated backend at once and answers ``ok``; end of input stops the agent
(exit 0). A start the agent refuses (another agent holds the root) prints its one error line
and exits 1, as ``kgpu agent`` does.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.errors import KgpuError
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.testing.agent_rig import MACHINE, NODE

#: Short enough that a GPU marked Unhealthy recovers between two chaos steps.
QUIET_PERIOD_S = 0.5
PROBE_INTERVAL_S = 0.2


def main(argv: list[str]) -> int:
    root = Path(argv[0])
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    backend = SimulatedBackend(load_machine(MACHINE, hostname=NODE))
    options = AgentOptions(
        machine=MACHINE,
        config_files=(root / "split.yaml",),
        node_name=NODE,
        kubelet_root=root,
        dra=False,
        fault_dir=root / "faults",
        status_file=root / "status.json",
        health_quiet_period_s=QUIET_PERIOD_S,
        health_probe_interval_s=PROBE_INTERVAL_S,
    )
    agent = Agent(options, backend=backend)
    try:
        agent.start()
    except KgpuError as exc:
        agent.stop()
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    print("ready", flush=True)
    try:
        for line in sys.stdin:
            words = line.split()
            if words[:1] == ["xid"]:
                backend.inject_xid(int(words[1]), 79)
                print("ok", flush=True)
    finally:
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
