"""The simulated cluster (``kgpu sim``): kgpu's real node, DRA and ComputeDomain code on
simulated GPU nodes, with kube-scheduler's filters and the controllers of a real control plane.

:func:`load_scenario` reads a scenario; :class:`Simulation` runs it (``run``, ``step``,
``apply``, ``report``). The parts (docs/simulator.md): ``scenario`` and ``scenario_parts``
(the file), ``steps`` (one type per step), ``controllers`` (one module per controller),
``scheduler`` and ``binding`` (kube-scheduler), ``node_lifecycle``, ``pod_lifecycle`` and
``nodeside`` (the kubelets running kgpu's node code), ``dra_scheduler``, ``dra_node`` and
``computedomain`` (the DRA and ComputeDomain plugins), ``settle`` (the rounds and the clock),
``report`` (what it prints), ``metrics`` (``--serve-metrics``).
"""

from kgpu.sim.scenario import Scenario, load_scenario, scenario_from_dict
from kgpu.sim.simulation import Simulation, run_scenario
from kgpu.sim.steps import STEP_TYPES, Step

__all__ = [
    "STEP_TYPES",
    "Scenario",
    "Simulation",
    "Step",
    "load_scenario",
    "run_scenario",
    "scenario_from_dict",
]
