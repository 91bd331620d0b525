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
"""

from __future__ import annotations

import contextlib
import heapq
import importlib
import itertools
import logging
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from kgpu.cluster.store import NotFound, key_of
from kgpu.config.loader import ConfigSet
from kgpu.errors import FieldError, KgpuError
from kgpu.hardware.model import Machine
from kgpu.node.health import HealthState
from kgpu.sim import nodeside
from kgpu.sim.journal import SimStore
from kgpu.sim.manifests import Manifest, check, passes_through, simulated
from kgpu.sim.names import Suffixes
from kgpu.sim.plugins import Controller, Event, KubeletPlugin, SchedulerPlugin
from kgpu.sim.podspec import Taint, parse_taints, pod_requirements, tolerates, validate_pod_spec
from kgpu.sim.quantity import format_units
from kgpu.sim.scenario import NodeSpec, ObjectRef, Scenario, Step, parse_step
from kgpu.sim.scheduler import Scheduler
from kgpu.sim.state import PodRecord, SimNode
from kgpu.sim.workloads import API_VERSIONS, Workloads

log = logging.getLogger(__name__)
Obj = dict[str, Any]

MAX_ROUNDS = 64
GiB = 2**30
#: Host CPU (millicores) and memory (bytes) of the built-in machines; the Node reports them.
HOST_RESOURCES: dict[str, tuple[int, int]] = {
    "dgx-h100": (224_000, 2048 * GiB),
    "h200": (192_000, 2048 * GiB),
    "p4de.24xlarge": (96_000, 1152 * GiB),
    "gb200": (144_000, 960 * GiB),
}
DEFAULT_HOST = (32_000, 128 * GiB)
NO_GPU_HOST = (8_000, 32 * GiB)
DEFAULT_PODS = 110
UNREACHABLE = "node.kubernetes.io/unreachable"
ARM_PROFILES = frozenset({"gb200"})


def _address(seq: int) -> str:
    """The InternalIP of the ``seq``-th node to join (10.0.0.2, 10.0.0.3, ...): assigned once,
    so a node keeps its address and a deleted node's address is never handed on (IMEX daemons
    list their peers by address)."""
    block = seq // 250
    return f"10.{block // 256}.{block % 256}.{seq % 250 + 2}"


def load_plugins(
    work_dir: Path,
) -> tuple[list[SchedulerPlugin], list[KubeletPlugin], list[Controller], list[str]]:
    """The DRA and ComputeDomain plugins, when their modules exist in this build."""
    sched: list[SchedulerPlugin] = []
    kubelet: list[KubeletPlugin] = []
    ctrls: list[Controller] = []
    notes: list[str] = []

    def make(module: str, attr: str, *args: Any) -> Any:
        try:
            mod = importlib.import_module(f"kgpu.sim.{module}")
        except ModuleNotFoundError as exc:
            if exc.name == f"kgpu.sim.{module}":
                return None
            notes.append(f"plugin module kgpu.sim.{module} failed to import: {exc}")
            return None
        except Exception as exc:  # another part's module is broken: run without it, say so
            notes.append(f"plugin module kgpu.sim.{module} failed to import: {exc}")
            return None
        factory = getattr(mod, attr, None)
        if factory is None:
            return None
        try:
            return factory(*args)
        except Exception as exc:
            notes.append(f"plugin {module}.{attr} failed to start: {exc}")
            return None

    for module, attr, kind, args in (
        ("dra_scheduler", "DraSchedulerPlugin", "sched", ()),
        ("computedomain", "ComputeDomainSchedulerPlugin", "sched", ()),
        ("dra_node", "DraKubeletPlugin", "kubelet", (work_dir / "dra",)),
        ("computedomain", "ComputeDomainKubeletPlugin", "kubelet", (work_dir / "computedomain",)),
        ("computedomain", "ComputeDomainController", "ctrl", ()),
    ):
        plugin = make(module, attr, *args)
        if plugin is None:
            continue
        if kind == "sched":
            sched.append(plugin)
        elif kind == "kubelet":
            kubelet.append(plugin)
        else:
            ctrls.append(plugin)
    return sched, kubelet, ctrls, notes


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
        self.now = 0.0
        self.store = SimStore(clock=self.timestamp)
        self.events: list[Event] = []
        self.nodes: list[SimNode] = []
        self.pods: dict[str, PodRecord] = {}
        self.pods_by_owner: dict[str, dict[str, PodRecord]] = {}
        self.suffixes = Suffixes(scenario.seed)
        self.unsupported: list[str] = []
        self.warnings: list[str] = []
        self.snapshots: list[dict[str, Any]] = []
        self.record_steps = record_steps
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if work_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kgpu-sim-")
            work_dir = Path(self._tmp.name)
        self.work_dir = work_dir
        sched, kubelet, ctrls, notes = load_plugins(work_dir) if plugins else ([], [], [], [])
        self.warnings.extend(notes)
        self.kubelet_plugins: list[KubeletPlugin] = [*kubelet, *extra_kubelet_plugins]
        self.controllers: list[Controller] = [*ctrls, *extra_controllers]
        self.scheduler = Scheduler([*sched, *extra_scheduler_plugins], self.store)
        self.workloads = Workloads(self)
        self._dra = any(p.name == "DynamicResources" for p in self.scheduler.plugins)
        self._node_by_name: dict[str, SimNode] = {}
        self._base_machine: dict[str, Machine | None] = {}
        self._health: dict[str, HealthState] = {}
        self._ips: dict[str, str] = {}  # InternalIP per node name, given when the node joins
        self._ip_seq = itertools.count()
        self._seq = itertools.count()
        self._epoch = 0
        self._pending: dict[str, PodRecord] = {}
        self._to_admit: dict[str, PodRecord] = {}
        self._gangs: dict[str, dict[str, PodRecord]] = {}
        self._timers: list[tuple[float, int, str]] = []
        self._inline_configs: dict[str, str] = {}
        self._configs: ConfigSet = nodeside.load_configs(scenario.configs, {})
        self.warnings.extend(self._configs.warnings)
        self._started = False
        self._steps_done = 0
        self._device_plugin = scenario.device_plugin

    # -- time and events ---------------------------------------------------------------------
    def timestamp(self) -> str:
        seconds = int(self.now)
        h, rem = divmod(seconds, 3600)
        m, s = divmod(rem, 60)
        return f"2025-01-01T{h % 24:02d}:{m:02d}:{s:02d}Z"

    def emit(self, type_: str, reason: str, obj: str, message: str) -> None:
        self.events.append(Event(type_, reason, obj, message))

    def node(self, name: str) -> SimNode:
        return self._node_by_name[name]

    @property
    def configs(self) -> ConfigSet:
        return self._configs

    # -- running -----------------------------------------------------------------------------
    def start(self) -> None:
        """Create the nodes, apply the scenario's manifests, and settle."""
        if self._started:
            return
        self._started = True
        if self.scenario.dra_driver:
            self._install_device_classes()
        for spec in self.scenario.nodes:
            self._add_nodes(spec)
        for manifest in self.scenario.apply:
            self.apply(manifest)
        self.settle()
        self._snapshot("initial state")

    def _install_device_classes(self) -> None:
        """With kgpu's DRA plugin present, the driver is installed: its DeviceClasses exist
        (``gpu.nvidia.com``, ``mig.nvidia.com`` and the ComputeDomain classes), as the Helm
        chart creates them."""
        if not any(p.name == "DynamicResources" for p in self.scheduler.plugins):
            return
        try:
            from kgpu.dra.classes import device_classes
            from kgpu.sim.dra_scheduler import ensure_classes
        except ImportError as exc:
            self.warnings.append(f"DRA DeviceClasses not installed: {exc}")
            return
        with self.store.muted():
            ensure_classes(self.store, device_classes())

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
        if not isinstance(step, Step):
            step = parse_step(
                step,
                nodes=set(self._node_by_name),
                base=self.scenario.base,
                index=self._steps_done,
            )
        action, value = step.action, step.value
        if action == "apply":
            for m in value:
                self.apply(m)
        elif action == "delete":
            for item in value:
                self.delete(item)
        elif action == "label":
            self.label_node(value[0], value[1])
        elif action == "xid":
            self.inject_xid(
                value["node"], value["gpu"], value["xid"], value.get("gi"), value.get("ci")
            )
        elif action == "advance":
            self.advance(float(value))
        elif action == "failNode":
            self.fail_node(value)
        elif action == "recoverNode":
            self.recover_node(value)
        elif action == "deleteNode":
            self.delete_node(value)
        elif action == "addNodes":
            for spec in value:
                self._add_nodes(spec)
        elif action == "scale":
            self.scale(value[0], value[1])
        elif action == "taint":
            self.taint_node(value[0], value[1])
        elif action == "devicePlugin":
            self.set_device_plugin(bool(value))
        elif action in ("cordon", "uncordon"):
            self.cordon(value, action == "cordon")
        self.settle()
        steps = self.scenario.steps
        if self._steps_done < len(steps) and step is steps[self._steps_done]:
            self._steps_done += 1  # run() continues after the scenario steps already taken
        self._snapshot(step.describe())

    def settle(self) -> None:
        """Run controllers, the scheduler and the kubelets until nothing changes (bounded)."""
        for _ in range(MAX_ROUNDS):
            progress = self.workloads.reconcile()
            for ctrl in self.controllers:
                try:
                    self.events.extend(ctrl.reconcile(self.store, self.now))
                except KgpuError as exc:
                    self.emit("Warning", "ReconcileError", f"Controller/{ctrl.name}", str(exc))
            progress |= self._sync_external()
            progress |= self._schedule()
            progress |= self._admit()
            if not progress and not self.store.pending():
                return
        self.warnings.append(f"the cluster did not settle within {MAX_ROUNDS} rounds")

    # -- nodes -------------------------------------------------------------------------------
    def _add_nodes(self, spec: NodeSpec) -> None:
        for name in spec.names():
            machine = (
                nodeside.machine_for(spec.machine, name, spec.clique) if spec.machine else None
            )
            cpu, memory = HOST_RESOURCES.get(spec.machine or "", DEFAULT_HOST)
            if machine is None:
                cpu, memory = NO_GPU_HOST
            node = SimNode(
                name=name,
                machine=machine,
                view=None,
                labels={},
                scenario_labels=dict(spec.labels),
                taints=parse_taints(spec.taints),
                unschedulable=spec.unschedulable,
                device_plugin=self._device_plugin,
                clique=spec.clique,
            )
            node.capacity = {
                "cpu": spec.cpu if spec.cpu is not None else cpu,
                "memory": spec.memory if spec.memory is not None else memory,
                "pods": spec.pods if spec.pods is not None else DEFAULT_PODS,
            }
            self._base_machine[name] = machine
            self._health[name] = HealthState()
            self._ips[name] = _address(next(self._ip_seq))
            self.nodes.append(node)
            self._node_by_name[name] = node
            self._refresh_node(node, register=True)
            self.emit(
                "Normal", "NodeReady", f"Node/{name}", f"Node {name} status is now: NodeReady"
            )

    def _refresh_node(self, node: SimNode, *, register: bool = False) -> None:
        """Recompute what the node advertises (view, labels, capacity) and publish the Node."""
        base = self._base_machine.get(node.name)
        old_machine = node.machine
        if base is not None and node.device_plugin:
            try:
                node.view = nodeside.view_for(
                    base,
                    self._configs,
                    node.scenario_labels,
                    default_config=self.scenario.default_config,
                    mig_strategy=self.scenario.mig_strategy,
                    unhealthy=self._health[node.name].unhealthy,
                )
            except FieldError as exc:  # a bad label or config: the last good view keeps serving
                self.emit("Warning", "InvalidConfig", f"Node/{node.name}", str(exc))
        else:
            node.view = None
        node.machine = node.view.machine if node.view is not None else base
        arch = "arm64" if base is not None and base.profile in ARM_PROFILES else "amd64"
        labels = {
            "kubernetes.io/hostname": node.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": arch,
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": arch,
        }
        if node.view is not None:
            labels.update(node.view.labels)
        labels.update(node.scenario_labels)
        node.labels = labels
        cap = {k: v for k, v in node.capacity.items() if k in ("cpu", "memory", "pods")}
        alloc = dict(cap)
        if node.view is not None:
            for res in node.view.resources:
                cap[res.name] = res.count
                alloc[res.name] = res.healthy_count
            if set(node.servicers) != {r.name for r in node.view.resources}:
                node.servicers = nodeside.servicers_for(node)
            else:
                for servicer in node.servicers.values():
                    servicer.notify()
        else:
            node.servicers = {}
        node.capacity, node.allocatable = cap, alloc
        node.mps = nodeside.mps_daemons(node.view)
        self._write_node(node)
        self.scheduler.upsert_node(node)
        self._epoch += 1
        if register or node.machine != old_machine:
            for plugin in self.kubelet_plugins:
                try:
                    plugin.register_node(node.name, node.machine, self.store)
                except KgpuError as exc:
                    self.emit("Warning", "PluginError", f"Node/{node.name}", str(exc))

    def _write_node(self, node: SimNode) -> None:
        def q(values: Mapping[str, int]) -> dict[str, str]:
            return {k: format_units(k, v) for k, v in sorted(values.items())}

        spec: Obj = {}
        if node.taints:
            spec["taints"] = [
                {"key": t.key, **({"value": t.value} if t.value else {}), "effect": t.effect}
                for t in node.taints
            ]
        if node.unschedulable:
            spec["unschedulable"] = True
        machine = node.machine
        node.obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node.name, "labels": dict(sorted(node.labels.items()))},
            "spec": spec,
            "status": {
                "capacity": q(node.capacity),
                "allocatable": q(node.allocatable),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if node.ready else "Unknown",
                        "reason": "KubeletReady" if node.ready else "NodeStatusUnknown",
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": self._node_ip(node.name)},
                    {"type": "Hostname", "address": node.name},
                ],
                "nodeInfo": {
                    "architecture": node.labels.get("kubernetes.io/arch", "amd64"),
                    "operatingSystem": "linux",
                    "kubeletVersion": "v1.34.0",
                    "containerRuntimeVersion": "containerd://2.0.0",
                    **({"machineID": machine.profile} if machine else {}),
                },
            },
        }
        with self.store.muted():
            out = self.store.apply(node.obj)
        node.obj["metadata"]["resourceVersion"] = out["metadata"]["resourceVersion"]
        if node.info is not None:
            node.info.node = node.obj
            node.info.labels = node.labels

    def _node_ip(self, name: str) -> str:
        return self._ips.get(name, "")

    def label_node(self, name: str, labels: Mapping[str, str | None]) -> None:
        node = self.node(name)
        for k, v in labels.items():
            if v is None:
                node.scenario_labels.pop(k, None)
            else:
                node.scenario_labels[k] = v
        self._refresh_node(node)

    def set_device_plugin(self, running: bool) -> None:
        """Start (or stop) the device plugin on every GPU node, as installing the GPU Operator
        does; nodes added later follow."""
        self._device_plugin = running
        for node in self.nodes:
            node.device_plugin = running
            self._refresh_node(node)

    def taint_node(self, name: str, taints: list[dict[str, str]]) -> None:
        """Replace the node's taints (``kubectl taint``); NoExecute evicts pods that do not
        tolerate it."""
        node = self.node(name)
        node.taints = parse_taints(taints)
        self._refresh_node(node)
        self._evict_intolerant(node, node.taints)

    def _evict_intolerant(self, node: SimNode, taints: Iterable[Taint]) -> None:
        """The taint manager: pods that do not tolerate every NoExecute taint among ``taints``
        are deleted at once (upstream waits their ``tolerationSeconds``)."""
        no_execute = [t for t in taints if t.effect == "NoExecute"]
        for rec in list(node.pods.values()):
            if all(any(tolerates(t, taint) for t in rec.req.tolerations) for taint in no_execute):
                continue
            self.emit(
                "Normal",
                "TaintManagerEviction",
                f"Pod/{rec.key}",
                f"Marking for deletion Pod {rec.key}",
            )
            self.delete_pod(rec.key)

    def cordon(self, name: str, on: bool = True) -> None:
        node = self.node(name)
        node.unschedulable = on
        self._refresh_node(node)

    def inject_xid(
        self, name: str, gpu: int | str, xid: int, gi: int | None = None, ci: int | None = None
    ) -> None:
        """An XID on a GPU: the node health code decides what turns Unhealthy."""
        node = self.node(name)
        base = self._base_machine.get(name)
        if node.machine is None or base is None:
            self.emit("Warning", "XidIgnored", f"Node/{name}", f"XID {xid}: node has no GPU")
            return
        try:
            before = self._health[name]
            after = nodeside.xid_health(before, node.machine, gpu, xid, gi, ci, self.now)
        except KeyError:
            self.emit("Warning", "XidIgnored", f"Node/{name}", f"XID {xid}: no GPU {gpu} on {name}")
            return
        self._health[name] = after
        node.unhealthy = set(after.unhealthy)
        if after is before:
            self.emit(
                "Normal",
                "XidIgnored",
                f"Node/{name}",
                f"XID {xid} on GPU {gpu} is an application error; devices stay Healthy",
            )
            return
        self._refresh_node(node)
        counts = ", ".join(
            f"{r}: {format_units(r, node.allocatable.get(r, 0))}/{node.capacity[r]}"
            for r in node.capacity
            if r not in ("cpu", "memory", "pods")
        )
        self.emit(
            "Warning",
            "GPUUnhealthy",
            f"Node/{name}",
            f"XID {xid} on GPU {gpu}: {', '.join(sorted(after.unhealthy))} Unhealthy; "
            f"allocatable {counts}",
        )

    def fail_node(self, name: str) -> None:
        """The node stops answering: NotReady, tainted unreachable, pods evicted (as the node
        lifecycle controller does; pods without a toleration go at once)."""
        node = self.node(name)
        node.ready = False
        node.taints = (
            *[t for t in node.taints if t.key != UNREACHABLE],
            Taint(UNREACHABLE, "", "NoSchedule"),
            Taint(UNREACHABLE, "", "NoExecute"),
        )
        self._refresh_node(node)
        self.emit(
            "Normal", "NodeNotReady", f"Node/{name}", f"Node {name} status is now: NodeNotReady"
        )
        self._evict_intolerant(node, [Taint(UNREACHABLE, "", "NoExecute")])

    def recover_node(self, name: str) -> None:
        node = self.node(name)
        node.ready = True
        node.taints = tuple(t for t in node.taints if t.key != UNREACHABLE)
        self._refresh_node(node)
        self.emit("Normal", "NodeReady", f"Node/{name}", f"Node {name} status is now: NodeReady")

    def delete_node(self, name: str) -> None:
        node = self._node_by_name.pop(name)
        for rec in list(node.pods.values()):
            self.delete_pod(rec.key)
        for rec in [r for r in self.pods.values() if r.node == name]:
            self.delete_pod(rec.key)
        self.nodes.remove(node)
        self.scheduler.remove_node(name)
        with self.store.muted(), contextlib.suppress(NotFound):
            self.store.delete("v1", "Node", name)
        self._epoch += 1
        self.emit(
            "Normal", "RemovingNode", f"Node/{name}", f"Node {name} event: Removing Node {name}"
        )

    # -- objects -----------------------------------------------------------------------------
    def apply(self, manifest: Manifest | Obj) -> None:
        """``kubectl apply`` for one object."""
        if not isinstance(manifest, Manifest):
            manifest = check(manifest, "", 0)
        obj = manifest.obj
        kind = manifest.kind
        if kind == "Pod":
            key = "/".join(key_of(obj)[2:])
            if key in self.pods:
                return  # a pod's spec is immutable; re-applying the same pod changes nothing
            self.create_pod(obj)
            return
        with self.store.muted():
            stored = self.store.apply(obj)
        if kind == "ConfigMap" and nodeside.is_config_map(obj):
            meta = stored["metadata"]
            self._inline_configs[f"ConfigMap {meta['namespace']}/{meta['name']}"] = yaml.safe_dump(
                obj
            )
            self._reload_configs()
        if not simulated(kind) and not passes_through(kind):
            what = f"{kind} {stored['metadata']['name']} ({obj.get('apiVersion')})"
            self.unsupported.append(what)
            self.emit(
                "Warning",
                "Unsupported",
                f"{kind}/{stored['metadata'].get('namespace', '')}/"
                f"{stored['metadata']['name']}".replace("//", "/"),
                f"{what} is stored but not simulated",
            )

    def delete(self, item: ObjectRef | Manifest) -> None:
        """``kubectl delete`` for one object (cascading through its controllers)."""
        if isinstance(item, Manifest):
            _group, kind, ns, name = key_of(item.obj)
            api = str(item.obj.get("apiVersion"))
        else:
            kind, name, ns, api = item.kind, item.name, item.namespace, item.api_version
            api = api or API_VERSIONS.get(kind, "v1")
        if kind == "Pod":
            if f"{ns}/{name}" in self.pods:
                self.delete_pod(f"{ns}/{name}")
            return
        with self.store.muted():
            try:
                self.store.delete(api, kind, name, None if kind == "Node" else ns)
            except NotFound:
                self.emit(
                    "Warning", "NotFound", f"{kind}/{ns}/{name}", f"{kind} {name!r} not found"
                )
                return
        if kind == "ConfigMap" and f"ConfigMap {ns}/{name}" in self._inline_configs:
            del self._inline_configs[f"ConfigMap {ns}/{name}"]
            self._reload_configs()

    def scale(self, ref: ObjectRef, replicas: int) -> None:
        api = ref.api_version or API_VERSIONS[ref.kind]
        try:
            obj = self.store.get(api, ref.kind, ref.name, ref.namespace)
        except NotFound:
            self.emit(
                "Warning",
                "NotFound",
                f"{ref.kind}/{ref.namespace}/{ref.name}",
                f"{ref.kind} {ref.name!r} not found",
            )
            return
        spec = obj.setdefault("spec", {})
        if ref.kind == "Job":
            spec["parallelism"] = replicas
        elif ref.kind == "MPIJob":
            spec["mpiReplicaSpecs"]["Worker"]["replicas"] = replicas
        else:
            spec["replicas"] = replicas
        with self.store.muted():
            self.store.update(obj)

    def _reload_configs(self) -> None:
        try:
            self._configs = nodeside.load_configs(self.scenario.configs, self._inline_configs)
        except FieldError as exc:
            self.emit("Warning", "InvalidConfig", "ConfigMap", str(exc))
            return
        for node in self.nodes:
            self._refresh_node(node)

    # -- pods --------------------------------------------------------------------------------
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
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "Pod")
        obj.setdefault("status", {"phase": "Pending"})
        with self.store.muted():
            stored = self.store.create(obj)
        return self._track(stored, owner_kind, owner_uid, gang, gang_size, root)

    def _track(
        self, obj: Obj, owner_kind: str, owner_uid: str, gang: str, gang_size: int, root: str
    ) -> PodRecord:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        rec = PodRecord(
            key=key,
            obj=obj,
            req=pod_requirements(obj),
            seq=next(self._seq),
            owner_uid=owner_uid,
            owner_kind=owner_kind,
            gang=gang,
            gang_size=gang_size,
        )
        runtime = self.scenario.runtimes.get(root or meta["name"])
        rec.run_seconds = runtime
        self.pods[key] = rec
        if owner_uid:
            self.pods_by_owner.setdefault(owner_uid, {})[key] = rec
        if gang:
            self._gangs.setdefault(gang, {})[key] = rec
        self._pending[key] = rec
        return rec

    def delete_pod(self, key: str) -> None:
        rec = self.pods.pop(key, None)
        if rec is None:
            return
        if rec.owner_uid:
            self.pods_by_owner.get(rec.owner_uid, {}).pop(key, None)
        if rec.gang:
            self._gangs.get(rec.gang, {}).pop(key, None)
        self._pending.pop(key, None)
        self._to_admit.pop(key, None)
        if rec.node and not rec.finished:
            self._release(rec)
        with self.store.muted(), contextlib.suppress(NotFound):
            self.store.delete("v1", "Pod", rec.name, rec.namespace)

    def _release(self, rec: PodRecord) -> None:
        """The kubelet tears the pod down: devices back to the pool, claims unprepared, its
        requests no longer count on the node."""
        node = self._node_by_name.get(rec.node)
        if node is not None:
            for ids in node.allocations.pop(rec.key, {}).values():
                for i in ids:
                    if node.device_owner.get(i) == rec.key:
                        del node.device_owner[i]
            if rec.admitted:
                for plugin in self.kubelet_plugins:
                    try:
                        plugin.unprepare(rec.obj, node.name, self.store)
                    except KgpuError as exc:
                        self.emit("Warning", "FailedUnprepare", f"Pod/{rec.key}", str(exc))
            if node.pods.pop(rec.key, None) is not None:
                with contextlib.suppress(ValueError):
                    node.pod_objs.remove(rec.obj)
            self.scheduler.release(rec, node)
        else:
            self.scheduler.release(rec, None)
        self._epoch += 1

    def _merge_external(self, rec: PodRecord, stored: Obj) -> None:
        """Keep what others wrote into a pod (labels, annotations, the resourceclaim
        controller's ``status.resourceClaimStatuses``) in the simulator's copy."""
        meta = stored.get("metadata") or {}
        for key in ("labels", "annotations"):
            if meta.get(key) is not None:
                rec.obj["metadata"][key] = meta[key]
        rec.obj["metadata"]["resourceVersion"] = meta.get("resourceVersion")
        claims = (stored.get("status") or {}).get("resourceClaimStatuses")
        if claims is not None:
            rec.obj.setdefault("status", {})["resourceClaimStatuses"] = claims

    def _set_status(self, rec: PodRecord, status: Obj) -> None:
        claims = (rec.obj.get("status") or {}).get("resourceClaimStatuses")
        if claims is not None:
            status["resourceClaimStatuses"] = claims
        rec.obj["status"] = status

    def _write_pod(self, rec: PodRecord) -> None:
        if self.store.touched("Pod", rec.namespace, rec.name):
            with contextlib.suppress(NotFound):
                self._merge_external(rec, self.store.get("v1", "Pod", rec.name, rec.namespace))
        with self.store.muted():
            out = self.store.apply(rec.obj)
        rec.obj["metadata"]["resourceVersion"] = out["metadata"]["resourceVersion"]

    # -- scheduling --------------------------------------------------------------------------
    def _schedule(self) -> bool:
        progress = False
        seen_gangs: set[str] = set()
        for rec in list(self._pending.values()):
            if rec.key not in self._pending or rec.failed_epoch == self._epoch:
                continue
            if rec.req.node_name:
                progress |= self._bind_direct(rec)
                continue
            if rec.gang:
                if rec.gang in seen_gangs:
                    continue
                seen_gangs.add(rec.gang)
                progress |= self._schedule_gang(rec.gang)
                continue
            if not self._dra and rec.obj["spec"].get("resourceClaims"):
                self._unschedulable(
                    rec,
                    f"0/{len(self.nodes)} nodes are available: pod uses resource claims but "
                    "no DRA scheduler plugin is loaded.",
                )
                continue
            placement = self.scheduler.find_node(rec)
            node = placement.node
            if node is not None:
                try:
                    self.scheduler.reserve(rec, node)
                except KgpuError as exc:
                    self._unschedulable(rec, f"0/{len(self.nodes)} nodes are available: 1 {exc}.")
                    continue
                self._bind(rec, node)
                progress = True
            else:
                self._unschedulable(rec, placement.message)
        return progress

    def _schedule_gang(self, gang: str) -> bool:
        members = self._gangs.get(gang, {})
        waiting = [r for r in members.values() if r.key in self._pending]
        bound = sum(1 for r in members.values() if r.node)
        size = max((r.gang_size for r in members.values()), default=0)
        if len(waiting) + bound < size:
            return False  # the controller has not created every member yet
        placed, failed, message = self.scheduler.place_gang(waiting)
        if failed is not None:
            for rec in waiting:
                self._unschedulable(rec, message)
            return False
        for rec, node in placed:
            self._bind(rec, node)
        return True

    def _bind_direct(self, rec: PodRecord) -> bool:
        """A pod with ``spec.nodeName``: no scheduler; the kubelet admits or rejects it."""
        node = self._node_by_name.get(rec.req.node_name)
        if node is None:
            rec.failed_epoch = self._epoch
            return False
        short = [r for r, a in rec.req.requests if a > node.free(r)]
        if short:
            r = short[0]
            rec.phase = "Failed"
            self._pending.pop(rec.key, None)
            status = rec.obj.setdefault("status", {})
            status.update(
                phase="Failed",
                reason=f"OutOf{r}",
                message=f"Pod was rejected: Node didn't have enough resource: {r}",
            )
            self._write_pod(rec)
            self.emit(
                "Warning", f"OutOf{r}", f"Pod/{rec.key}", f"Node didn't have enough resource: {r}"
            )
            return True
        self.scheduler.assume(rec, node)
        self._bind(rec, node, scheduled=False)
        return True

    def _unschedulable(self, rec: PodRecord, message: str) -> None:
        rec.failed_epoch = self._epoch
        if message == rec.last_message:
            return
        rec.last_message = message
        self.emit("Warning", "FailedScheduling", f"Pod/{rec.key}", message)
        self._set_status(
            rec,
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                    }
                ],
            },
        )
        self._write_pod(rec)

    def _bind(self, rec: PodRecord, node: SimNode, scheduled: bool = True) -> None:
        self._pending.pop(rec.key, None)
        rec.node = node.name
        rec.last_message = ""
        rec.obj["spec"]["nodeName"] = node.name
        node.pods[rec.key] = rec
        node.pod_objs.append(rec.obj)
        if scheduled:
            self.emit(
                "Normal",
                "Scheduled",
                f"Pod/{rec.key}",
                f"Successfully assigned {rec.key} to {node.name}",
            )
        self._to_admit[rec.key] = rec

    # -- kubelets ----------------------------------------------------------------------------
    def _admit(self) -> bool:
        progress = False
        for rec in list(self._to_admit.values()):
            if rec.failed_epoch == self._epoch and rec.last_message:
                continue
            node = self._node_by_name.get(rec.node)
            if node is None:
                continue
            progress |= self._start_pod(rec, node)
        return progress

    def _start_pod(self, rec: PodRecord, node: SimNode) -> bool:
        granted: dict[str, list[str]] = {}
        envs: dict[str, dict[str, str]] = {}
        owned: list[str] = []
        try:
            for cname, ext in rec.req.containers:
                ids: list[str] = []
                env: dict[str, str] = {}
                for resource, size in ext:
                    if resource not in node.capacity:
                        continue
                    grant = nodeside.allocate_devices(node, resource, size)
                    for i in grant.ids:
                        node.device_owner[i] = rec.key
                        owned.append(i)
                    ids.extend(grant.ids)
                    env.update(grant.envs)
                if ids:
                    granted[cname] = ids
                envs[cname] = env
        except (nodeside.AdmissionError, KgpuError) as exc:
            for i in owned:
                node.device_owner.pop(i, None)
            self._to_admit.pop(rec.key, None)
            rec.phase = "Failed"
            rec.failed_at = self.now
            self._set_status(
                rec,
                {
                    "phase": "Failed",
                    "reason": "UnexpectedAdmissionError",
                    "message": f"Allocate failed due to {exc}, which is unexpected",
                },
            )
            self._write_pod(rec)
            self.emit("Warning", "UnexpectedAdmissionError", f"Pod/{rec.key}", str(exc))
            self._release(rec)
            return True
        node.allocations[rec.key] = {
            c: [i for i in ids if i in node.device_owner] for c, ids in granted.items()
        }
        for plugin in self.kubelet_plugins:
            try:
                extra = plugin.prepare(rec.obj, node.name, self.store)
            except KgpuError as exc:
                for i in owned:
                    node.device_owner.pop(i, None)
                node.allocations.pop(rec.key, None)
                message = f"Failed to prepare dynamic resources: {exc}"
                rec.failed_epoch = self._epoch
                if message != rec.last_message:
                    rec.last_message = message
                    self.emit("Warning", "FailedPrepareDynamicResources", f"Pod/{rec.key}", message)
                return False
            for cname, cd in extra.items():
                granted.setdefault(cname, []).extend(cd.devices)
                envs.setdefault(cname, {}).update(cd.env)
        self._to_admit.pop(rec.key, None)
        rec.devices, rec.env = granted, envs
        rec.admitted = True
        rec.phase = "Running"
        rec.last_message = ""
        rec.started_at = self.now
        self._set_status(
            rec,
            {
                "phase": "Running",
                "hostIP": self._node_ip(node.name),
                "startTime": self.timestamp(),
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
            },
        )
        self._write_pod(rec)
        if rec.run_seconds is not None:
            heapq.heappush(self._timers, (self.now + rec.run_seconds, rec.seq, rec.key))
        return True

    def advance(self, seconds: float) -> None:
        """Move the clock; pods whose runtime ends on the way succeed, in time order, and the
        cluster settles after each."""
        target = self.now + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, key = heapq.heappop(self._timers)
            self.now = max(self.now, when)
            rec = self.pods.get(key)
            if rec is None or rec.phase != "Running":
                continue
            self._finish(rec)
            while self._timers and self._timers[0][0] <= self.now:
                _, _, other = heapq.heappop(self._timers)
                o = self.pods.get(other)
                if o is not None and o.phase == "Running":
                    self._finish(o)
            self.settle()
        self.now = target

    def _finish(self, rec: PodRecord) -> None:
        self._release(rec)
        rec.phase = "Succeeded"
        self._set_status(
            rec,
            {
                "phase": "Succeeded",
                "hostIP": self._node_ip(rec.node),
                "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted"}],
            },
        )
        self._write_pod(rec)

    # -- what others wrote -------------------------------------------------------------------
    def _sync_external(self) -> bool:
        changes = self.store.drain()
        if not changes:
            return False
        self._epoch += 1
        for _ns, name in sorted(changes.get("Node", ())):
            node = self._node_by_name.get(name)
            if node is None:
                continue
            try:
                obj = self.store.get("v1", "Node", name)
            except NotFound:
                continue
            labels = (obj.get("metadata") or {}).get("labels") or {}
            for k in set(node.labels) | set(labels):
                if node.labels.get(k) != labels.get(k):
                    if k in labels:
                        node.scenario_labels[k] = labels[k]
                    else:
                        node.scenario_labels.pop(k, None)
            spec = obj.get("spec") or {}
            node.taints = parse_taints(spec.get("taints"))
            node.unschedulable = bool(spec.get("unschedulable"))
            self._refresh_node(node)
        for ns, name in sorted(changes.get("Pod", ())):
            key = f"{ns}/{name}"
            try:
                obj = self.store.get("v1", "Pod", name, ns)
            except NotFound:
                if key in self.pods:
                    self.delete_pod(key)
                continue
            if key in self.pods:
                self._merge_external(self.pods[key], obj)
                continue
            problems = validate_pod_spec(obj.get("spec"), "spec")
            if problems:
                self.emit(
                    "Warning", "InvalidPod", f"Pod/{key}", "; ".join(str(p) for p in problems)
                )
                continue
            owner: dict[str, Any] = next(
                (o for o in (obj["metadata"].get("ownerReferences") or []) if o.get("controller")),
                {},
            )
            self._track(obj, str(owner.get("kind", "")), str(owner.get("uid", "")), "", 0, "")
        return True

    # -- output ------------------------------------------------------------------------------
    def _snapshot(self, title: str) -> None:
        if not self.record_steps:
            return
        from kgpu.sim.report import step_snapshot

        self.snapshots.append(step_snapshot(self, title))

    def report(self) -> dict[str, Any]:
        from kgpu.sim.report import build_report

        return build_report(self)

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
