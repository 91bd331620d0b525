"""Assertions on a simulated run, for CI: ``kgpu sim --expect FILE`` and a scenario's
``expect`` key (docs/simulator.md, "Expectations").

:mod:`~kgpu.sim.expect.schema` reads and checks the file against the scenario's steps,
:mod:`~kgpu.sim.expect.checks` holds one type per kind of assertion, and
:mod:`~kgpu.sim.expect.run` checks them at their points of a run.
"""

from kgpu.sim.expect.run import ExpectResult, ExpectRun, Failure
from kgpu.sim.expect.schema import (
    Block,
    Expectations,
    load_expectations,
    parse_expectations,
    read_expectations,
)

__all__ = [
    "Block",
    "ExpectResult",
    "ExpectRun",
    "Expectations",
    "Failure",
    "load_expectations",
    "parse_expectations",
    "read_expectations",
]
