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
* ``cdi-annotations`` adds ``cdi.k8s.io/nvidia-device-plugin_<response id>`` with the
  comma-joined CDI names ``k8s.device-plugin.nvidia.com/gpu=<id>``; ``cdi-cri`` sends the same
  names as ``cdi_devices``.
* MPS replicas get ``CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe`` and ``<mpsRoot>/shm``
  mounted at ``/dev/shm``. Upstream mounts one pipe directory per resource there (its one control
  daemon covers all of the resource's GPUs); kgpu runs one daemon per GPU and mounts the pipe
  directory of the allocated replica's GPU (``<mpsRoot>/<resource>/<gpu index>/pipe``, from the
  view) at the same container path, so images written for upstream work unchanged. A client
  process can only talk to one control daemon, which is why a request for MPS replicas of more
  than one GPU is refused with upstream's ``failRequestsGreaterThanOne`` wording even when that
  flag is turned off (upstream forces it on for MPS). Upstream enforces the per-client limits
  only through the control daemon's defaults; kgpu also sets
  ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``
  (``0=<MiB>M``: the container sees its one GPU as ordinal 0), which MPS clients honour and
  which can only lower the daemon's defaults, so a client cannot ask for more than its share.
"""

from __future__ import annotations

import itertools
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kgpu.errors import KgpuError
from kgpu.node.ids import is_replica, strip_replica
from kgpu.node.model import AdvertisedDevice, MpsLimits, NodeView, ResourceView, Sharing

VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNTS_HOST_PATH = "/dev/null"
VOLUME_MOUNTS_CONTAINER_ROOT = "/var/run/nvidia-container-devices"
CDI_VENDOR = "k8s.device-plugin.nvidia.com"
CDI_CLASS = "gpu"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
CDI_ANNOTATION_PLUGIN = "nvidia-device-plugin"
MPS_CONTAINER_ROOT = "/mps"
MPS_SHM_CONTAINER_PATH = "/dev/shm"

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
    pack_replicas: bool = False,
) -> list[str]:
    """The ids the plugin would pick: ``must_include`` first, then the closest others.

    Whole GPUs: the subset with the most NVLinks between its members, then the fewest NUMA nodes,
    then the lowest GPU indices. Replicas: spread over the GPUs with the fewest replicas already
    handed out (``pack_replicas`` packs them onto as few GPUs as possible instead). MIG devices:
    as few parent GPUs as possible. Unknown ids in ``available`` are ignored; the answer never
    holds more than ``size`` ids unless ``must_include`` alone is larger.
    """
    res = _resource(view, resource)
    by_id = {dev.id: dev for dev in res.devices}
    chosen = list(dict.fromkeys(must_include))
    if size <= len(chosen):
        return chosen
    taken = set(chosen)
    candidates = [by_id[i] for i in dict.fromkeys(available) if i in by_id and i not in taken]
    need = size - len(chosen)
    if need >= len(candidates):
        return chosen + [d.id for d in candidates]
    fixed = [by_id[i] for i in chosen if i in by_id]
    if res.sharing is not Sharing.NONE or any(d.replica is not None for d in res.devices):
        picked = _pick_replicas(res, candidates, fixed, need, available, pack_replicas)
    elif any(d.mig_uuid for d in res.devices):
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
    """Greedy by load: a GPU's load is its replicas not offered as available (handed out
    already) plus those picked in this request."""
    offered = set(available)
    load: Counter[int] = Counter()
    for dev in res.devices:
        if dev.id not in offered:
            load[dev.gpu_index] += 1
    for dev in fixed:
        load[dev.gpu_index] += 1
    remaining = list(candidates)
    picked: list[AdvertisedDevice] = []
    # MPS replicas of one request must share a GPU (a client talks to one GPU's daemon): stay
    # on a GPU the request already holds, else one with room for the whole request.
    mps = any(d.mps is not None for d in res.devices)
    free: Counter[int] = Counter(d.gpu_index for d in candidates)
    held = {d.gpu_index for d in fixed}
    for step in range(need):
        left = need - step

        def key(d: AdvertisedDevice, left: int = left) -> tuple[int, int, int, int]:
            busy = load[d.gpu_index]
            apart = 0
            if mps:
                apart = 2 * (d.gpu_index not in held) + (free[d.gpu_index] < left)
            return (apart, -busy if pack else busy, d.gpu_index, d.replica or 0)

        best = min(remaining, key=key)
        remaining.remove(best)
        picked.append(best)
        load[best.gpu_index] += 1
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

    Raises :class:`AllocationError` for what upstream refuses: more than one replica when
    ``failRequestsGreaterThanOne`` is set, ids the resource does not advertise, and (kgpu only)
    ids currently Unhealthy. ``response_id`` names the CDI annotation; by default it is derived
    from the ids so the same request gives the same answer.
    """
    res = _resource(view, resource)
    by_id = {dev.id: dev for dev in res.devices}
    too_large = (
        f"request for '{resource}: {len(ids)}' too large: "
        "maximum request size for shared resources is 1"
    )
    if res.fail_requests_greater_than_one and any(is_replica(i) for i in ids) and len(ids) > 1:
        raise AllocationError(too_large)
    devices: list[AdvertisedDevice] = []
    for device_id in ids:
        dev = by_id.get(device_id)
        if dev is None:
            raise AllocationError(
                f"invalid allocation request for '{resource}': unknown device: {device_id}"
            )
        if not dev.healthy:
            raise AllocationError(
                f"invalid allocation request for '{resource}': unhealthy device: {device_id}"
            )
        devices.append(dev)
    mps_gpus = {d.gpu_uuid for d in devices if d.mps is not None}
    if len(mps_gpus) > 1:
        raise AllocationError(
            f"{too_large} (MPS replicas of {len(mps_gpus)} GPUs: a client talks to one GPU's "
            "MPS control daemon)"
        )

    visible = list(dict.fromkeys(strip_replica(d.visible_id) for d in devices))
    strategies = set(view.device_list_strategy)
    envs: dict[str, str] = {}
    mounts: list[Mount] = []
    annotations: dict[str, str] = {}
    cdi_names: tuple[str, ...] = ()

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
    if strategies & {"cdi-annotations", "cdi-cri"}:
        names = tuple(cdi_device_name(i) for i in visible)
        if "cdi-annotations" in strategies:
            rid = response_id or str(uuid.uuid5(uuid.NAMESPACE_OID, ",".join(ids)))
            annotations[f"{CDI_ANNOTATION_PREFIX}{CDI_ANNOTATION_PLUGIN}_{rid}"] = ",".join(names)
        if "cdi-cri" in strategies:
            cdi_names = names

    mps = next((d.mps for d in devices if d.mps is not None), None)
    if mps is not None:
        envs.update(mps_client_envs(resource, mps))
        mounts.extend(mps_mounts(resource, mps))

    return ContainerAllocation(
        envs=envs,
        mounts=tuple(mounts),
        annotations=annotations,
        cdi_devices=cdi_names,
    )


def cdi_device_name(device_id: str) -> str:
    """The fully qualified CDI name upstream's CDI spec gives a GPU or MIG device."""
    return f"{CDI_VENDOR}/{CDI_CLASS}={device_id}"


def mps_shm_directory(limits: MpsLimits) -> str:
    """Host directory shared as ``/dev/shm`` by the daemons and their clients: ``<mpsRoot>/shm``."""
    if limits.shm_directory:
        return limits.shm_directory
    # Hand-made limits without it: <root>/<resource...>/[<gpu>/]pipe -> <root>/shm is not
    # recoverable in general; the pipe directory's grandparent is the best guess.
    return f"{limits.pipe_directory.rstrip('/').rsplit('/', 2)[0]}/shm"


def mps_container_pipe(resource: str) -> str:
    """Where clients find the pipe: ``/mps/<resource>/pipe``, upstream's container path."""
    return f"{MPS_CONTAINER_ROOT}/{resource}/pipe"


def mps_client_envs(resource: str, limits: MpsLimits) -> dict[str, str]:
    """The environment an MPS client of one GPU gets (its GPU is ordinal 0 in the container)."""
    return {
        "CUDA_MPS_PIPE_DIRECTORY": mps_container_pipe(resource),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(limits.active_thread_percentage),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={limits.pinned_memory_limit_mib}M",
    }


def mps_mounts(resource: str, limits: MpsLimits) -> list[Mount]:
    """The GPU's daemon pipe directory at upstream's container path, and the shared shm."""
    return [
        Mount(container_path=mps_container_pipe(resource), host_path=limits.pipe_directory),
        Mount(container_path=MPS_SHM_CONTAINER_PATH, host_path=mps_shm_directory(limits)),
    ]
