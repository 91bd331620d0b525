"""What the MIG manager would do to a machine's GPUs, worked out without touching them.

``kgpu plan`` shows the node as its GPUs are *and* as they will be once the MIG manager has
applied the desired layout; tests build partitioned machines the same way. Both must show what
the manager really does, not a second implementation of it, so the preview runs the manager's
own steps -- :func:`~kgpu.drivers.migmanager.read_mig_states`, the pure planner through
:func:`~kgpu.drivers.migmanager.plan_for`, :func:`~kgpu.drivers.migmanager.apply_changes` --
on a :class:`~kgpu.hardware.simulated.SimulatedBackend` holding a copy of the snapshot, which
refuses what the GPUs would refuse. The copy is thrown away; real GPUs are never opened.

What the preview cannot know is who holds a GPU when the manager runs: it assumes nobody does
(on a node, the manager waits for those pods or evicts them first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kgpu.config.loader import ConfigSet, select_mig_config
from kgpu.config.migparted import MigConfig
from kgpu.drivers.migmanager import APPLIED, GpuResult, apply_changes, plan_for, read_mig_states
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.hardware.migplan import MigPlan
from kgpu.hardware.model import Machine
from kgpu.hardware.simulated import SimulatedBackend


@dataclass(frozen=True)
class MigPreview:
    """The manager's plan for ``config``, how each changed GPU would end, and the machine
    afterwards (``after`` is ``before`` when the GPUs already have the layout)."""

    config: str
    plan: MigPlan
    warnings: tuple[str, ...]
    results: tuple[GpuResult, ...]
    before: Machine
    after: Machine

    @property
    def changes(self) -> bool:
        return bool(self.plan.changes)


def preview_mig(machine: Machine, mig: MigConfig) -> MigPreview:
    """Plan ``mig`` for ``machine`` and apply it to a simulated copy of the GPUs.

    FieldError naming the config's file and entry when the layout cannot exist on these GPUs
    (as the manager reports it) or a GPU refuses a step of the plan."""
    backend = SimulatedBackend(machine)
    try:
        plan, warnings = plan_for(mig, machine, read_mig_states(backend, machine))
        results = apply_changes(backend, plan.changes)
        after = backend.snapshot()
    finally:
        backend.close()
    failed = [r for r in results.values() if r.outcome != APPLIED]
    if failed:
        raise FieldError(
            [
                FieldProblem(
                    f"cannot apply mig config {mig.name!r}: {r.line()}",
                    join_path("mig-configs", mig.name),
                    mig.source,
                )
                for r in sorted(failed, key=lambda r: r.index)
            ]
        )
    return MigPreview(
        mig.name,
        plan,
        tuple(warnings),
        tuple(sorted(results.values(), key=lambda r: r.index)),
        machine,
        after,
    )


def machine_after_mig(
    machine: Machine,
    configs: ConfigSet,
    labels: Mapping[str, str],
    mig_config_name: str | None = None,
) -> Machine:
    """``machine`` as the MIG manager leaves it under the layout the node view and the manager
    select (the ``nvidia.com/mig.config`` label, else ``mig_config_name``, else the configs'
    default); unchanged when none is selected. A node that joined with its layout already
    applied, for tests and tools. FieldError as :func:`preview_mig`."""
    mig = select_mig_config(configs, labels, mig_config_name)
    return machine if mig is None else preview_mig(machine, mig).after


__all__ = ["MigPreview", "machine_after_mig", "preview_mig"]
