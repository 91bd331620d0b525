"""What a container gets for a set of device ids: pure decisions behind GetPreferredAllocation and
Allocate.

The agent's gRPC servicer and the simulator's kubelets both call these functions with a
:class:`~kgpu.node.model.NodeView`, so a pod scheduled in ``kgpu sim`` sees exactly the devices
and environment a real kubelet would hand it.

Facts carried over from NVIDIA's device plugin (so containers and runtimes behave the same):

* ``NVIDIA_VISIBLE_DEVICES`` lists the backing UUIDs (or indices under ``deviceIDStrategy:
  index``), replica suffixes ``::N`` dropped and duplicates removed.
* ``volume-mounts`` sets ``NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices`` and mounts
  ``/dev/null`` at ``/var/run/nvidia-container-devices/<id>`` per device.
* ``cdi-annotations`` adds ``<cdiAnnotationPrefix>nvidia-device-plugin_<response id>`` (prefix
  ``cdi.k8s.io/`` unless the config sets one) with the
  comma-joined CDI names ``k8s.device-plugin.nvidia.com/gpu=<id>``; ``cdi-cri`` sends the same
  names as ``cdi_devices``.
* Shared replicas get what their sharing mode adds (:mod:`kgpu.node.sharing`): MPS clients the
  pipe of their GPU's control daemon at upstream's ``/mps/<resource>/pipe``, the shared
  ``/dev/shm`` and their per-client limits; a mode may also refuse a request (MPS replicas of two
  GPUs: a client talks to one daemon).
"""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kgpu.errors import KgpuError
from kgpu.node.ids import is_replica, strip_replica
from kgpu.node.model import AdvertisedDevice, NodeView, ResourceView, Sharing
from kgpu.node.sharing import SharingMode, mode_of

VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNTS_HOST_PATH = "/dev/null"
VOLUME_MOUNTS_CONTAINER_ROOT = "/var/run/nvidia-container-devices"
CDI_VENDOR = "k8s.device-plugin.nvidia.com"
CDI_CLASS = "gpu"
CDI_ANNOTATION_PLUGIN = "nvidia-device-plugin"

# Above this many candidate subsets the whole-GPU search turns greedy (8 of 16 GPUs is 12870).
_MAX_SUBSETS = 20000


class AllocationError(KgpuError):
    """The kubelet asked for something the plugin must refuse; the message is upstream's."""


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = False


@dataclass(frozen=True)
class DeviceNode:
    container_path: str
    host_path: str
    permissions: str = "rw"


@dataclass(frozen=True)
class ContainerAllocation:
    """Everything ``ContainerAllocateResponse`` carries, as plain values."""

    envs: dict[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: tuple[str, ...] = ()


def _resource(view: NodeView, resource: str) -> ResourceView:
    try:
        return view.resource(resource)
    except KeyError:
        raise AllocationError(
            f"invalid allocation request for '{resource}': resource is not advertised"
        ) from None


# --------------------------------------------------------------------------- preferred allocation


def preferred_allocation(
    view: NodeView,
    resource: str,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    *,
    pack_replicas: bool | None = None,
) -> list[str]:
    """The ids the plugin would pick: ``must_include`` first, then the closest others.

    Whole GPUs: the subset with the most NVLinks between its members, then the fewest NUMA nodes,
    then the lowest GPU indices. Replicas: spread over the GPUs with the fewest replicas already
    handed out (``pack_replicas``, by default the config's ``sharedDevicesAllocationPolicy:
    packed``, packs them onto as few GPUs as possible instead). MIG devices:
    as few parent GPUs as possible. Unknown ids in ``available`` are ignored; the answer never
    holds more than ``size`` ids unless ``must_include`` alone is larger. Too few replicas or MIG
    devices to reach ``size`` is upstream's error; too few whole GPUs gives those there are.
    """
    res = _resource(view, resource)
    by_id = {dev.id: dev for dev in res.devices}
    chosen = list(dict.fromkeys(must_include))
    if size <= len(chosen):
        return chosen
    taken = set(chosen)
    candidates = [by_id[i] for i in dict.fromkeys(available) if i in by_id and i not in taken]
    need = size - len(chosen)
    shared = res.sharing is not Sharing.NONE or any(d.replica is not None for d in res.devices)
    mig = any(d.mig_uuid for d in res.devices)
    if need > len(candidates) and (shared or mig):
        # upstream's greedy allocator (replicas, MIG devices) refuses; whole GPUs get what is left
        raise AllocationError("not enough available devices to satisfy allocation")
    if need >= len(candidates):
        return chosen + [d.id for d in candidates]
    fixed = [by_id[i] for i in chosen if i in by_id]
    if shared:
        pack = view.shared_devices_allocation_policy == "packed"
        if pack_replicas is not None:
            pack = pack_replicas
        picked = _pick_replicas(res, candidates, fixed, need, available, pack)
    elif mig:
        picked = _pick_mig(candidates, fixed, need)
    else:
        picked = _pick_gpus(view, candidates, fixed, need)
    return chosen + [d.id for d in picked]


def _pick_replicas(
    res: ResourceView,
    candidates: list[AdvertisedDevice],
    fixed: list[AdvertisedDevice],
    need: int,
    available: Sequence[str],
    pack: bool,
) -> list[AdvertisedDevice]:
    """Greedy by load, as upstream's allocator: a GPU's load is its replicas not offered as
    available (handed out already) plus those picked in this request; equal loads go to the GPU
    this request took fewer replicas from, then the lowest index."""
    offered = set(available)
    load: Counter[int] = Counter()
    for dev in res.devices:
        if dev.id not in offered:
            load[dev.gpu_index] += 1
    for dev in fixed:
        load[dev.gpu_index] += 1
    remaining = list(candidates)
    picked: list[AdvertisedDevice] = []
    # Replicas of a mode that serves a client from one GPU (MPS: a client talks to one GPU's
    # daemon) must share a GPU: stay on a GPU the request already holds, else one with room for
    # the whole request.
    one_gpu = any(mode_of(d.sharing).one_gpu_per_request for d in res.devices)
    free: Counter[int] = Counter(d.gpu_index for d in candidates)
    held = {d.gpu_index for d in fixed}
    taken: Counter[int] = Counter()
    for step in range(need):
        left = need - step

        def key(d: AdvertisedDevice, left: int = left) -> tuple[int, int, int, int, int]:
            busy = load[d.gpu_index]
            apart = 0
            if one_gpu:
                apart = 2 * (d.gpu_index not in held) + (free[d.gpu_index] < left)
            order = -busy if pack else busy
            return (apart, order, taken[d.gpu_index], d.gpu_index, d.replica or 0)

        best = min(remaining, key=key)
        remaining.remove(best)
        picked.append(best)
        load[best.gpu_index] += 1
        taken[best.gpu_index] += 1
        free[best.gpu_index] -= 1
        held.add(best.gpu_index)
    return picked


def _pick_mig(
    candidates: list[AdvertisedDevice], fixed: list[AdvertisedDevice], need: int
) -> list[AdvertisedDevice]:
    """MIG devices of one parent share its NVLinks and memory system: keep a request together."""
    parents = Counter(d.gpu_index for d in fixed)
    remaining = list(candidates)
    picked: list[AdvertisedDevice] = []
    free = Counter(d.gpu_index for d in candidates)
    for _ in range(need):
        best = min(
            remaining,
            key=lambda d: (-parents[d.gpu_index], -free[d.gpu_index], d.gpu_index, d.id),
        )
        remaining.remove(best)
        picked.append(best)
        parents[best.gpu_index] += 1
        free[best.gpu_index] -= 1
    return picked


def _pick_gpus(
    view: NodeView,
    candidates: list[AdvertisedDevice],
    fixed: list[AdvertisedDevice],
    need: int,
) -> list[AdvertisedDevice]:
    machine = view.machine
    links: dict[tuple[int, int], int] = {}

    def link(a: int, b: int) -> int:
        key = (a, b) if a < b else (b, a)
        if key not in links:
            try:
                links[key] = machine.nvlink_connected(a, b)
            except KeyError:
                links[key] = 0
        return links[key]

    def score(group: Iterable[AdvertisedDevice]) -> tuple[int, int, tuple[int, ...]]:
        group = list(group)
        members = [*fixed, *group]
        total = sum(link(a.gpu_index, b.gpu_index) for a, b in itertools.combinations(members, 2))
        numa = len({d.numa_node for d in members})
        return (-total, numa, tuple(sorted(d.gpu_index for d in group)))

    ordered = sorted(candidates, key=lambda d: (d.gpu_index, d.id))
    if _combinations(len(ordered), need) <= _MAX_SUBSETS:
        return list(min(itertools.combinations(ordered, need), key=score))
    picked: list[AdvertisedDevice] = []
    remaining = ordered
    for _ in range(need):
        best = min(remaining, key=lambda d: score([*picked, d]))
        remaining = [d for d in remaining if d is not best]
        picked.append(best)
    return picked


def _combinations(n: int, k: int) -> int:
    from math import comb

    return comb(n, k)


# --------------------------------------------------------------------------------- allocation


def container_allocation(
    view: NodeView,
    resource: str,
    ids: Sequence[str],
    *,
    response_id: str | None = None,
) -> ContainerAllocation:
    """What the kubelet must give one container that was allocated ``ids`` of ``resource``.

    Raises :class:`AllocationError` for what upstream refuses, in upstream's order and words: ids
    the resource does not advertise, more than one replica when ``failRequestsGreaterThanOne``
    is set, and (kgpu only) ids currently Unhealthy. ``response_id`` names the CDI annotation;
    by default it is derived from the ids so the same request gives the same answer.
    """
    res = _resource(view, resource)
    by_id = {dev.id: dev for dev in res.devices}
    refused = f'invalid allocation request for "{resource}": invalid request: '
    unknown = next((i for i in ids if i not in by_id), None)
    if unknown is not None:
        raise AllocationError(f"{refused}unknown device: {unknown}")
    too_large = f"{refused}maximum request size for shared resources is 1; found {len(ids)}"
    if res.fail_requests_greater_than_one and any(is_replica(i) for i in ids) and len(ids) > 1:
        raise AllocationError(too_large)
    devices: list[AdvertisedDevice] = []
    for device_id in ids:
        dev = by_id[device_id]
        if not dev.healthy:
            raise AllocationError(f"{refused}unhealthy device: {device_id}")
        devices.append(dev)
    modes = _modes(devices)
    for mode, members in modes:
        problem = mode.request_problem(resource, members, too_large)
        if problem is not None:
            raise AllocationError(problem)

    visible = list(dict.fromkeys(strip_replica(d.visible_id) for d in devices))
    strategies = set(view.device_list_strategy)
    envs: dict[str, str] = {}
    mounts: list[Mount] = []
    annotations: dict[str, str] = {}
    cdi_names: tuple[str, ...] = ()

    envs.update(view.allocate_envs)
    if "envvar" in strategies:
        envs[VISIBLE_DEVICES_ENV] = ",".join(visible)
    if "volume-mounts" in strategies:
        envs[VISIBLE_DEVICES_ENV] = VOLUME_MOUNTS_CONTAINER_ROOT
        mounts.extend(
            Mount(
                container_path=f"{VOLUME_MOUNTS_CONTAINER_ROOT}/{i}",
                host_path=VOLUME_MOUNTS_HOST_PATH,
            )
            for i in visible
        )
    if strategies & {"cdi-annotations", "cdi-cri"} and visible:
        names = tuple(cdi_device_name(i) for i in visible)
        if "cdi-annotations" in strategies:
            rid = response_id or str(uuid.uuid5(uuid.NAMESPACE_OID, ",".join(ids)))
            key = f"{view.cdi_annotation_prefix}{CDI_ANNOTATION_PLUGIN}_{rid}"
            annotations[key] = ",".join(names)
        if "cdi-cri" in strategies:
            cdi_names = names

    for mode, members in modes:
        edits = mode.container_edits(resource, members)
        envs.update(edits.envs)
        mounts.extend(Mount(container_path=c, host_path=h) for c, h in edits.mounts)

    return ContainerAllocation(
        envs=envs,
        mounts=tuple(mounts),
        annotations=annotations,
        cdi_devices=cdi_names,
    )


def cdi_device_name(device_id: str) -> str:
    """The fully qualified CDI name upstream's CDI spec gives a GPU or MIG device."""
    return f"{CDI_VENDOR}/{CDI_CLASS}={device_id}"


def _modes(devices: Sequence[AdvertisedDevice]) -> list[tuple[SharingMode, list[AdvertisedDevice]]]:
    """The sharing modes of ``devices`` with the devices of each, in the devices' order."""
    groups: dict[str, list[AdvertisedDevice]] = {}
    for dev in devices:
        groups.setdefault(str(dev.sharing), []).append(dev)
    return [(mode_of(name), members) for name, members in groups.items()]
