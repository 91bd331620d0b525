"""One owner per GPU on a simulated node: the agent's own ledger, wired as the agent wires it.

Each simulated node with GPUs gets the :class:`~kgpu.drivers.ownership.GpuOwnership` the agent
builds, shared by its device-plugin servicers (:func:`kgpu.sim.nodeside.servicers_for`) and its
DRA driver (:class:`kgpu.sim.dra_node.DraKubeletPlugin`). What the simulator adds is only the
kubelet's timing, as a real kubelet has it:

* the kubelet admits device-plugin pods against the list it last took in from ListAndWatch
  (``SimNode.listed``); a ledger change reaches that list, the Node's capacity and
  allocatable, and the DRA driver's ResourceSlices at the end of the kubelets' round
  (:func:`kgpu.sim.node_lifecycle.refresh_dirty`), not in the middle of it. So when a claim
  is prepared in the same round a device-plugin pod is admitted on the same GPU, the later of
  the two fails, naming the holder, as on a real node: ``FailedPrepareDynamicResources``
  (retried by the kubelet), or ``UnexpectedAdmissionError`` for the pod;
* PodResources is read at once when a pod's devices are released (the agent reads it every
  few seconds while the device plugin holds anything).

:func:`kgpu.sim.node_lifecycle.restart_agent` models an agent restart: a new ledger rebuilt
from the kubelet's device checkpoint and the DRA driver's checkpoint. :func:`problems` is the
invariant the property tests check after every step.
"""

from __future__ import annotations

from kgpu.drivers.ownership import GpuOwnership
from kgpu.node import ownership as own
from kgpu.node.model import NodeView
from kgpu.sim.context import SimContext
from kgpu.sim.state import SimNode


def apis(node: SimNode) -> tuple[str, ...]:
    """The kubelet APIs the node's agent runs (DRA always runs in the simulator)."""
    return own.APIS if node.device_plugin else (own.DRA,)


def attach(ctx: SimContext, node: SimNode) -> None:
    """Give ``node`` a fresh ledger (its agent starting) and hand it to the DRA driver."""
    ledger = GpuOwnership(apis(node), clock=lambda: ctx.now, grace_s=0.0)
    name = node.name
    ledger.subscribe(lambda: ctx.ownership_dirty.add(name))
    node.ownership = ledger
    for plugin in ctx.kubelet_plugins:
        hand = getattr(plugin, "attach_ownership", None)
        if hand is not None:
            hand(node.name, ledger)


def listed(node: SimNode) -> NodeView | None:
    """The device plugin's list now (what the kubelet takes in at a refresh)."""
    if node.view is None or node.ownership is None:
        return node.view
    return node.ownership.device_plugin_view(node.view)


def problems(ctx: SimContext) -> list[str]:
    """What breaks one owner per GPU anywhere in the cluster now: a GPU with holders of both
    APIs (in the ledger, or in what pods really got), a device-plugin device of two pods, and
    a free GPU (no holder) that neither API offers while the policy says one should."""
    out: list[str] = []
    for node in ctx.nodes:
        if node.ownership is None or node.machine is None:
            continue
        ledger = node.ownership.ledger()
        out += [f"{node.name}: {p}" for p in own.problems(ledger)]
        # what pods got, independent of the ledger: device-plugin ids and prepared claims
        dp_gpus: dict[str, str] = {}
        if node.view is not None:
            by_id = {d.id: d.gpu_uuid for r in node.view.resources for d in r.devices}
            for device_id, pod in node.device_owner.items():
                if device_id in by_id:
                    dp_gpus[by_id[device_id]] = pod
        for gpu, claim in _claim_gpus(ctx, node).items():
            if gpu in dp_gpus:
                out.append(
                    f"{node.name}: GPU {gpu} is in pod {dp_gpus[gpu]} (device plugin) and "
                    f"claim {claim} (DRA)"
                )
        out += [f"{node.name}: {p}" for p in _unoffered(ctx, node, ledger)]
    return out


def _claim_gpus(ctx: SimContext, node: SimNode) -> dict[str, str]:
    """GPU UUID -> claim uid of every prepared claim on ``node`` (from the DRA checkpoint)."""
    out: dict[str, str] = {}
    for plugin in ctx.kubelet_plugins:
        prepared = getattr(plugin, "prepared_gpus", None)
        if prepared is not None:
            out.update(prepared(node.name))
    return out


def _unoffered(ctx: SimContext, node: SimNode, ledger: own.Ledger) -> list[str]:
    """Free GPUs that no API offers although the policy lets one (a GPU whose holder is gone
    must come back), unless the GPU is Unhealthy or withheld by the MIG manager."""
    if node.view is None or node.ownership is None:
        return []
    policy = node.ownership.policy()
    listed_gpus = {d.gpu_uuid for r in (node.listed or node.view).resources for d in r.devices}
    served_gpus = {d.gpu_uuid for r in node.view.resources for d in r.devices}
    out = []
    for gpu in node.machine.gpus if node.machine is not None else ():
        if ledger.owner(gpu.uuid) is not None or gpu.uuid in node.unhealthy:
            continue
        dp_offers = policy.allows(own.DEVICE_PLUGIN, gpu.uuid) and gpu.uuid in served_gpus
        if dp_offers and gpu.uuid not in listed_gpus:
            out.append(f"GPU {gpu.index} is free but the device plugin does not list it")
    for plugin in ctx.kubelet_plugins:
        gaps = getattr(plugin, "offer_gaps", None)
        if gaps is not None:
            out += gaps(node.name, ctx.store)
    return out
