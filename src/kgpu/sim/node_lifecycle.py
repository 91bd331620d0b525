"""Nodes joining, changing and leaving the simulated cluster.

What the node advertises comes from kgpu's real node code (:mod:`kgpu.sim.nodeside`) over the
node's simulated GPUs, whose MIG layout only the node's MIG manager changes
(:mod:`kgpu.sim.node_mig`); this module decides when it is recomputed and what follows: the
Node is republished, the scheduler sees the new node, kubelet plugins learn of new hardware,
and pods the node can no longer run are evicted (the taint manager for NoExecute taints, the
node lifecycle controller for a node that stops answering).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping

from kgpu.errors import FieldError, KgpuError
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.node.selectors import Taint, parse_taints, tolerates
from kgpu.sim import node_mig, nodeside
from kgpu.sim import ownership as sim_ownership
from kgpu.sim.context import SimContext
from kgpu.sim.node_status import (
    advertised,
    extended_counts,
    host_capacity,
    node_address,
    node_labels,
    node_object,
)
from kgpu.sim.plugins import NodeInfo
from kgpu.sim.pod_lifecycle import delete_pod
from kgpu.sim.scenario_parts import NodeSpec
from kgpu.sim.state import SimNode
from kgpu.store import NotFound

UNREACHABLE = "node.kubernetes.io/unreachable"


def _node_ready(ctx: SimContext, name: str) -> None:
    ctx.emit("Normal", "NodeReady", f"Node/{name}", f"Node {name} status is now: NodeReady")


def add_nodes(ctx: SimContext, spec: NodeSpec, group: str = "") -> None:
    """The nodes of one scenario entry join, Ready, members of node group ``group`` (by default
    the entry's name). An autoscaled group is remembered, so cluster-autoscaler can add nodes
    to it later (:func:`add_group_node`)."""
    if spec.autoscale is not None:
        ctx.node_groups[spec.name] = spec
        ctx.group_next_index[spec.name] = spec.count
    for name in spec.names():
        _join(ctx, spec, name, group)


def add_group_node(ctx: SimContext, group: str) -> str:
    """One more node of an autoscaled group joins (the cloud provisioned it), named
    ``<group>-<n>`` with the group's next index; the same path as the group's first nodes."""
    spec = ctx.node_groups[group]
    while True:
        index = ctx.group_next_index[group]
        ctx.group_next_index[group] = index + 1
        name = spec.node_name(index)
        if name not in ctx.node_by_name:
            break
    _join(ctx, spec, name)
    return name


def _new_node(ctx: SimContext, spec: NodeSpec, name: str, ip: str, group: str = "") -> SimNode:
    machine = nodeside.machine_for(spec.machine, name, spec.clique) if spec.machine else None
    node = SimNode(
        name=name,
        machine=machine,
        view=None,
        labels={},
        scenario_labels=dict(spec.labels),
        taints=parse_taints(spec.taints),
        unschedulable=spec.unschedulable,
        device_plugin=ctx.device_plugin,
        base_machine=machine,
        # the node's GPUs as its MIG manager changes them (a template node's are never changed)
        hardware=SimulatedBackend(machine) if machine is not None else None,
        ip=ip,
        capacity=host_capacity(spec, machine),
        group=group or spec.name,
    )
    if machine is not None and ip:  # a member of the cluster (not a template): its agent's ledger
        sim_ownership.attach(ctx, node)
    return node


def _join(ctx: SimContext, spec: NodeSpec, name: str, group: str = "") -> None:
    node = _new_node(ctx, spec, name, node_address(next(ctx.ip_seq)), group)
    node_mig.attach(ctx, node, spec.mig_manager)
    ctx.nodes.append(node)
    ctx.node_by_name[name] = node
    refresh_node(ctx, node, register=True)
    _node_ready(ctx, name)


def template_node(ctx: SimContext, spec: NodeSpec) -> SimNode:
    """The node a new member of the group would be, as cluster-autoscaler's template node
    info: the same machine, device plugin, configs and labels as :func:`add_group_node` gives
    it, not part of the cluster (no address, not published, no pods)."""
    node = _new_node(ctx, spec, f"template-node-for-{spec.name}", "")
    _advertise(ctx, node, template=True)
    node.obj = node_object(node)
    node.info = NodeInfo(name=node.name, labels=node.labels, node=node.obj, pods=[])
    return node


def refresh_node(ctx: SimContext, node: SimNode, *, register: bool = False) -> None:
    """Recompute what the node advertises (view, labels, capacity) and publish the Node."""
    old_machine = node.machine
    _advertise(ctx, node)
    _publish(ctx, node)
    ctx.scheduler.upsert_node(node)
    ctx.epoch += 1
    if register or node.machine != old_machine:
        for plugin in ctx.kubelet_plugins:
            try:
                plugin.register_node(node.name, node.machine, ctx.store)
            except KgpuError as exc:
                ctx.emit("Warning", "PluginError", f"Node/{node.name}", str(exc))
    unhealthy = {p.uuid: p.reason for p in node.health.problems.values()}
    for plugin in ctx.kubelet_plugins:  # a DRA driver taints unhealthy devices in its slices
        health = getattr(plugin, "node_health", None)
        if health is not None:
            health(node.name, unhealthy, ctx.store)
        owners = getattr(plugin, "node_ownership", None)  # and leaves out what it does not own
        if owners is not None:
            owners(node.name, ctx.store)
    ctx.ownership_dirty.discard(node.name)


def _advertise(ctx: SimContext, node: SimNode, *, template: bool = False) -> None:
    """What the node's device plugin and GPU feature discovery make of it now: view, labels,
    capacity and allocatable, MPS daemons; a real node's device-plugin servicers follow, and a
    bad label or config is a warning event on it (a ``template`` node has neither)."""
    base = node.base_machine
    hardware = node.hardware.snapshot() if node.hardware is not None else None
    if hardware is not None and node.device_plugin:
        try:
            view = nodeside.view_for(
                hardware,
                ctx.configs,
                node.scenario_labels,
                default_config=ctx.scenario.default_config,
                mig_strategy=ctx.scenario.mig_strategy,
                unhealthy=node.health.unhealthy,
            )
            node.view = node_mig.served(node, view)
        except FieldError as exc:  # a bad label or config: the last good view keeps serving
            if not template:
                ctx.emit("Warning", "InvalidConfig", f"Node/{node.name}", str(exc))
    else:
        node.view = None
    node.machine = hardware
    node.labels = node_labels(node.name, base, node.view, node.scenario_labels)
    if node.ownership is not None and not template:
        node.ownership.set_view(node.view)
    # what the kubelet takes in from ListAndWatch: the view less what the ledger withholds
    node.listed = sim_ownership.listed(node)
    cap, alloc = advertised(node.capacity, node.listed)
    if template or node.view is None:  # a template node serves nothing
        node.servicers = {}
    elif set(node.servicers) != {r.name for r in node.view.resources}:
        node.servicers = nodeside.servicers_for(node)
    else:
        for servicer in node.servicers.values():
            servicer.notify()
    node.capacity, node.allocatable = cap, alloc
    node.mps = nodeside.mps_daemons(node.view)


def refresh_all(ctx: SimContext) -> None:
    for node in ctx.nodes:
        refresh_node(ctx, node)


def _publish(ctx: SimContext, node: SimNode) -> None:
    node.obj = node_object(node)
    with ctx.store.muted():
        out = ctx.store.apply(node.obj)
    node.obj["metadata"]["resourceVersion"] = out["metadata"]["resourceVersion"]
    if node.info is not None:
        node.info.node = node.obj
        node.info.labels = node.labels


def label_node(ctx: SimContext, name: str, labels: Mapping[str, str | None]) -> None:
    """``kubectl label``: a None value removes the label."""
    node = ctx.node_by_name[name]
    for k, v in labels.items():
        if v is None:
            node.scenario_labels.pop(k, None)
        else:
            node.scenario_labels[k] = v
    refresh_node(ctx, node)


def set_device_plugin(ctx: SimContext, running: bool) -> None:
    """Start (or stop) the device plugin on every GPU node, as installing the GPU Operator
    does; nodes added later follow."""
    ctx.device_plugin = running
    for node in ctx.nodes:
        node.device_plugin = running
        if node.ownership is not None:
            node.ownership.set_apis(sim_ownership.apis(node))
        refresh_node(ctx, node)


def taint_node(ctx: SimContext, name: str, taints: list[dict[str, str]]) -> None:
    """Replace the node's taints (``kubectl taint``); NoExecute evicts pods that do not
    tolerate it."""
    node = ctx.node_by_name[name]
    node.taints = parse_taints(taints)
    refresh_node(ctx, node)
    _evict_intolerant(ctx, node, node.taints)


def _evict_intolerant(ctx: SimContext, node: SimNode, taints: Iterable[Taint]) -> None:
    """The taint manager: pods that do not tolerate every NoExecute taint among ``taints``
    are deleted at once (upstream waits their ``tolerationSeconds``)."""
    no_execute = [t for t in taints if t.effect == "NoExecute"]
    for rec in list(node.pods.values()):
        if all(any(tolerates(t, taint) for t in rec.req.tolerations) for taint in no_execute):
            continue
        ctx.emit(
            "Normal",
            "TaintManagerEviction",
            f"Pod/{rec.key}",
            f"Marking for deletion Pod {rec.key}",
        )
        delete_pod(ctx, rec.key)


def cordon(ctx: SimContext, name: str, on: bool = True) -> None:
    node = ctx.node_by_name[name]
    node.unschedulable = on
    refresh_node(ctx, node)


def inject_xid(
    ctx: SimContext, name: str, gpu: int | str, xid: int, gi: int | None, ci: int | None
) -> None:
    """An XID on a GPU: the node health code decides what turns Unhealthy."""
    node = ctx.node_by_name[name]
    if node.machine is None or node.base_machine is None:
        ctx.emit("Warning", "XidIgnored", f"Node/{name}", f"XID {xid}: node has no GPU")
        return
    before = node.health
    try:
        after = nodeside.xid_health(before, node.machine, gpu, xid, gi, ci, ctx.now)
    except KeyError:
        ctx.emit("Warning", "XidIgnored", f"Node/{name}", f"XID {xid}: no GPU {gpu} on {name}")
        return
    uuid = gpu if isinstance(gpu, str) else node.machine.gpu(int(gpu)).uuid
    node.xids[uuid] = xid  # DCGM_FI_DEV_XID_ERRORS, application XIDs included
    node.health = after
    if after is before:
        ctx.emit(
            "Normal",
            "XidIgnored",
            f"Node/{name}",
            f"XID {xid} on GPU {gpu} is an application error; devices stay Healthy",
        )
        return
    refresh_node(ctx, node)
    ctx.emit(
        "Warning",
        "GPUUnhealthy",
        f"Node/{name}",
        f"XID {xid} on GPU {gpu}: {', '.join(sorted(after.unhealthy))} Unhealthy; "
        f"allocatable {extended_counts(node)}",
    )


def fail_node(ctx: SimContext, name: str) -> None:
    """The node stops answering: NotReady, tainted unreachable, pods evicted (as the node
    lifecycle controller does; pods without a toleration go at once)."""
    node = ctx.node_by_name[name]
    node.ready = False
    node.taints = (
        *[t for t in node.taints if t.key != UNREACHABLE],
        Taint(UNREACHABLE, "", "NoSchedule"),
        Taint(UNREACHABLE, "", "NoExecute"),
    )
    refresh_node(ctx, node)
    ctx.emit("Normal", "NodeNotReady", f"Node/{name}", f"Node {name} status is now: NodeNotReady")
    _evict_intolerant(ctx, node, [Taint(UNREACHABLE, "", "NoExecute")])


def recover_node(ctx: SimContext, name: str) -> None:
    node = ctx.node_by_name[name]
    node.ready = True
    node.taints = tuple(t for t in node.taints if t.key != UNREACHABLE)
    refresh_node(ctx, node)
    _node_ready(ctx, name)


def delete_node(ctx: SimContext, name: str) -> None:
    """``kubectl delete node``: its pods go with it (bound or still being admitted)."""
    node = ctx.node_by_name.pop(name)
    for rec in list(node.pods.values()):
        delete_pod(ctx, rec.key)
    for rec in [r for r in ctx.pods.values() if r.node == name]:
        delete_pod(ctx, rec.key)
    ctx.nodes.remove(node)
    ctx.scheduler.remove_node(name)
    with ctx.store.muted(), contextlib.suppress(NotFound):
        ctx.store.delete("v1", "Node", name)
    ctx.epoch += 1
    ctx.emit("Normal", "RemovingNode", f"Node/{name}", f"Node {name} event: Removing Node {name}")


# -- one owner per GPU (kgpu.sim.ownership) ------------------------------------------------


def refresh_dirty(ctx: SimContext) -> bool:
    """Nodes whose ledger changed: the kubelet takes in the new list (capacity, allocatable),
    the DRA driver republishes. True when any node was refreshed."""
    if not ctx.ownership_dirty:
        return False
    names = sorted(ctx.ownership_dirty)
    ctx.ownership_dirty.clear()
    for name in names:
        node = ctx.node_by_name.get(name)
        if node is not None:
            _refresh_ownership(ctx, node)
    return True


def _refresh_ownership(ctx: SimContext, node: SimNode) -> None:
    """What a ledger change moves: the device plugin's list as the kubelet takes it in (the
    Node is written again only when capacity or allocatable changed) and the DRA driver's
    slices (republished only when what they withhold changed)."""
    listed = sim_ownership.listed(node)
    if listed is not node.listed:
        node.listed = listed
        cap, alloc = advertised(node.capacity, listed)
        if cap != node.capacity or alloc != node.allocatable:
            node.capacity, node.allocatable = cap, alloc
            _publish(ctx, node)
            ctx.scheduler.upsert_node(node)
            ctx.epoch += 1
    for plugin in ctx.kubelet_plugins:
        owners = getattr(plugin, "node_ownership", None)
        if owners is not None:
            owners(node.name, ctx.store)


def restart_agent(ctx: SimContext, node: SimNode) -> None:
    """The node's agent restarts: a new ledger, device-plugin holdings from the kubelet's
    checkpoint, claim holdings from the DRA driver's checkpoint, servicers served again."""
    if node.machine is None:
        return
    sim_ownership.attach(ctx, node)
    assert node.ownership is not None
    node.ownership.set_view(node.view)
    # the agent's component order: the device plugin (its holdings from the kubelet's
    # checkpoint) starts before the DRA driver publishes
    nodeside.restore_device_plugin(node)
    for plugin in ctx.kubelet_plugins:
        restart = getattr(plugin, "restart_node", None)
        if restart is not None:
            restart(node.name, ctx.store)
    node.servicers = nodeside.servicers_for(node)
    refresh_node(ctx, node)
