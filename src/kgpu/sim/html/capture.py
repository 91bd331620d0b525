"""The cluster after each step, as JSON-shaped frames the page draws.

``kgpu sim -o json`` says what each node advertises and which device ids each pod holds, but
not where a device sits on its GPU; the map needs that, so a frame reads the simulation's public
surface (``nodes`` with their ``machine``, ``view`` and ``allocations``, ``pods``, ``store``,
``events``, ``now``) once per step, while the simulation runs the scenario exactly as
:meth:`Simulation.run` does. Nothing here changes the cluster.

The picture document (what :func:`kgpu.sim.html.page.render_page` takes)::

    {"kind": "sim" | "plan", "title": str, "description": str,
     "frames": [frame, ...],        # the state after the start and after each step
     "timeline": [point, ...]}      # the whole cluster at each moment advance settled
                                    # between steps (Recorder.sample), may be []

A frame::

    {"title": str, "time": seconds, "phases": {"Running": n, ...},
     "events": [{"type", "reason", "object", "message"}], "eventCount": n,  # new this step
     "groups": [{"name", "machine", "nodes", "ready", "gpus", "inUse", "unhealthy", "shown"}],
     "nodes": [node, ...],          # the nodes drawn (at most max_nodes, per group quota)
     "pending": [{"pod", "workload", "message"}],   # the first PENDING_SHOWN
     "workloads": {"ns/pod": "Deployment ns/name"}, # of every pod a drawn slot holds
     "warnings": [str],             # the simulation's warnings so far
     "stats": point}                # the whole cluster, for the plots

A node: ``{"name", "group", "clique", "machine", "ready", "unschedulable", "config",
"migConfig", "pods", "gpus": [cell, ...] (see :mod:`kgpu.sim.html.gpus`), "channels":
[{"domain", "device", "pod"}]}``.

A series point (:data:`POINT_KEYS`): ``{"time", "title", "running": {workload: n},
"pending": {workload: n}, "desired": {workload: n}, "nodes": {group: Ready nodes},
"pendingPods": n, "gpus": n, "gpusHealthy": n, "gpusInUse": n, "gpuUtilization": percent or
None, "seq": the order points were taken in}``. Any key but ``time`` may be missing from a
point. Every value is the simulation's own at that moment: ``gpuUtilization`` is the mean
``DCGM_FI_DEV_GPU_UTIL`` ``--serve-metrics`` would serve then (traffic included).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kgpu.hardware.model import Machine
from kgpu.metrics.simulated import SimulatedTelemetry, workloads_from_allocations
from kgpu.sim.html.gpus import device_index, gpu_cells, gpus_in_use, holders_by_device
from kgpu.sim.metrics import live_allocations
from kgpu.sim.state import PodRecord, SimNode
from kgpu.sim.steps.nodes import AddNodesStep
from kgpu.store import NotFound

if TYPE_CHECKING:
    from kgpu.sim.simulation import Simulation

Obj = dict[str, Any]

#: Nodes drawn per frame at most; the rest are counted in their group's summary. 1,000 dgx-h100
#: nodes (8,000 GPU cells) render in well under a second; 12,500 would not.
DEFAULT_MAX_NODES = 1000
#: Events and Pending pods listed per step (the counts are always whole).
EVENTS_SHOWN = 30
PENDING_SHOWN = 20
#: Series points kept between steps at most (then thinned; see :meth:`Recorder.sample`).
MAX_TIMELINE = 2000

GPU_DRIVER = "gpu.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
RESOURCE_API = "resource.k8s.io/v1"
CD_API = "resource.nvidia.com/v1beta1"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
#: Distinct GPU-load patterns remembered at most (then forgotten at once: a bounded memo).
UTILIZATION_KINDS = 4096
#: Workload kinds whose ``spec.replicas`` is the desired count an HPA or KEDA changes.
SCALED_KINDS = (("apps/v1", "Deployment"), ("apps/v1", "StatefulSet"))
_OWNED = {"ReplicaSet": "apps/v1", "Job": "batch/v1"}


def node_groups(sim: Simulation) -> dict[str, str]:
    """Node name -> the scenario's node group (``nodes`` entries and ``addNodes`` steps)."""
    out: dict[str, str] = {}
    specs = list(sim.scenario.nodes)
    for step in sim.scenario.steps:
        if isinstance(step, AddNodesStep):
            specs.extend(step.specs)
    for spec in specs:
        for name in spec.names():
            out.setdefault(name, spec.name)
    return out


def _fallback_group(name: str) -> str:
    """A node no scenario entry names (added by a controller): its name without ``-<n>``."""
    return re.sub(r"-\d+$", "", name) or name


def _controller(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return next((r for r in refs if r.get("controller")), None)


class Recorder:
    """Captures one frame per step of one simulation (see the module docstring)."""

    def __init__(self, sim: Simulation, *, max_nodes: int = DEFAULT_MAX_NODES) -> None:
        self.sim = sim
        self.max_nodes = max(1, max_nodes)
        self.frames: list[Obj] = []
        self._events_seen = 0
        self._groups = node_groups(sim)
        self._roots: dict[tuple[str, str, str], str] = {}
        self._utilization_seen: dict[tuple[Any, ...], list[float]] = {}
        self.timeline: list[Obj] = []  # series points between steps (see :meth:`sample`)
        self._gap = 0.0  # seconds between timeline points at least
        self._seq = itertools.count()  # the order points were taken in (plots sort by it)

    # -- workloads ---------------------------------------------------------------------------
    def workload_of(self, rec: PodRecord) -> str:
        """``Kind ns/name`` of the object at the top of the pod's controller chain
        (Pod -> ReplicaSet -> Deployment), or ``Pod ns/name`` for a bare pod."""
        owner = _controller(rec.obj)
        if owner is None:
            return f"Pod {rec.key}"
        return self._root(str(owner.get("kind", "")), str(owner.get("name", "")), rec.namespace)

    def _root(self, kind: str, name: str, namespace: str) -> str:
        key = (kind, name, namespace)
        found = self._roots.get(key)
        if found is None:
            found = f"{kind} {namespace}/{name}"
            api = _OWNED.get(kind)
            if api is not None:
                try:
                    obj = self.sim.store.get(api, kind, name, namespace)
                except NotFound:
                    obj = {}
                owner = _controller(obj)
                if owner is not None:
                    found = self._root(str(owner.get("kind")), str(owner.get("name")), namespace)
            self._roots[key] = found
        return found

    # -- one frame ---------------------------------------------------------------------------
    def capture(self, title: str) -> Obj:
        sim = self.sim
        events = sim.events[self._events_seen :]
        self._events_seen = len(sim.events)
        shown_events = [e for e in events if e.reason not in ("Scheduled", "NodeReady")]
        pods = sorted(sim.pods.values(), key=lambda r: r.seq)
        finished = {r.key for r in pods if r.finished}
        workload = {r.key: self.workload_of(r) for r in pods}
        dra, channels = self._claims()
        by_group: dict[str, list[SimNode]] = {}
        for node in sim.nodes:
            group = self._groups.get(node.name) or _fallback_group(node.name)
            by_group.setdefault(group, []).append(node)
        drawn = choose_nodes(by_group, self.max_nodes)
        nodes_out: list[Obj] = []
        groups_out: list[Obj] = []
        gpus_total = gpus_healthy = gpus_busy = 0
        util: list[float] = []
        for group, members in by_group.items():
            g_gpus = g_busy = g_bad = 0
            for node in members:
                machine = node.view.machine if node.view is not None else node.machine
                allocations = live_allocations(node, finished)
                if node.name in drawn:
                    state = self._node(node, group, machine, allocations, dra, channels)
                    nodes_out.append(state)
                    busy = gpus_in_use(state["gpus"])
                else:
                    busy = _busy_gpus(node, machine, allocations, dra.get(node.name, []))
                n_gpus = len(machine.gpus) if machine is not None else 0
                bad = sum(1 for g in machine.gpus if g.uuid in node.unhealthy) if machine else 0
                g_gpus, g_busy, g_bad = g_gpus + n_gpus, g_busy + busy, g_bad + bad
                if machine is not None and node.ready and node.view is not None:
                    util.extend(self._utilization(node, machine, node.view, allocations))
            gpus_total, gpus_busy = gpus_total + g_gpus, gpus_busy + g_busy
            gpus_healthy += g_gpus - g_bad
            first = members[0]
            groups_out.append(
                {
                    "name": group,
                    "machine": first.machine.profile if first.machine else None,
                    "nodes": len(members),
                    "ready": sum(1 for n in members if n.ready),
                    "gpus": g_gpus,
                    "inUse": g_busy,
                    "unhealthy": g_bad,
                    "shown": sum(1 for n in members if n.name in drawn),
                }
            )
        running: Counter[str] = Counter()
        pending: Counter[str] = Counter()
        for r in pods:
            if r.phase == "Running":
                running[workload[r.key]] += 1
            elif r.phase == "Pending":
                pending[workload[r.key]] += 1
        held = {
            s for n in nodes_out for c in n["gpus"] for d in c["devices"] for s in d["slots"] if s
        }
        held |= {c["pod"] for n in nodes_out for c in n["channels"] if c.get("pod")}
        waiting = [r for r in pods if r.phase == "Pending"]
        frame: Obj = {
            "title": title,
            "time": sim.now,
            "phases": dict(sorted(Counter(r.phase for r in pods).items())),
            "events": [
                {"type": e.type, "reason": e.reason, "object": e.object, "message": e.message}
                for e in shown_events[:EVENTS_SHOWN]
            ],
            "eventCount": len(shown_events),
            "groups": groups_out,
            "nodes": nodes_out,
            "pending": [
                {"pod": r.key, "workload": workload[r.key], "message": r.last_message}
                for r in waiting[:PENDING_SHOWN]
            ],
            "workloads": {k: workload[k] for k in sorted(held) if k in workload},
            "warnings": list(sim.warnings),
            "stats": {
                "time": sim.now,
                "title": title,
                "running": dict(sorted(running.items())),
                "pending": dict(sorted(pending.items())),
                "desired": self._desired(),
                "nodes": {g["name"]: g["ready"] for g in groups_out},
                "pendingPods": len(waiting),
                "gpus": gpus_total,
                "gpusHealthy": gpus_healthy,
                "gpusInUse": gpus_busy,
                "gpuUtilization": round(sum(util) / len(util), 2) if util else None,
                "seq": next(self._seq),
            },
        }
        self.frames.append(frame)
        return frame

    def _node(
        self,
        node: SimNode,
        group: str,
        machine: Machine | None,
        allocations: Mapping[str, Mapping[str, Sequence[str]]],
        dra: Mapping[str, list[Obj]],
        channels: Mapping[str, list[Obj]],
    ) -> Obj:
        cells = []
        if machine is not None:
            cells = gpu_cells(
                machine,
                node.view,
                holders_by_device(allocations),
                node.unhealthy,
                dra.get(node.name, []),
                node.xids,
            )
        return {
            "name": node.name,
            "group": group,
            "clique": node.labels.get(CLIQUE_LABEL, ""),
            "machine": node.machine.profile if node.machine else None,
            "ready": node.ready,
            "unschedulable": node.unschedulable,
            "config": node.view.config_name if node.view else None,
            "migConfig": node.view.mig_config_name if node.view else None,
            "pods": sum(1 for r in node.pods.values() if not r.finished),
            "gpus": cells,
            "channels": channels.get(node.name, []),
        }

    def _claims(self) -> tuple[dict[str, list[Obj]], dict[str, list[Obj]]]:
        """Per node: the GPU devices DRA claims hold there, and the ComputeDomain channels and
        daemons."""
        claims = [
            c
            for c in self.sim.store.list(RESOURCE_API, "ResourceClaim")
            if ((c.get("status") or {}).get("allocation") or {}).get("devices")
        ]
        if not claims:
            return {}, {}
        domains = {
            (d.get("metadata") or {}).get("uid"): (
                f"{d['metadata'].get('namespace', 'default')}/{d['metadata'].get('name')}"
            )
            for d in self.sim.store.list(CD_API, "ComputeDomain")
        }
        slices = self.sim.store.list(RESOURCE_API, "ResourceSlice")
        return resolve_claims(claims, slices, domains)

    def _desired(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for api, kind in SCALED_KINDS:
            for obj in self.sim.store.list(api, kind):
                meta = obj.get("metadata") or {}
                replicas = (obj.get("spec") or {}).get("replicas", 1)
                if isinstance(replicas, int):
                    out[f"{kind} {meta.get('namespace', 'default')}/{meta.get('name')}"] = replicas
        return dict(sorted(out.items()))

    def _utilization(
        self,
        node: SimNode,
        machine: Machine,
        view: Any,
        allocations: Mapping[str, Mapping[str, Sequence[str]]],
    ) -> list[float]:
        """``DCGM_FI_DEV_GPU_UTIL`` of each GPU that reports it (not MIG-enabled ones), as the
        simulated exporter (``--serve-metrics``) derives it from the pods on the node and the
        load ``traffic`` steps put on them.

        A GPU's utilisation follows from the SM demands of the containers on it, its product
        and the clock alone (:mod:`kgpu.metrics.simulated`), so nodes whose GPUs carry the same
        demands at the same moment read the same values: one telemetry read serves them all
        (a 1,000-node cluster has a handful of such kinds, not a thousand)."""
        whole = [g for g in machine.gpus if not g.mig_enabled]
        if not allocations:
            return [0.0] * len(whole)
        objs = {key: rec.obj for key, rec in node.pods.items()}
        # the load traffic steps put on the pods, as --serve-metrics and KEDA see it
        workloads = workloads_from_allocations(view, allocations, objs, self.sim.gpu_loads())
        demands: dict[str, list[tuple[float, int]]] = {}
        for w in workloads:
            demands.setdefault(w.device_uuid, []).append(
                (w.sm_percent, -1 if w.sm_limit_percent is None else w.sm_limit_percent)
            )
        kind = (
            float(self.sim.now),
            tuple((g.product_name, tuple(sorted(demands.get(g.uuid, ())))) for g in whole),
        )
        found = self._utilization_seen.get(kind)
        if found is None:
            source = SimulatedTelemetry(clock=lambda: float(self.sim.now), workloads=workloads)
            values = source.read(machine).values
            found = [float(values.get(g.uuid, {}).get(GPU_UTIL, 0.0)) for g in whole]
            if len(self._utilization_seen) > UTILIZATION_KINDS:
                self._utilization_seen.clear()
            self._utilization_seen[kind] = found
        return found

    # -- between steps -----------------------------------------------------------------------
    def sample(self) -> None:
        """A series point of the whole cluster now, while ``advance`` moves the clock (called
        after each moment it settles): the plots then show a change when it happened (a
        scale-down at 15:15, a node leaving at 25:20, a pod Pending for 10 s), not at the end
        of the step. One point per instant (the latest state); past :data:`MAX_TIMELINE`
        points, every other one is dropped and the spacing doubled, so a long run stays
        bounded."""
        now = float(self.sim.now)
        if self.timeline and now - self.timeline[-1]["time"] < self._gap:
            if now != self.timeline[-1]["time"]:
                return
            self.timeline.pop()  # the same instant: keep its latest state
        self.timeline.append(self.point(""))
        self.timeline[-1]["seq"] = next(self._seq)
        if len(self.timeline) > MAX_TIMELINE:
            self.timeline = self.timeline[::2]
            self._gap = max(self._gap * 2, 1.0)

    def point(self, title: str) -> Obj:
        """The series point (:data:`POINT_KEYS`) of the whole cluster now, as a frame's
        ``stats`` counts it, without drawing any node."""
        sim = self.sim
        pods = list(sim.pods.values())
        finished = {r.key for r in pods if r.finished}
        dra, _channels = self._claims()
        nodes: Counter[str] = Counter()
        gpus_total = gpus_healthy = gpus_busy = 0
        util: list[float] = []
        for node in sim.nodes:
            group = self._groups.get(node.name) or _fallback_group(node.name)
            nodes[group] += 1 if node.ready else 0
            machine = node.view.machine if node.view is not None else node.machine
            allocations = live_allocations(node, finished)
            gpus_busy += _busy_gpus(node, machine, allocations, dra.get(node.name, []))
            if machine is None:
                continue
            gpus_total += len(machine.gpus)
            gpus_healthy += sum(1 for g in machine.gpus if g.uuid not in node.unhealthy)
            if node.ready and node.view is not None:
                util.extend(self._utilization(node, machine, node.view, allocations))
        running: Counter[str] = Counter()
        pending: Counter[str] = Counter()
        for r in pods:
            if r.phase == "Running":
                running[self.workload_of(r)] += 1
            elif r.phase == "Pending":
                pending[self.workload_of(r)] += 1
        return {
            "time": sim.now,
            "title": title,
            "running": dict(sorted(running.items())),
            "pending": dict(sorted(pending.items())),
            "desired": self._desired(),
            "nodes": dict(nodes),
            "pendingPods": sum(pending.values()),
            "gpus": gpus_total,
            "gpusHealthy": gpus_healthy,
            "gpusInUse": gpus_busy,
            "gpuUtilization": round(sum(util) / len(util), 2) if util else None,
        }

    # -- the document ------------------------------------------------------------------------
    def picture(self) -> Obj:
        return {
            "kind": "sim",
            "title": self.sim.scenario.name,
            "description": self.sim.scenario.description,
            "maxNodes": self.max_nodes,
            "frames": self.frames,
            "timeline": self.timeline,
        }


def _busy_gpus(
    node: SimNode,
    machine: Machine | None,
    allocations: Mapping[str, Mapping[str, Sequence[str]]],
    dra: Sequence[Obj],
) -> int:
    """GPUs of a node not drawn that some pod uses (the group summary's count)."""
    if machine is None:
        return 0
    parent = {m.uuid: g.uuid for g in machine.gpus for m in g.mig_devices}
    parent.update({g.uuid: g.uuid for g in machine.gpus})
    index = device_index(node.view)
    busy: set[str] = set()
    for containers in allocations.values():
        for ids in containers.values():
            for device_id in ids:
                dev = index.get(device_id)
                uuid = dev.gpu_uuid if dev is not None else parent.get(device_id)
                if uuid:
                    busy.add(uuid)
    for use in dra:
        if use.get("uuid") in parent:
            busy.add(parent[use["uuid"]])
        elif use.get("parentUUID") is not None:
            busy.add(str(use["parentUUID"]))
    return len(busy)


def choose_nodes(by_group: Mapping[str, Sequence[SimNode]], limit: int) -> set[str]:
    """The names of the nodes to draw: all when they fit, else a quota per group in proportion
    to its size (at least one each), filled first with the nodes worth a look (NotReady,
    cordoned, an unhealthy GPU), then in order."""
    total = sum(len(m) for m in by_group.values())
    if total <= limit:
        return {n.name for m in by_group.values() for n in m}
    quota = {g: max(1, limit * len(m) // total) for g, m in by_group.items()}
    spare = limit - sum(quota.values())
    for g in sorted(by_group, key=lambda g: -len(by_group[g])):
        if spare <= 0:
            break
        extra = min(spare, len(by_group[g]) - quota[g])
        quota[g] += extra
        spare -= extra
    chosen: set[str] = set()
    for g, members in by_group.items():
        notable = [n for n in members if not n.ready or n.unschedulable or n.unhealthy]
        rest = [n for n in members if n.ready and not n.unschedulable and not n.unhealthy]
        chosen.update(n.name for n in [*notable, *rest][: quota[g]])
    return chosen


def _device_attrs(dev: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in (dev.get("attributes") or {}).items():
        if isinstance(value, Mapping) and value:
            out[key] = next(iter(value.values()))
    return out


def _domain_id(claim: Mapping[str, Any]) -> str:
    status = (claim.get("status") or {}).get("allocation") or {}
    configs = [
        *((status.get("devices") or {}).get("config") or ()),
        *(((claim.get("spec") or {}).get("devices") or {}).get("config") or ()),
    ]
    for entry in configs:
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") == CD_DRIVER:
            found = (opaque.get("parameters") or {}).get("domainID")
            if found:
                return str(found)
    return ""


def memory_slices(device: Mapping[str, Any]) -> list[int]:
    """The memory slices a MIG device covers: its ``memorySlice<N>`` capacities (a device that
    exists) or the ``memory-slice-<N>`` counters it consumes (a placement made on demand)."""
    found = {
        int(k.removeprefix("memorySlice"))
        for k in (device.get("capacity") or {})
        if k.startswith("memorySlice") and k[len("memorySlice") :].isdigit()
    }
    for use in device.get("consumesCounters") or ():
        for k in use.get("counters") or {}:
            if k.startswith("memory-slice-") and k[len("memory-slice-") :].isdigit():
                found.add(int(k.removeprefix("memory-slice-")))
    return sorted(found)


def resolve_claims(
    claims: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    domains: Mapping[Any, str],
) -> tuple[dict[str, list[Obj]], dict[str, list[Obj]]]:
    """Allocated claims -> (per node: GPU devices held through DRA, per node: ComputeDomain
    channels and daemons). A GPU device is named by its slice's ``uuid`` attribute, or, for a
    MIG device made on demand, by ``parentUUID``, ``profile`` and the memory slices it
    consumes."""
    devices: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        driver, pool = spec.get("driver"), (spec.get("pool") or {}).get("name")
        for dev in spec.get("devices") or ():
            devices[(str(driver), str(pool), str(dev.get("name")))] = dev
    gpus: dict[str, list[Obj]] = {}
    channels: dict[str, list[Obj]] = {}
    for claim in claims:
        meta = claim.get("metadata") or {}
        namespace = meta.get("namespace", "default")
        name = f"{namespace}/{meta.get('name')}"
        users = (claim.get("status") or {}).get("reservedFor") or ()
        pod = next((f"{namespace}/{u['name']}" for u in users if u.get("resource") == "pods"), None)
        results = ((claim["status"]["allocation"]).get("devices") or {}).get("results") or ()
        for result in results:
            driver, pool, device = (str(result.get(k)) for k in ("driver", "pool", "device"))
            if driver == CD_DRIVER:
                channels.setdefault(pool, []).append(
                    {
                        "domain": domains.get(_domain_id(claim), ""),
                        "device": device,
                        "pod": pod,
                        "claim": name,
                    }
                )
                continue
            if driver != GPU_DRIVER:
                continue
            dev = devices.get((driver, pool, device))
            if dev is None:
                continue
            attrs = _device_attrs(dev)
            if attrs.get("uuid"):
                use: Obj = {"claim": name, "pod": pod, "uuid": attrs["uuid"]}
                if result.get("shareID"):  # a share of a GPU several claims hold
                    memory = ((dev.get("capacity") or {}).get("memory") or {}).get("value")
                    use["share"] = dict(result.get("consumedCapacity") or {})
                    use["capacity"] = memory
            else:
                taken = memory_slices(dev)
                if not taken or "parentUUID" not in attrs:
                    continue
                use = {
                    "claim": name,
                    "pod": pod,
                    "parentUUID": str(attrs["parentUUID"]),
                    "profile": attrs.get("profile"),
                    "start": taken[0],
                    "size": len(taken),
                }
            gpus.setdefault(pool, []).append(use)
    return gpus, channels


def record_run(sim: Simulation, *, max_nodes: int = DEFAULT_MAX_NODES) -> Obj:
    """Run the scenario as :meth:`Simulation.run` does (start, then every step), capturing a
    frame after the start and after each step; return the picture document."""
    recorder = Recorder(sim, max_nodes=max_nodes)
    sim.context.moment_observers.append(recorder.sample)
    sim.start()
    recorder.capture("initial state")
    for step in sim.scenario.steps:
        sim.step(step)
        recorder.capture(step.describe())
    return recorder.picture()
