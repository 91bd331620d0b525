"""The simulated cluster: nodes from machine profiles, kube-scheduler, kubelets, controllers.

:class:`Simulation` owns the object store (the source of truth plugins read and write), the
scheduler, a simulated kubelet per node and the workload controllers, and advances them until
nothing changes after every scenario step. Its clock only moves when a step says so, so a run
is a pure function of the scenario (pod name suffixes come from the scenario's seed).

Kubelets run kgpu's real node code (see :mod:`kgpu.sim.nodeside`): the node view decides what a
node advertises and how it is labelled, and on bind the device manager asks the device-plugin
servicer for a preferred allocation, then Allocate, and records each container's device ids and
environment. DRA and ComputeDomains plug in through :mod:`kgpu.sim.plugins` when their modules
are present.

This module is the facade; the parts act on one shared :class:`~kgpu.sim.context.SimContext`:
:mod:`~kgpu.sim.node_lifecycle` (nodes joining, changing, failing, leaving),
:mod:`~kgpu.sim.pod_lifecycle` (the kubelet: admission, start, finish, release),
:mod:`~kgpu.sim.binding` (the scheduling queue), :mod:`~kgpu.sim.controllers` (one module per
controller), :mod:`~kgpu.sim.objects` (apply, delete, scale), :mod:`~kgpu.sim.settle` (the
settle loop and the clock), :mod:`~kgpu.sim.steps` (one type per scenario step),
:mod:`~kgpu.sim.report` (what ``kgpu sim`` prints) and :mod:`~kgpu.sim.plugin_loader`. None of
them imports this module (a test keeps the package free of import cycles).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kgpu.config.loader import ConfigSet
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.releases import outside_window
from kgpu.sim import node_lifecycle, nodeside, objects, pod_lifecycle, traffic
from kgpu.sim.context import SimContext
from kgpu.sim.controllers import ControllerManager, ResourceClaimController
from kgpu.sim.controllers.cluster_autoscaler import ClusterAutoscaler
from kgpu.sim.controllers.hpa import HPAController
from kgpu.sim.controllers.keda import KedaController
from kgpu.sim.dra_binding import FakeAttachController
from kgpu.sim.dra_taints import DeviceTaintEvictionController
from kgpu.sim.gcpause import full_collections_deferred
from kgpu.sim.loops import LoopLimitError
from kgpu.sim.manifests import Manifest
from kgpu.sim.plugin_loader import install_device_classes, load_plugins
from kgpu.sim.plugins import Controller, KubeletPlugin, SchedulerPlugin
from kgpu.sim.prometheus import SimPrometheus
from kgpu.sim.report import build_report, step_snapshot
from kgpu.sim.scenario import Scenario, parse_step
from kgpu.sim.scenario_parts import NodeSpec, ObjectRef
from kgpu.sim.settle import advance as advance_clock
from kgpu.sim.settle import settle as settle_cluster
from kgpu.sim.state import PodRecord, SimNode
from kgpu.sim.steps import Step
from kgpu.sim.steps.objects import ApplyStep

Obj = dict[str, Any]


class Simulation:
    """A simulated cluster running one scenario.

    Public surface for plugins and tools: ``store`` (the :class:`MemoryStore`), ``nodes``
    (:class:`SimNode` list with ``name``, ``machine``, ``view``, ``labels``, ``allocations``),
    ``pods`` (records by "ns/name"), ``now`` (seconds), ``events``, :meth:`run`, :meth:`step`,
    :meth:`settle` and :meth:`report`.
    """

    def __init__(
        self,
        scenario: Scenario,
        *,
        work_dir: Path | None = None,
        plugins: bool = True,
        record_steps: bool = False,
        extra_scheduler_plugins: Iterable[SchedulerPlugin] = (),
        extra_kubelet_plugins: Iterable[KubeletPlugin] = (),
        extra_controllers: Iterable[Controller] = (),
    ) -> None:
        self.scenario = scenario
        self.record_steps = record_steps
        self.snapshots: list[dict[str, Any]] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kgpu-sim-")
            work_dir = Path(self._tmp.name)
        self.work_dir = work_dir
        sched, kubelet, ctrls, notes = (
            load_plugins(work_dir, scenario.features, scenario.dra_shares)
            if plugins
            else ([], [], [], [])
        )
        outside = outside_window(scenario.kubernetes_version.minor)
        if outside:  # modelled, not supported: it runs, and says so
            notes = [*notes, f"kubernetesVersion: {outside}; the simulator still models it"]
        self._ctx = ctx = SimContext(
            scenario,
            nodeside.load_configs(scenario.configs, {}),
            [*sched, *extra_scheduler_plugins],
            [*kubelet, *extra_kubelet_plugins],
            warnings=notes,
        )
        # the context's containers, shared: plugins, reports and tests read them here
        self.store = ctx.store
        self.scheduler = ctx.scheduler
        self.kubelet_plugins = ctx.kubelet_plugins
        self.events = ctx.events
        self.nodes = ctx.nodes
        self.pods = ctx.pods
        self.pods_by_owner = ctx.pods_by_owner
        self.unsupported = ctx.unsupported
        self.warnings = ctx.warnings
        self.suffixes = ctx.suffixes
        # the autoscalers: the cluster's Prometheus, KEDA, the HPA controller and
        # cluster-autoscaler; idle (and free) in a cluster without their objects
        self.prometheus = SimPrometheus(ctx)
        self.keda = KedaController(ctx, self.prometheus)
        self.hpa = HPAController(ctx, self.keda.external_metric)
        self.cluster_autoscaler = ClusterAutoscaler(ctx)
        autoscalers: list[Controller] = [self.keda, self.hpa, self.cluster_autoscaler]
        # the resourceclaim controller runs last, so the claims of new pods exist when the
        # scheduler meets them; before it, the device taint eviction controller (when the
        # release has DRADeviceTaints on) and the stand-in for drivers that attach devices
        # (binding conditions)
        taints = scenario.features.device_taints
        claims: list[Controller] = (
            [
                *([DeviceTaintEvictionController(ctx)] if taints else []),
                FakeAttachController(ctx),
                ResourceClaimController(ctx),
            ]
            if ctx.dra
            else []
        )
        self.controllers: list[Controller] = [
            *ctrls,
            *extra_controllers,
            *autoscalers,
            *claims,
        ]
        self.controller_manager = ControllerManager(ctx)
        #: called with the step just taken (None after the start) once the cluster settled:
        #: what checks or records the cluster at every point of a run (``--expect``) hooks in
        self.observers: list[Callable[[Step | None], None]] = []
        self._started = False
        self._steps_done = 0

    # -- time and events ---------------------------------------------------------------------
    @property
    def now(self) -> float:
        return self._ctx.now

    @now.setter
    def now(self, value: float) -> None:
        self._ctx.now = value

    def timestamp(self) -> str:
        return self._ctx.timestamp()

    def emit(self, type_: str, reason: str, obj: str, message: str) -> None:
        self._ctx.emit(type_, reason, obj, message)

    def node(self, name: str) -> SimNode:
        return self._ctx.node_by_name[name]

    @property
    def configs(self) -> ConfigSet:
        return self._ctx.configs

    # -- running -----------------------------------------------------------------------------
    def start(self) -> None:
        """Create the nodes, apply the scenario's manifests, and settle."""
        if self._started:
            return
        self._started = True
        with full_collections_deferred():
            self._start()

    def _start(self) -> None:
        if self.scenario.dra_driver and self._ctx.dra:
            install_device_classes(self.store, self.warnings)
        self.keda.expect(
            [
                *(m.obj for m in self.scenario.apply),
                *(
                    m.obj
                    for step in self.scenario.steps
                    if isinstance(step, ApplyStep)
                    for m in step.manifests
                ),
            ]
        )
        for spec in self.scenario.nodes:
            self.add_nodes(spec)
        for manifest in self.scenario.apply:
            self.apply(manifest)
        self.settle()
        self._snapshot("initial state")
        for observe in self.observers:
            observe(None)

    def run(self) -> Simulation:
        """Start, then run every remaining step of the scenario."""
        self.start()
        for step in self.scenario.steps[self._steps_done :]:
            self.step(step)
        return self

    def step(self, step: Step | Mapping[str, Any]) -> None:
        """Run one scenario step (a :class:`Step`, or a map as written in a scenario's
        ``steps``, e.g. ``{"failNode": "gpu-node-3"}``), then let the cluster settle."""
        self.start()
        with full_collections_deferred():
            self._step(step)

    def _step(self, step: Step | Mapping[str, Any]) -> None:
        if not isinstance(step, Step):
            step = parse_step(
                step,
                nodes=set(self._ctx.node_by_name),
                base=self.scenario.base,
                index=self._steps_done,
            )
        try:
            step.perform(self)
        except LoopLimitError as exc:  # the step asked for too much periodic work: say which
            where = join_path("steps", step.index, step.action)
            raise FieldError(FieldProblem(str(exc), where, self.scenario.file)) from None
        self.settle()
        steps = self.scenario.steps
        if self._steps_done < len(steps) and step is steps[self._steps_done]:
            self._steps_done += 1  # run() continues after the scenario steps already taken
        self._snapshot(step.describe())
        for observe in self.observers:
            observe(step)

    def settle(self) -> None:
        """Run controllers, the scheduler and the kubelets until nothing changes (bounded)."""
        with full_collections_deferred():
            settle_cluster(self._ctx, self.controller_manager, self.controllers)

    def advance(self, seconds: float) -> None:
        """Move the clock; pods whose runtime ends on the way succeed, in time order, and the
        cluster settles after each."""
        with full_collections_deferred():
            advance_clock(self._ctx, seconds, self.controller_manager, self.controllers)

    # -- nodes -------------------------------------------------------------------------------
    def add_nodes(self, spec: NodeSpec) -> None:
        with full_collections_deferred():
            node_lifecycle.add_nodes(self._ctx, spec)

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        node_lifecycle.label_node(self._ctx, name, labels)

    def set_device_plugin(self, running: bool) -> None:
        """Start (or stop) the device plugin on every GPU node, as installing the GPU Operator
        does; nodes added later follow."""
        node_lifecycle.set_device_plugin(self._ctx, running)

    def taint_node(self, name: str, taints: list[dict[str, str]]) -> None:
        """Replace the node's taints (``kubectl taint``); NoExecute evicts pods that do not
        tolerate it."""
        node_lifecycle.taint_node(self._ctx, name, taints)

    def cordon(self, name: str, on: bool = True) -> None:
        node_lifecycle.cordon(self._ctx, name, on)

    def inject_xid(
        self, name: str, gpu: int | str, xid: int, gi: int | None = None, ci: int | None = None
    ) -> None:
        """An XID on a GPU: the node health code decides what turns Unhealthy."""
        node_lifecycle.inject_xid(self._ctx, name, gpu, xid, gi, ci)

    def fail_node(self, name: str) -> None:
        """The node stops answering: NotReady, tainted unreachable, pods evicted."""
        node_lifecycle.fail_node(self._ctx, name)

    def recover_node(self, name: str) -> None:
        node_lifecycle.recover_node(self._ctx, name)

    def delete_node(self, name: str) -> None:
        node_lifecycle.delete_node(self._ctx, name)

    # -- objects and pods --------------------------------------------------------------------
    def apply(self, manifest: Manifest | Obj) -> None:
        """``kubectl apply`` for one object."""
        objects.apply(self._ctx, manifest)

    def delete(self, item: ObjectRef | Manifest) -> None:
        """``kubectl delete`` for one object (cascading through its controllers)."""
        objects.delete(self._ctx, item)

    def scale(self, ref: ObjectRef, replicas: int) -> None:
        objects.scale(self._ctx, ref, replicas)

    def set_traffic(self, ref: ObjectRef, gpu_utilization: float) -> None:
        """Put ``gpu_utilization`` percent of one GPU of load on a workload
        (:mod:`kgpu.sim.traffic`)."""
        traffic.set_traffic(self._ctx, ref, gpu_utilization)

    def gpu_loads(self) -> dict[str, float]:
        """The load ``traffic`` puts on each Running pod's devices now ("ns/pod" -> percent of
        one device), as the simulated GPUs report it."""
        return traffic.gpu_loads(self._ctx)

    def create_pod(
        self,
        obj: Obj,
        *,
        owner_kind: str = "",
        owner_uid: str = "",
        gang: str = "",
        gang_size: int = 0,
        root: str = "",
    ) -> PodRecord:
        """Store a new pod and queue it for scheduling."""
        return pod_lifecycle.create_pod(
            self._ctx,
            obj,
            owner_kind=owner_kind,
            owner_uid=owner_uid,
            gang=gang,
            gang_size=gang_size,
            root=root,
        )

    def delete_pod(self, key: str) -> None:
        pod_lifecycle.delete_pod(self._ctx, key)

    # -- output ------------------------------------------------------------------------------
    def _snapshot(self, title: str) -> None:
        if self.record_steps:
            seen = self.snapshots[-1]["eventsSeen"] if self.snapshots else 0
            self.snapshots.append(step_snapshot(self._ctx, title, seen))

    @property
    def steps_done(self) -> int:
        """How many of the scenario's steps have run (for a progress display)."""
        return self._steps_done

    @property
    def context(self) -> SimContext:
        """The cluster's state, as :mod:`kgpu.sim.report` renders it."""
        return self._ctx

    def report(self) -> dict[str, Any]:
        return build_report(self._ctx)

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def run_scenario(
    scenario: Scenario, *, record_steps: bool = False, work_dir: Path | None = None
) -> Simulation:
    """Build a :class:`Simulation` and run it to the end."""
    return Simulation(scenario, record_steps=record_steps, work_dir=work_dir).run()


__all__ = ["Simulation", "load_plugins", "run_scenario"]
