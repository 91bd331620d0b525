"""``kgpu explain pod NS/NAME``: why a pod is Pending, and the smallest changes that let it run.

The cluster (a scenario, or one imported with ``--from-cluster``) is simulated as ``kgpu sim``
would; then, for the pod:

- **the verdict per node**, in kube-scheduler's words: every filter in its order on that node
  (:meth:`kgpu.sim.scheduler.Scheduler.node_verdict`), the same reasons its ``FailedScheduling``
  message counts;
- **the DRA allocator's reasons per claim**: for a pod with ResourceClaims, the structured
  allocator on each node with the claims it could not place (:mod:`kgpu.dra.diagnose`: how many
  devices each request wants, match, are free, untainted, usable);
- **what each node advertises**: its ``nvidia.com/*`` allocatable and what is in use, the
  device-plugin config and MIG layout it runs, its GPU product;
- **changes that let it run**, each proven by running the simulation again with the change as
  steps on top, and kept only when the pod then runs and every pod that ran still runs on the
  same node. Three kinds, smallest first: (1) another device-plugin config entry the cluster
  already has, on one node (``nvidia.com/device-plugin.config``), or a MIG layout
  (``nvidia.com/mig.config``) giving the MIG device the pod asks for; (2) more time-slicing
  replicas on one node (a new config entry); (3) one more node like an existing one (what
  cluster-autoscaler would add for its group), or of the machine whose GPU product the pod's
  nodeSelector names. At most :data:`MAX_TRIES` re-runs are made.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from kgpu.errors import KgpuError
from kgpu.sim.expect.schema import Expectations
from kgpu.sim.scenario import Scenario, parse_step
from kgpu.sim.simulation import Simulation
from kgpu.sim.state import SimNode
from kgpu.store import NotFound

Obj = dict[str, Any]

#: How many times the simulation is run again to check suggestions.
MAX_TRIES = 10
#: How many verified suggestions are given.
MAX_SUGGESTIONS = 3
PLUGIN_LABEL = "nvidia.com/device-plugin.config"
MIG_LABEL = "nvidia.com/mig.config"
PRODUCT_LABEL = "nvidia.com/gpu.product"
#: Where the time-slicing config a suggestion adds lives.
SUGGESTED_CONFIGMAP = ("kube-system", "kgpu-explain-time-slicing")


@dataclass
class Suggestion:
    change: str  # in words
    steps: list[Obj]  # scenario steps that make it (what was simulated)
    result: str  # what the re-run showed


@dataclass
class Explanation:
    pod: str
    phase: str
    node: str
    message: str = ""
    nodes: list[Obj] = field(default_factory=list)
    claims: list[Obj] = field(default_factory=list)
    suggestions: list[Suggestion] = field(default_factory=list)
    tried: int = 0

    def to_json(self) -> Obj:
        return {
            "pod": self.pod,
            "phase": self.phase,
            "nodeName": self.node or None,
            "message": self.message,
            "nodes": self.nodes,
            "claims": self.claims,
            "suggestions": [dataclasses.asdict(s) for s in self.suggestions],
            "simulationsRun": self.tried,
        }


def pod_key(text: str) -> str:
    """``NS/NAME`` (``NAME`` alone: namespace ``default``)."""
    ns, sep, name = text.partition("/")
    if not sep:
        return f"default/{text}"
    if not ns or not name or "/" in name:
        raise KgpuError(f"argument POD: {text!r}: give NAMESPACE/NAME (e.g. ml/train-2)")
    return text


def _advertises(node: SimNode) -> Obj:
    gpu = {k: v for k, v in node.allocatable.items() if k.startswith("nvidia.com/")}
    used = {k: node.requested.get(k, 0) for k in gpu}
    out: Obj = {
        "allocatable": gpu,
        "allocated": used,
        "product": node.labels.get(PRODUCT_LABEL),
        "machine": node.machine.profile if node.machine else None,
    }
    if node.view is not None:
        out["deviceConfig"] = node.view.config_name
        out["migConfig"] = node.view.mig_config_name
    return out


def _claims_of(sim: Simulation, pod: Obj) -> list[Obj]:
    """The ResourceClaims the pod names (directly or made from its templates) in the store."""
    ns = str((pod.get("metadata") or {}).get("namespace") or "default")
    made = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    out: list[Obj] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or made.get(str(entry.get("name")))
        if not name:
            continue
        try:
            out.append(sim.store.get("resource.k8s.io/v1", "ResourceClaim", str(name), ns))
        except NotFound:
            continue
    return out


def _claim_reasons(sim: Simulation, claims: list[Obj], nodes: list[SimNode]) -> list[Obj]:
    """The allocator's account per node for the pod's unallocated claims."""
    todo = [c for c in claims if not (c.get("status") or {}).get("allocation")]
    if not todo:
        return []
    from kgpu.dra.allocator import build
    from kgpu.dra.requests import AllocationError

    store = sim.store
    allocated = [
        c
        for c in store.list("resource.k8s.io/v1", "ResourceClaim")
        if (c.get("status") or {}).get("allocation")
    ]
    try:
        alloc = build(
            classes=store.list("resource.k8s.io/v1", "DeviceClass"),
            slices=store.list("resource.k8s.io/v1", "ResourceSlice"),
            allocated=allocated,
        )
    except (AllocationError, ValueError) as exc:
        return [{"claims": [_name(c) for c in todo], "error": str(exc)}]
    per_node: dict[str, str] = {}
    for node in nodes:
        try:
            results, why = alloc.allocate_explained(
                {"name": node.name, "labels": dict(node.labels)}, todo
            )
        except AllocationError as exc:
            per_node[node.name] = str(exc)
            continue
        per_node[node.name] = "fits" if results is not None else why
    return [{"claims": [_name(c) for c in todo], "nodes": per_node}]


def _name(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _running(sim: Simulation) -> dict[str, str]:
    return {k: r.node for k, r in sim.pods.items() if r.node and r.phase == "Running"}


def _gpu_allocatable(sim: Simulation, skip: set[str]) -> dict[str, dict[str, int]]:
    return {
        n.name: {k: v for k, v in n.allocatable.items() if k.startswith("nvidia.com/")}
        for n in sim.nodes
        if n.name not in skip
    }


class _Checker:
    """Re-runs the scenario with steps on top and says whether the change lets the pod run
    without moving or stopping any pod that ran, or changing other nodes' GPUs."""

    def __init__(self, scenario: Scenario, base: Simulation, key: str) -> None:
        self.scenario = scenario
        self.key = key
        self.node_names = {n.name for n in base.nodes}
        self.running = _running(base)
        self.base_gpus = _gpu_allocatable(base, set())
        self.tried = 0

    def check(self, steps: list[Obj], touched: set[str]) -> str | None:
        """What the re-run showed (the pod's new node), or None when it did not help."""
        if self.tried >= MAX_TRIES:
            return None
        self.tried += 1
        try:
            parsed = tuple(
                parse_step(s, nodes=self.node_names, base=self.scenario.base) for s in steps
            )
        except KgpuError:
            return None
        changed = dataclasses.replace(
            self.scenario, steps=self.scenario.steps + parsed, expect=Expectations()
        )
        sim = Simulation(changed)
        try:
            sim.run()
            rec = sim.pods.get(self.key)
            if rec is None or not rec.node or rec.phase != "Running":
                return None
            now = _running(sim)
            if any(now.get(k) != node for k, node in self.running.items()):
                return None
            after = _gpu_allocatable(sim, touched)
            if any(after.get(n) != g for n, g in self.base_gpus.items() if n not in touched):
                return None
            return f"{self.key} runs on {rec.node}"
        finally:
            sim.close()


def _short_of_devices(reason: str) -> bool:
    """A rejection a config or layout change on the node could lift: too few GPU devices
    (NodeResourcesFit on an ``nvidia.com/`` resource, or the DRA allocator)."""
    return reason.startswith("Insufficient nvidia.com/") or "cannot allocate" in reason


def _wants(pod: Obj) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        limits = (c.get("resources") or {}).get("limits") or {}
        for k, v in limits.items():
            if str(k).startswith("nvidia.com/"):
                try:
                    out[str(k)] = out.get(str(k), 0) + int(str(v))
                except ValueError:
                    continue
    return out


def _config_suggestions(
    sim: Simulation, rejected: list[SimNode], wants: Mapping[str, int], try_: _Try
) -> None:
    """Another existing device-plugin config entry, or a MIG layout, on one node."""
    configs = sim.configs
    for node in rejected:
        if node.view is None:
            continue
        for entry in sorted(configs.plugin_configs):
            if entry == node.view.config_name:
                continue
            step = {"label": {"node": node.name, "labels": {PLUGIN_LABEL: entry}}}
            try_(f"label node {node.name} {PLUGIN_LABEL}={entry}", [step], {node.name})
        mig = [r.removeprefix("nvidia.com/mig-") for r in wants if r.startswith("nvidia.com/mig-")]
        if mig and node.labels.get("nvidia.com/mig.capable") == "true":
            for name, layout in sorted(configs.all_mig_configs().items()):
                if name == node.view.mig_config_name:
                    continue
                offered = {
                    p
                    for spec in layout.entries
                    for p in (spec.mig_devices or {})
                    if spec.mig_enabled
                }
                if all(p in offered for p in mig):
                    step = {"label": {"node": node.name, "labels": {MIG_LABEL: name}}}
                    try_(f"label node {node.name} {MIG_LABEL}={name}", [step], {node.name})


def _replica_suggestions(rejected: list[SimNode], wants: Mapping[str, int], try_: _Try) -> None:
    """More time-slicing replicas of nvidia.com/gpu on one node (a new config entry)."""
    if set(wants) != {"nvidia.com/gpu"}:
        return
    for node in rejected:
        if node.machine is None or node.labels.get("nvidia.com/mig.strategy") == "single":
            continue
        now = int(node.labels.get("nvidia.com/gpu.replicas", "1") or 1)
        for replicas in (now * 2, now * 4):
            entry = f"time-slicing-{replicas}"
            config = {
                "version": "v1",
                "sharing": {
                    "timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}
                },
            }
            ns, name = SUGGESTED_CONFIGMAP
            cm = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns},
                "data": {entry: yaml.safe_dump(config, sort_keys=False)},
            }
            steps = [
                {"apply": cm},
                {"label": {"node": node.name, "labels": {PLUGIN_LABEL: entry}}},
            ]
            if try_(
                f"time-slicing with {replicas} replicas on node {node.name} (a config entry "
                f"{entry!r}, selected by {PLUGIN_LABEL}={entry})",
                steps,
                {node.name},
            ):
                break
        return  # one node is enough to show the change


def _node_suggestions(sim: Simulation, pod: Obj, try_: _Try) -> None:
    """One more node like an existing GPU node, or of the machine the pod's nodeSelector names."""
    from kgpu.sim.fromcluster import find_machine

    specs = {spec.name: spec for spec in sim.scenario.nodes}
    seen: set[tuple[object, ...]] = set()
    wanted = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(PRODUCT_LABEL)
    if wanted:
        machine, _ = find_machine(str(wanted), None, {})
        if machine is not None:
            new: Obj = {"name": "explain-new", "machine": machine, "labels": {}}
            try_(
                f"add a node of machine {machine} (GPU product {wanted})",
                [{"addNodes": [new]}],
                set(),
            )
    for node in sim.nodes:
        spec = specs.get(node.group or "")
        if spec is None or spec.machine is None:
            continue
        shape = (
            spec.machine,
            tuple(sorted(spec.labels.items())),
            tuple(tuple(sorted(t.items())) for t in spec.taints),
        )
        if shape in seen:
            continue
        seen.add(shape)
        labels = {k: v for k, v in spec.labels.items() if k != "kubernetes.io/hostname"}
        group: Obj = {"name": f"{spec.name}-explain", "machine": spec.machine, "labels": labels}
        if spec.taints:
            group["taints"] = [dict(t) for t in spec.taints]
        for key, unit in (("cpu", "m"), ("memory", ""), ("pods", "")):
            value = getattr(spec, key)
            if value is not None:
                group[key] = f"{value}{unit}"
        how = (
            "cluster-autoscaler would add one to its group"
            if spec.autoscale is not None
            else "as cluster-autoscaler would add to its group"
        )
        if try_(
            f"add a node like {node.name} ({spec.machine}; {how})", [{"addNodes": [group]}], set()
        ):
            return


_Try = Callable[[str, list[Obj], set[str]], bool]


def explain_pod(scenario: Scenario, key: str) -> Explanation:
    """Run ``scenario`` and explain pod ``key`` (``ns/name``); KgpuError when there is none."""
    sim = Simulation(scenario)
    try:
        sim.run()
        rec = sim.pods.get(key)
        if rec is None:
            known = sorted(sim.pods)
            shown = ", ".join(known[:8]) + (" ..." if len(known) > 8 else "")
            raise KgpuError(
                f"argument POD: no pod {key} in the cluster"
                + (f"; its pods: {shown}" if known else " (it has no pods)")
            )
        out = Explanation(key, rec.phase, rec.node, rec.last_message)
        nodes = list(sim.nodes)
        cycle = sim.scheduler.cycle(rec.req)
        rejected: list[SimNode] = []
        for node in nodes:
            entry: Obj = {"name": node.name, **_advertises(node)}
            if rec.node:
                entry["verdict"] = "runs here" if node.name == rec.node else ""
            else:
                verdict = sim.scheduler.node_verdict(rec, node, cycle)
                if verdict is None:
                    entry["verdict"] = "fits"
                else:
                    entry["verdict"] = "; ".join(verdict.reasons)
                    entry["preemption"] = verdict.code
                    if any(_short_of_devices(r) for r in verdict.reasons):
                        rejected.append(node)
            out.nodes.append(entry)
        if rec.node or rec.phase != "Pending":
            return out
        out.claims = _claim_reasons(sim, _claims_of(sim, rec.obj), nodes)
        checker = _Checker(scenario, sim, key)

        def try_(change: str, steps: list[Obj], touched: set[str]) -> bool:
            if len(out.suggestions) >= MAX_SUGGESTIONS:
                return True
            result = checker.check(steps, touched)
            if result is None:
                return False
            out.suggestions.append(Suggestion(change, steps, result))
            return True

        wants = _wants(rec.obj)
        _config_suggestions(sim, rejected, wants, try_)
        if not out.suggestions:
            _replica_suggestions(rejected, wants, try_)
        if len(out.suggestions) < MAX_SUGGESTIONS:
            _node_suggestions(sim, rec.obj, try_)
        out.tried = checker.tried
        return out
    finally:
        sim.close()


__all__ = ["MAX_TRIES", "Explanation", "Suggestion", "explain_pod", "pod_key"]
