"""Each simulated node's MIG manager: kgpu's own, on the node's simulated GPUs and the
simulator's clock.

A node whose GPUs can do MIG gets a :class:`~kgpu.drivers.migmanager.MigManager` over its
:class:`~kgpu.hardware.simulated.SimulatedBackend` (the same manager the agent runs with
``--mig-manager``), wired as the agent wires it, with the simulator in place of the cluster:

- inputs: the scenario's configs (and ConfigMaps applied since) and the Node's labels, so a
  ``label`` step changing ``nvidia.com/mig.config`` starts a reconfiguration;
- labels: a patch of the Node in the store (``nvidia.com/mig.config.state``), as
  :func:`~kgpu.drivers.migmanager.store_label_writer` makes it for the agent;
- events: on the Node, in the run's event list;
- holders (the kubelet's PodResources): which pod the simulated kubelet gave each
  device-plugin device, and the GPU/MIG UUIDs DRA prepared for each container;
- eviction, with ``migManager.evictPods``: the pod is deleted through the store
  (:func:`~kgpu.drivers.migmanager.store_evictor`), so its controller makes a new one;
- reboot, with ``migManager.withReboot``: the node's GPUs are reset (pending MIG modes take
  effect, instances are gone). Only the GPUs: the simulated node keeps its pods.

The node view never applies a layout: what the node advertises is built from the backend's
snapshot, minus the GPUs the manager withholds (:func:`served`). The manager is called when
its inputs change (labels, configs, and while it drains, any pod leaving or node change) and at
the times it asks for (the drain's poll and timeout, a retry's backoff), which
:func:`next_wake` gives the clock. Nothing here decides anything the manager does not.

A node joining with ``nvidia.com/mig.config`` starts with its GPUs as the profile describes
them (MIG off on the built-in machines): its manager applies the layout at once, before the
first pod is scheduled, and the events show it -- as on a real node, where GPU instances do
not survive a reboot and the GPU Operator's mig-manager creates them each time the node starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kgpu.config.loader import MIG_CONFIG_LABEL
from kgpu.drivers.migmanager import (
    MIG_STATE_LABEL,
    REBOOTING,
    MigManager,
    MigManagerOptions,
    store_evictor,
    store_label_writer,
    withhold,
)
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.node.ids import strip_replica
from kgpu.node.model import NodeView
from kgpu.sim.context import SimContext
from kgpu.sim.mig_settings import MigManagerSettings
from kgpu.sim.state import NodeMig, SimNode

#: what a scenario that says nothing gets: the agent's defaults
DEFAULTS = MigManagerSettings(
    enabled=True,
    evict_pods=False,
    drain_timeout_s=MigManagerOptions().drain_timeout_s,
    with_reboot=False,
)

Refresh = Callable[[SimContext, SimNode], None]


def options_for(settings: MigManagerSettings) -> MigManagerOptions:
    return MigManagerOptions(
        with_reboot=bool(settings.with_reboot),
        evict_pods=bool(settings.evict_pods),
        drain_timeout_s=(
            settings.drain_timeout_s
            if settings.drain_timeout_s is not None
            else MigManagerOptions().drain_timeout_s
        ),
    )


def attach(ctx: SimContext, node: SimNode, group: MigManagerSettings) -> None:
    """Give a joining node its MIG manager, when its GPUs can do MIG and the settings (its
    group's over the scenario's) leave the manager enabled."""
    hardware = node.hardware
    if hardware is None or not any(g.mig_capable for g in hardware.machine.gpus):
        return
    settings = group.over(ctx.scenario.mig_manager.over(DEFAULTS))
    if not settings.enabled:
        return
    options = options_for(settings)
    manager = MigManager(
        hardware,
        lambda: (ctx.configs, node.labels),
        write_labels=_label_writer(ctx, node),
        holders=lambda: holders(node),
        evict=store_evictor(ctx.store) if options.evict_pods else None,
        reboot=_reboot(ctx, node, hardware) if options.with_reboot else None,
        on_event=lambda kind, reason, message: ctx.emit(kind, reason, f"Node/{node.name}", message),
        on_change=lambda: _changed(node),
        options=options,
        clock=lambda: ctx.now,
    )
    node.mig = NodeMig(manager)


def _changed(node: SimNode) -> None:
    if node.mig is not None:
        node.mig.changed = True


def _label_writer(ctx: SimContext, node: SimNode) -> Callable[[Mapping[str, str]], None]:
    """The agent's writer (a merge patch of the Node). The simulator's record of the Node
    follows at once (so republishing the node keeps the label), so the write needs no
    journaling for the simulator to take it in."""
    patch = store_label_writer(ctx.store, node.name)

    def write(labels: Mapping[str, str]) -> None:
        with ctx.store.muted():
            patch(labels)
        node.scenario_labels.update(labels)
        node.labels.update(labels)

    return write


def _reboot(ctx: SimContext, node: SimNode, hardware: SimulatedBackend) -> Callable[[], None]:
    def reboot() -> None:
        hardware.reset_gpus()
        ctx.emit(
            "Warning",
            "Rebooted",
            f"Node/{node.name}",
            f"Node {node.name} has been rebooted (simulated: its GPUs were reset)",
        )

    return reboot


def holders(node: SimNode) -> Mapping[str, Sequence[str]]:
    """GPU/MIG UUID -> pods ("namespace/name") holding it, as PodResources would say: the
    device-plugin devices the kubelet gave each pod (a replica counts for the device behind it)
    and the devices DRA prepared for its containers."""
    out: dict[str, set[str]] = {}
    for device_id, pod in node.device_owner.items():
        out.setdefault(strip_replica(device_id), set()).add(pod)
    for key, rec in node.pods.items():
        for env in rec.env.values():
            for uuid in env.get("NVIDIA_VISIBLE_DEVICES", "").split(","):
                if uuid.startswith(("GPU-", "MIG-")):
                    out.setdefault(uuid, set()).add(key)
    return {uuid: sorted(pods) for uuid, pods in out.items()}


def served(node: SimNode, view: NodeView) -> NodeView:
    """What the device plugin serves: the view without the GPUs being reconfigured."""
    return withhold(view, node.mig.manager.withheld()) if node.mig is not None else view


def _inputs(ctx: SimContext, node: SimNode, mig: NodeMig) -> tuple[object, ...]:
    """What the manager reads that can change between calls; while it drains, any change of
    the cluster (a pod leaving bumps the epoch) may free its GPUs."""
    return (
        id(ctx.configs),
        node.labels.get(MIG_CONFIG_LABEL),
        node.labels.get(MIG_STATE_LABEL),
        ctx.epoch if mig.draining else None,
    )


def reconcile_due(ctx: SimContext, refresh: Refresh) -> bool:
    """Call every node's manager whose inputs changed or whose time came; republish the nodes
    whose manager changed something. True when one did."""
    progress = False
    for node in ctx.nodes:
        mig = node.mig
        if mig is None or not node.device_plugin or not node.ready:
            continue
        due = mig.wake_at is not None and ctx.now >= mig.wake_at
        if not due and _inputs(ctx, node, mig) == mig.seen:
            continue
        mig.changed = False
        attempt = mig.manager.reconcile()
        mig.draining = attempt.stage == "draining"
        waits = mig.draining or attempt.retry or attempt.state == REBOOTING
        mig.wake_at = ctx.now + max(attempt.again_s, 1e-3) if waits else None
        if mig.wake_at is None:
            ctx.mig_wakes.pop(node.name, None)
        else:
            ctx.mig_wakes[node.name] = mig.wake_at
        if mig.changed:
            refresh(ctx, node)
            progress = True
        mig.seen = _inputs(ctx, node, mig)
    return progress


def next_wake(ctx: SimContext) -> float | None:
    """The earliest clock time a node's manager asked to be called at (None: no one waits).
    Only the few waiting managers are looked at: ``advance`` asks before every pod it ends."""
    times = []
    for name, when in list(ctx.mig_wakes.items()):
        node = ctx.node_by_name.get(name)
        if node is None or node.mig is None or node.mig.wake_at != when:  # deleted, replaced
            del ctx.mig_wakes[name]
        elif node.device_plugin and node.ready:
            times.append(when)
    return min(times, default=None)


__all__ = ["attach", "holders", "next_wake", "reconcile_due", "served"]
