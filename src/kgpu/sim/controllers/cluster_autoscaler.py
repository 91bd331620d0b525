"""cluster-autoscaler and the cloud behind it in the simulated cluster, driving
:mod:`kgpu.autoscaling.cluster_autoscaler` on the clock.

Node groups with ``autoscale: {min, max}`` are cluster-autoscaler's groups (``--nodes``), with
the scenario's ``clusterAutoscaler`` flags. Every ``scan-interval`` (10 s) from the start:

* the pods the scheduler left Pending (FailedScheduling) are tried on a **template node** of
  each group — the node a new member would be, built by the same path that adds nodes
  (:func:`kgpu.sim.node_lifecycle.template_node`: its machine, device plugin, configs and
  labels) — with the simulator's own scheduler filters (taints, node affinity, resources,
  topology spread and inter-pod affinity, the DRA plugin), so ``NotTriggerScaleUp`` gives
  kube-scheduler's reasons in the words of the scenario's ``kubernetesVersion``. The inter-pod
  filters see what cluster-autoscaler's snapshot holds: the cluster, the new nodes of the
  estimate (each a template under its own name and hostname) and the pods put on them; in a
  drain simulation, the drained node's pods moved to their destinations;
* a scale-up asks the simulated cloud for nodes, which join after ``provisioning-delay`` (0:
  right after the scan) as ``<group>-<n>``
  (:func:`~kgpu.sim.node_lifecycle.add_group_node`, the path of ``addNodes``);
* a node found unneeded long enough is drained: its pods are evicted (their controllers make
  new ones, which the scheduler places elsewhere), then the node is deleted.

Events are cluster-autoscaler's (``TriggeredScaleUp``, ``NotTriggerScaleUp``, ``ScaledUpGroup``,
``ScaleDown``); repeated ones are counted, not repeated (:meth:`SimContext.record`).
Not simulated: a template node's DaemonSet pods (upstream counts them on the template) and DRA
devices of nodes that do not exist yet (a pod with claims never triggers a scale-up).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kgpu.autoscaling.cluster_autoscaler import (
    CANode,
    CAPod,
    CAState,
    Elsewhere,
    NodeGroup,
    NodeRef,
    Provision,
    provision,
    run_once,
)
from kgpu.sim.context import SimContext
from kgpu.sim.loops import CLOUD, CLUSTER_AUTOSCALER
from kgpu.sim.node_lifecycle import add_group_node, delete_node, template_node
from kgpu.sim.plugins import Event
from kgpu.sim.pod_lifecycle import delete_pod
from kgpu.sim.rejection import Rejection
from kgpu.sim.scheduler import HOSTNAME_LABEL, fit_reasons, static_reasons
from kgpu.sim.spread import NodeView
from kgpu.sim.state import PodRecord, SimNode


class ClusterAutoscaler:
    """cluster-autoscaler (a :class:`~kgpu.sim.plugins.Controller`: on a change it only
    notices the first autoscaled group and starts its scan loop)."""

    name = "cluster-autoscaler"

    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        self.settings = ctx.scenario.cluster_autoscaler
        self.state = CAState()
        self.running = False
        self._templates: dict[str, tuple[tuple[object, ...], SimNode]] = {}
        #: whether a pod this scan may place has required anti-affinity (then every pod's
        #: inter-pod filters must see where the scan put it)
        self._pending_anti_affinity = False

    def reconcile(self, store: Any, now: float) -> list[Event]:
        if self.ctx.node_groups and not self.running:
            self.running = True
            self.ctx.loops.at(now, CLUSTER_AUTOSCALER, self._scan)
        return []

    # -- the cluster as cluster-autoscaler sees it ------------------------------------------
    def _template(self, group: str) -> SimNode:
        """The group's template node, rebuilt when what shapes it changed (configs, the device
        plugin)."""
        spec = self.ctx.node_groups[group]
        key = (id(self.ctx.configs), self.ctx.device_plugin, spec)
        cached = self._templates.get(group)
        if cached is None or cached[0] != key:
            cached = self._templates[group] = (key, template_node(self.ctx, spec))
        return cached[1]

    def _groups(self) -> list[NodeGroup]:
        return [
            NodeGroup(
                name, spec.autoscale[0], spec.autoscale[1], dict(self._template(name).allocatable)
            )
            for name, spec in sorted(self.ctx.node_groups.items())
            if spec.autoscale is not None
        ]

    @staticmethod
    def _pod(rec: PodRecord) -> CAPod:
        priority = (rec.obj.get("spec") or {}).get("priority")
        return CAPod(
            key=rec.key,
            obj=rec.obj,
            requests=dict(rec.req.requests),
            created_at=rec.created_at,
            priority=priority if isinstance(priority, int) else 0,
        )

    def _node(self, node: SimNode) -> CANode:
        meta = node.obj.get("metadata") or {}
        return CANode(
            name=node.name,
            # only nodes of an autoscaled group are the autoscaler's to add or remove
            group=node.group if node.group in self.ctx.node_groups else None,
            allocatable=dict(node.allocatable),
            pods=tuple(self._pod(rec) for rec in node.pods.values()),
            ready=node.ready,
            unschedulable=node.unschedulable,
            annotations=meta.get("annotations") or {},
        )

    def _view(self, ref: NodeRef) -> NodeView | None:
        """A node as the inter-pod filters see it; a template node under the name
        cluster-autoscaler gives each new node (its hostname label too)."""
        if not ref.template:
            node = self.ctx.node_by_name.get(ref.name)
            return None if node is None else (node.name, node.labels, node.taints)
        template = self._template(ref.group)
        return (ref.name, {**template.labels, HOSTNAME_LABEL: ref.name}, template.taints)

    def _inter_pod(
        self, rec: PodRecord, ref: NodeRef, placed: Sequence[CAPod], elsewhere: Elsewhere
    ) -> Rejection | None:
        """PodTopologySpread and InterPodAffinity on the node in cluster-autoscaler's snapshot:
        the cluster plus the new nodes of this estimate and the pods it put on them (or, in a
        drain simulation, the drained node's pods moved to their destinations)."""
        ctx = self.ctx
        req = rec.req
        if (
            not req.spread
            and not req.inter_pod
            and not ctx.scheduler.pods.anti_terms
            and not self._pending_anti_affinity
        ):
            return None  # both filters skip the pod, whatever this simulation placed
        view = self._view(ref)
        if view is None:
            return None
        views: dict[str, NodeView] = {ref.name: view}
        placements: list[tuple[PodRecord, str]] = []
        for where, pods in [(ref, placed), *elsewhere()]:
            other = views.get(where.name) or self._view(where)
            if other is None:
                continue
            views[where.name] = other
            placements.extend((ctx.pods[p.key], where.name) for p in pods if p.key in ctx.pods)
        drained = ctx.node_by_name.get(rec.node) if rec.node else None
        removed = list(drained.pods.values()) if drained is not None else []
        templates = [v for name, v in views.items() if name not in ctx.node_by_name]
        return ctx.scheduler.what_if(
            rec, view, new_nodes=templates, placed=placements, removed=removed
        )

    def _fit(
        self, pod: CAPod, ref: NodeRef, placed: Sequence[CAPod], elsewhere: Elsewhere
    ) -> list[str]:
        """The scheduler's filters for ``pod`` on a real node or a group's template node, with
        ``placed`` (pods this simulation already put there) counted as requested, in the words
        of the cluster's kube-scheduler release (``kubernetesVersion``)."""
        ctx = self.ctx
        rec = ctx.pods.get(pod.key)
        node = self._template(ref.group) if ref.template else ctx.node_by_name.get(ref.name)
        if rec is None or node is None:
            return ["not found"]
        name = ref.name if ref.template else node.name
        static = static_reasons(
            rec.req, node.labels, node.taints, node.unschedulable, name, ctx.scheduler.version
        )
        if static:
            return list(static)
        free = dict(node.allocatable)
        if not ref.template:
            for resource, amount in node.requested.items():
                free[resource] = free.get(resource, 0) - amount
        for other in placed:
            for resource, amount in other.requests.items():
                free[resource] = free.get(resource, 0) - amount
            free["pods"] = free.get("pods", 0) - 1
        reasons = fit_reasons(rec.req.requests, free)
        if reasons:
            return reasons
        inter_pod = self._inter_pod(rec, ref, placed, elsewhere)
        if inter_pod is not None:
            return list(inter_pod.reasons)
        assert node.info is not None
        for plugin in ctx.scheduler.plugins:
            why = plugin.prefilter(rec.obj, ctx.store) or plugin.filter(
                rec.obj, node.info, ctx.store
            )
            if why:
                return [why]
        return []

    # -- the loops ---------------------------------------------------------------------------
    def _provision(self, now: float) -> bool:
        """The simulated cloud: requested nodes that are due join; late ones time out."""
        ready, events, self.state = provision(self.settings, self._groups(), self.state, now)
        for event in events:
            self.ctx.record(Event(event.type, event.reason, event.object, event.message))
        for group in ready:
            add_group_node(self.ctx, group)
        return bool(ready)

    def _due(self, item: Provision) -> float:
        """When the cloud answers a request: the node is Ready, or its wait has timed out."""
        limit = item.requested_at + self.settings.max_node_provision_time
        return item.ready_at if item.ready_at <= limit else limit + 1e-3

    def _scan(self, now: float) -> bool:
        ctx = self.ctx
        ctx.loops.at(now + self.settings.scan_interval, CLUSTER_AUTOSCALER, self._scan)
        changed = self._provision(now)
        pending = [
            self._pod(rec) for rec in ctx.pending.values() if rec.last_message and not rec.node
        ]
        self._pending_anti_affinity = any(
            ctx.pods[p.key].req.anti_affinity_terms for p in pending if p.key in ctx.pods
        )
        before = set(self.state.provisioning)
        decision = run_once(
            self.settings,
            self._groups(),
            self.state,
            [self._node(n) for n in ctx.nodes],
            pending,
            now,
            self._fit,
            seed=ctx.scenario.seed,
        )
        self.state = decision.state
        for item in decision.state.provisioning:
            if item not in before:
                ctx.loops.at(self._due(item), CLOUD, self._provision)
        for event in decision.events:
            ctx.record(Event(event.type, event.reason, event.object, event.message))
        for key in decision.evict_pods:
            delete_pod(ctx, key)
        for name in decision.delete_nodes:
            delete_node(ctx, name)
        return changed or bool(decision.evict_pods or decision.delete_nodes)


__all__ = ["ClusterAutoscaler"]
