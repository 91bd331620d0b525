"""Where the simulator meets kgpu's node code: machines, node views, the device plugin.

Everything the simulated kubelets run on a node comes through here, and each call is the real
one the agent makes on a real node: :func:`kgpu.hardware.profiles.load_machine` for the
hardware snapshot, :func:`kgpu.node.view.build_node_view` for what the device plugin advertises
and GPU feature discovery labels, :mod:`kgpu.node.health` for XID events, and
:class:`~kgpu.kubelet.deviceplugin.servicer.DevicePluginServicer` for GetPreferredAllocation and
Allocate (called in process with protobuf messages; no socket is needed for what the kubelet's
device manager does with the answers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kgpu.config.loader import EMPTY, ConfigSet, load_config_files, load_config_strings
from kgpu.hardware.backend import XidEvent
from kgpu.hardware.model import Machine
from kgpu.hardware.profiles import load_machine
from kgpu.kubelet.deviceplugin.servicer import DevicePluginServicer
from kgpu.kubelet.podresources import CheckpointEntry
from kgpu.kubelet.proto.deviceplugin.v1beta1 import api_pb2
from kgpu.node.health import HealthState, on_event
from kgpu.node.model import AdvertisedDevice, NodeView
from kgpu.node.view import build_node_view
from kgpu.sim.state import MpsDaemon, SimNode


def machine_for(profile: str, hostname: str, clique: str | None) -> Machine:
    return load_machine(profile, hostname=hostname, clique=clique)


def load_configs(paths: Sequence[Path], inline: Mapping[str, str]) -> ConfigSet:
    """Config files from the scenario plus ConfigMaps applied to the cluster (as YAML texts)."""
    if not paths and not inline:
        return EMPTY
    base = load_config_files(paths) if paths else EMPTY
    if not inline:
        return base
    extra = load_config_strings(inline)
    plugin = {**base.plugin_configs, **extra.plugin_configs}
    mig = {**base.mig_configs, **extra.mig_configs}
    return replace(
        base,
        plugin_configs=plugin,
        mig_configs=mig,
        default_plugin_config=extra.default_plugin_config or base.default_plugin_config,
        default_mig_config=extra.default_mig_config or base.default_mig_config,
        mig_strategy=extra.mig_strategy or base.mig_strategy,
        warnings=base.warnings + extra.warnings,
    )


def is_config_map(obj: Mapping[str, Any]) -> bool:
    """Whether an applied ConfigMap holds device-plugin or mig-parted configs."""
    import yaml

    if obj.get("kind") != "ConfigMap" or not isinstance(obj.get("data"), dict):
        return False
    try:
        parsed = load_config_strings({"probe": yaml.safe_dump(obj)})
    except Exception:
        return False
    return bool(parsed.plugin_configs or parsed.mig_configs)


def view_for(
    machine: Machine,
    configs: ConfigSet,
    labels: Mapping[str, str],
    *,
    default_config: str | None,
    mig_strategy: str | None,
    unhealthy: frozenset[str],
) -> NodeView:
    view = build_node_view(
        machine, configs, labels, config_name=default_config, mig_strategy=mig_strategy
    )
    return view.with_health(unhealthy) if unhealthy else view


def xid_health(
    state: HealthState,
    machine: Machine,
    gpu: int | str,
    xid: int,
    gi: int | None,
    ci: int | None,
    now: float,
) -> HealthState:
    """The health state after an XID on a GPU (index or UUID), as the agent's health loop
    would compute it."""
    uuid = gpu if isinstance(gpu, str) else machine.gpu(int(gpu)).uuid
    return on_event(state, machine, XidEvent(uuid, xid, gi, ci, now), now)


def servicers_for(node: SimNode) -> dict[str, DevicePluginServicer]:
    """One device-plugin servicer per advertised resource, reading the node's current view
    less what the ownership ledger withholds, and holding what it allocates there (as the
    agent's device-plugin component wires them)."""
    if node.view is None:
        return {}
    ownership = node.ownership

    def current() -> NodeView:
        assert node.view is not None
        return node.view if ownership is None else ownership.device_plugin_view(node.view)

    return {
        res.name: DevicePluginServicer(res.name, current, guard=ownership)
        for res in node.view.resources
    }


def observe_pod_resources(node: SimNode) -> None:
    """The agent's PodResources round, at once (the agent asks every few seconds): ids the
    kubelet no longer holds leave the ledger, held ones get their pod's name."""
    if node.ownership is not None:
        node.ownership.observe_listed(node.device_owner, node.ownership.now())


def restore_device_plugin(node: SimNode) -> None:
    """An agent starting: its device-plugin holdings from the kubelet's device checkpoint."""
    if node.ownership is None or node.view is None:
        return
    by_pod: dict[str, list[str]] = {}
    for device_id, pod in node.device_owner.items():
        by_pod.setdefault(pod, []).append(device_id)
    resource_of = {d.id: r.name for r in node.view.resources for d in r.devices}
    entries = [
        CheckpointEntry(pod, "", resource_of.get(i, ""), (i,))
        for pod, ids in sorted(by_pod.items())
        for i in ids
    ]
    node.ownership.restore_device_plugin(entries, node.view)
    observe_pod_resources(node)


def mps_daemons(view: NodeView | None) -> list[MpsDaemon]:
    """The MPS control daemons the agent starts: one per MPS-shared GPU (upstream runs one per
    resource; see :mod:`kgpu.drivers.mps`), each with that GPU's per-client limits and its own
    pipe directory, in resource then GPU order."""
    if view is None:
        return []
    out = []
    for res in view.resources:
        per_gpu: dict[str, list[AdvertisedDevice]] = {}
        for dev in res.devices:
            if dev.mps is not None:
                per_gpu.setdefault(dev.gpu_uuid, []).append(dev)
        for uuid, devices in sorted(per_gpu.items(), key=lambda kv: kv[1][0].gpu_index):
            limits = devices[0].mps
            assert limits is not None
            out.append(
                MpsDaemon(
                    resource=res.name,
                    gpus=[uuid],
                    replicas=len(devices),
                    active_thread_percentage=limits.active_thread_percentage,
                    pinned_memory_limit_mib=limits.pinned_memory_limit_mib,
                    pipe_directory=limits.pipe_directory,
                )
            )
    return out


def mps_clients(node: SimNode, daemon: MpsDaemon) -> list[str]:
    """Pods ("ns/name") holding a replica of ``daemon``'s resource on its GPU: the clients
    that talk to that daemon (Allocate mounted its pipe directory into them)."""
    if node.view is None:
        return []
    try:
        res = node.view.resource(daemon.resource)
    except KeyError:
        return []
    gpu_of = {dev.id: dev.gpu_uuid for dev in res.devices}
    return sorted({pod for i, pod in node.device_owner.items() if gpu_of.get(i) in daemon.gpus})


@dataclass
class DeviceGrant:
    """What one container got for one resource."""

    ids: list[str]
    envs: dict[str, str]
    cdi_devices: list[str]


class AdmissionError(Exception):
    """The kubelet's device manager could not satisfy a container (kubelet's
    ``UnexpectedAdmissionError``)."""


def allocate_devices(node: SimNode, resource: str, size: int) -> DeviceGrant:
    """The kubelet device manager's steps for one container: free healthy devices ->
    GetPreferredAllocation -> Allocate."""
    servicer = node.servicers.get(resource)
    if servicer is None or node.view is None:
        raise AdmissionError(f"Resource {resource} is not served by any device plugin on this node")
    # the kubelet admits against the list it last took in, which may be behind the plugin
    known = node.listed if node.listed is not None else node.view
    try:
        res = known.resource(resource)
    except KeyError:
        res = node.view.resource(resource)
    available = [d.id for d in res.devices if d.healthy and d.id not in node.device_owner]
    if len(available) < size:
        raise AdmissionError(
            f"Requested number of devices unavailable for {resource}. "
            f"Requested: {size}, Available: {len(available)}"
        )
    pref = servicer.GetPreferredAllocation(
        api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, allocation_size=size
                )
            ]
        ),
        None,
    )
    ids = list(pref.container_responses[0].deviceIDs) if pref.container_responses else []
    if len(ids) != size or not set(ids) <= set(available):
        ids = available[:size]  # the kubelet ignores a preference it cannot use
    resp = servicer.Allocate(
        api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)]
        ),
        None,
    )
    c = resp.container_responses[0]
    # a protobuf map has no order: sorted, so a run prints the same environment every time
    return DeviceGrant(ids, dict(sorted(c.envs.items())), [d.name for d in c.cdi_devices])
