"""The state a simulated cluster's parts share, handed explicitly to the functions that act.

Node lifecycle, the kubelets, the scheduling cycle and the settle loop are plain functions of
one :class:`SimContext`; :class:`kgpu.sim.simulation.Simulation` owns it and is the facade
tools and tests call. Keeping the state in one place (and not in mixins) makes what each
function reads and writes visible at its signature.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Protocol

from kgpu.config.loader import ConfigSet
from kgpu.dra.features import GATES
from kgpu.sim.admission import Admission, share_policy_of
from kgpu.sim.journal import SimStore
from kgpu.sim.loops import Loops
from kgpu.sim.names import Suffixes
from kgpu.sim.plugins import Event, KubeletPlugin, SchedulerPlugin
from kgpu.sim.scenario import Scenario
from kgpu.sim.scenario_parts import NodeSpec
from kgpu.sim.scheduler import Scheduler
from kgpu.sim.state import PodRecord, SimNode

Obj = dict[str, Any]


class ReleaseListener(Protocol):
    """Told when a pod's kubelet has torn it down (it finished, failed or was deleted), before
    the scheduler releases what it reserved for it."""

    def pod_released(self, pod: Obj) -> None: ...


#: Fixed date of the simulated clock: a run is a pure function of its scenario.
EPOCH_DATE = "2025-01-01"


#: How many events of one object :meth:`SimContext.record` looks back for a repeat.
FOLD_LOOKBACK = 8


def time_string(seconds: float) -> str:
    """A moment of the simulated clock as the API writes times (RFC 3339, whole seconds)."""
    h, rem = divmod(int(seconds), 3600)
    m, s = divmod(rem, 60)
    return f"{EPOCH_DATE}T{h % 24:02d}:{m:02d}:{s:02d}Z"


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
        # the API server drops the fields of gates the release does not serve (claims asking
        # GPU memory at 1.34-1.35 without DRAConsumableCapacity are plain claims there)
        gates = {name: bool(getattr(scenario.features, attr)) for name, (attr, _) in GATES.items()}
        self.store = SimStore(clock=self.timestamp, gate_on=lambda g: gates.get(g, True))
        self.scheduler = Scheduler(list(scheduler_plugins), self.store, scenario.kubernetes_version)
        self.kubelet_plugins: list[KubeletPlugin] = list(kubelet_plugins)
        self.release_listeners: list[ReleaseListener] = []
        self.dra = any(p.name == "DynamicResources" for p in self.scheduler.plugins)
        #: the API server's admission of pods (Priority, kgpu's clique placement webhook)
        self.admission = Admission(
            self.store,
            webhook=self.dra,
            # the scenario's consumableShares (a SharePolicy once scenarios read it)
            shares=share_policy_of(scenario),
        )
        self.configs = configs
        self.inline_configs: dict[str, str] = {}  # "ConfigMap ns/name" -> its YAML text
        #: what ``kubectl apply`` last applied, per object (its last-applied-configuration)
        self.last_applied: dict[tuple[str, str, str, str], Obj] = {}
        self.device_plugin = scenario.device_plugin  # nodes added later follow this
        self.events: list[Event] = []
        #: every event as it happened, repeats included (``events`` counts repeats on one
        #: entry, as the event recorder does): what one step caused is a slice of this
        self.event_log: list[Event] = []
        self._last_event: dict[str, int] = {}  # object -> index of its newest event
        self._previous: list[int] = []  # per event: the index of the object's one before
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
        #: heap of clock times at which something is due (a controller's delay, a timeout):
        #: advancing the clock settles the cluster at each, in order
        self.wakeups: list[float] = []
        #: Called after each moment ``advance`` settles (the clock at that moment): the HTML
        #: report samples the cluster there, so its plots show what happened when it did.
        self.moment_observers: list[Callable[[], None]] = []
        #: pods reserved on a node whose PreBind waits (DRA binding conditions), by key
        self.prebinding: dict[str, tuple[PodRecord, SimNode]] = {}
        self.mig_wakes: dict[str, float] = {}  # node -> when its MIG manager wants a call
        # nodes whose ownership ledger changed since their kubelet last took in the device
        # plugin's list and their DRA driver last published (kgpu.sim.ownership)
        self.ownership_dirty: set[str] = set()
        self.seq = itertools.count()  # pod creation order
        self.ip_seq = itertools.count()  # node join order, for addresses
        self.epoch = 0
        #: ``traffic`` steps: (kind, namespace, name) -> percent of one GPU (kgpu.sim.traffic)
        self.traffic: dict[tuple[str, str, str], float] = {}
        #: autoscaled node groups by name, and the index their next node gets
        self.node_groups: dict[str, NodeSpec] = {}
        self.group_next_index: dict[str, int] = {}
        #: work the clock runs on a period (scrapes, KEDA polls, HPA syncs, cluster-autoscaler)
        self.loops = Loops()

    def timestamp(self) -> str:
        return time_string(self.now)

    def emit(self, type_: str, reason: str, obj: str, message: str) -> None:
        self.record(Event(type_, reason, obj, message, 1, self.now, self.now))

    def record(self, event: Event) -> None:
        """Record an event as an event recorder does: the same event (type, reason, message)
        again on an object raises the count and last time of the one recorded instead of
        adding one (``x5 over 4m`` in ``kubectl describe``), also when a controller records
        several events per sync (``FailedGetResourceMetric`` then
        ``FailedComputeMetricsReplicas``, every 15 s). What never folds: a repeat after a
        different outcome on the object, recorded later than the first (NotReady, Ready,
        NotReady again: three entries, in order), and a repeat at the same instant after
        something else."""
        self.event_log.append(
            event if event.first_seen is not None else replace(event, first_seen=self.now)
        )
        events = self.events
        if len(self._previous) < len(events):  # someone appended directly: not foldable
            self._previous.extend([-1] * (len(events) - len(self._previous)))
        newest = self._last_event.get(event.object, -1)
        index, between = newest, 0
        while 0 <= index < len(events) and between < FOLD_LOOKBACK:
            prev = events[index]
            if prev.object != event.object:
                break
            if (
                prev.reason == event.reason
                and prev.message == event.message
                and prev.type == event.type
            ):
                if index == newest or self._same_sync(index, newest, prev):
                    events[index] = replace(
                        prev, count=prev.count + event.count, last_seen=self.now
                    )
                    return
                break
            between += 1
            index = self._previous[index]
        if event.first_seen is None:
            event = replace(event, first_seen=self.now, last_seen=self.now)
        self._previous.append(newest)
        self._last_event[event.object] = len(events)
        events.append(event)

    def _same_sync(self, index: int, newest: int, prev: Event) -> bool:
        """Whether the events recorded on the object after ``index`` began together with it
        (one sync's several events, repeating), and the repeat comes later than the last."""
        if prev.last_seen is None or self.now <= prev.last_seen:
            return False
        later = newest
        while later != index:
            if later < 0 or self.events[later].first_seen != prev.first_seen:
                return False
            later = self._previous[later]
        return True

    def wake_at(self, when: float) -> None:
        """Ask for the cluster to settle at clock time ``when`` (once per time)."""
        if when > self.now and when not in self.wakeups:
            heapq.heappush(self.wakeups, when)
