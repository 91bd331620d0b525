"""The state a simulated cluster's parts share, handed explicitly to the functions that act.

Node lifecycle, the kubelets, the scheduling cycle and the settle loop are plain functions of
one :class:`SimContext`; :class:`kgpu.sim.simulation.Simulation` owns it and is the facade
tools and tests call. Keeping the state in one place (and not in mixins) makes what each
function reads and writes visible at its signature.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any, Protocol

from kgpu.config.loader import ConfigSet
from kgpu.sim.admission import Admission
from kgpu.sim.journal import SimStore
from kgpu.sim.names import Suffixes
from kgpu.sim.plugins import Event, KubeletPlugin, SchedulerPlugin
from kgpu.sim.scenario import Scenario
from kgpu.sim.scheduler import Scheduler
from kgpu.sim.state import PodRecord, SimNode

Obj = dict[str, Any]


class ReleaseListener(Protocol):
    """Told when a pod's kubelet has torn it down (it finished, failed or was deleted), before
    the scheduler releases what it reserved for it."""

    def pod_released(self, pod: Obj) -> None: ...

#: Fixed date of the simulated clock: a run is a pure function of its scenario.
EPOCH_DATE = "2025-01-01"


class SimContext:
    """Everything the simulated control plane and kubelets read and write.

    ``epoch`` counts changes that can make an unschedulable pod schedulable (a node changed, a
    pod released its resources, someone else wrote objects); a pod that failed scheduling is
    not retried within the same epoch.
    """

    def __init__(
        self,
        scenario: Scenario,
        configs: ConfigSet,
        scheduler_plugins: Iterable[SchedulerPlugin],
        kubelet_plugins: Iterable[KubeletPlugin],
        warnings: Iterable[str] = (),
    ) -> None:
        self.scenario = scenario
        self.suffixes = Suffixes(scenario.seed)  # pod name suffixes: seeded, so runs repeat
        self.now = 0.0
        self.store = SimStore(clock=self.timestamp)
        self.scheduler = Scheduler(
            list(scheduler_plugins), self.store, scenario.kubernetes_version
        )
        self.kubelet_plugins: list[KubeletPlugin] = list(kubelet_plugins)
        self.release_listeners: list[ReleaseListener] = []
        self.dra = any(p.name == "DynamicResources" for p in self.scheduler.plugins)
        #: the API server's admission of pods (Priority, kgpu's clique placement webhook)
        self.admission = Admission(self.store, webhook=self.dra)
        self.configs = configs
        self.inline_configs: dict[str, str] = {}  # "ConfigMap ns/name" -> its YAML text
        #: what ``kubectl apply`` last applied, per object (its last-applied-configuration)
        self.last_applied: dict[tuple[str, str, str, str], Obj] = {}
        self.device_plugin = scenario.device_plugin  # nodes added later follow this
        self.events: list[Event] = []
        self.unsupported: list[str] = []
        self.warnings: list[str] = [*warnings, *configs.warnings]
        self.nodes: list[SimNode] = []
        self.node_by_name: dict[str, SimNode] = {}
        self.pods: dict[str, PodRecord] = {}
        self.pods_by_owner: dict[str, dict[str, PodRecord]] = {}
        self.pending: dict[str, PodRecord] = {}  # waiting for the scheduler
        self.to_admit: dict[str, PodRecord] = {}  # bound, waiting for their kubelet
        self.gangs: dict[str, dict[str, PodRecord]] = {}
        self.timers: list[tuple[float, int, str]] = []  # heap of (end time, seq, pod key)
        self.seq = itertools.count()  # pod creation order
        self.ip_seq = itertools.count()  # node join order, for addresses
        self.epoch = 0

    def timestamp(self) -> str:
        seconds = int(self.now)
        h, rem = divmod(seconds, 3600)
        m, s = divmod(rem, 60)
        return f"{EPOCH_DATE}T{h % 24:02d}:{m:02d}:{s:02d}Z"

    def emit(self, type_: str, reason: str, obj: str, message: str) -> None:
        self.events.append(Event(type_, reason, obj, message))
