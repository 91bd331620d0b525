"""Which pod holds which GPU: the answer the exporter labels series with, and how a kubelet
device id maps back to the physical GPU or MIG device a series is about.

The kubelet reports device-plugin device ids and DRA devices per container; what a series is
about is a physical GPU or MIG device. :func:`kgpu.drivers.attribution.build_attribution` joins
the two (it reads the kubelet's PodResources, so it lives with the drivers), purely:

* device-plugin ids resolve through the node view the device plugin serves (whole GPUs, MIG
  devices, ``<id>::<n>`` time-slicing/MPS replicas, renamed resources, index ids); ids the view
  does not know fall back to the id itself (``GPU-…``/``MIG-…`` UUIDs with any ``::<n>``
  suffix stripped, ``<index>`` and ``<gpu>:<mig>`` index ids);
* DRA devices (``dynamic_resources``) resolve through an explicit ``(driver, pool, device) ->
  UUID`` map when the DRA driver supplies one, then a GPU/MIG UUID inside a CDI device name,
  then NVIDIA's device names (``gpu-<minor>``, ``gpu-<minor>-mig-…-<start>-<size>`` or
  ``…-<profile-id>-<start>``);
* pod UIDs (what a process's cgroup names) map to pods through the kubelet's device
  checkpoint, joined to PodResources on the (container, device id) pairs both list.

:class:`~kgpu.drivers.attribution.AttributionCache` refreshes this in a background thread so
that no scrape ever waits on the kubelet.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kgpu.dra.allocated_shares import ClaimShare
from kgpu.hardware.model import Machine
from kgpu.metrics.cgroups import CgroupIdentity
from kgpu.metrics.sources import PodRef
from kgpu.node.ids import strip_replica
from kgpu.node.model import NodeView

log = logging.getLogger(__name__)

DraKey = tuple[str, str, str]  # (driver, pool, device)

UUID_RE = re.compile(r"(?:GPU|MIG)-[0-9a-fA-F-]{8,}")
_MIG_INDEX_RE = re.compile(r"^(\d+):(\d+)$")


@dataclass(frozen=True)
class Attribution:
    """Who holds what, at one refresh.

    ``holders``: GPU or MIG UUID -> the containers holding it (one per time-slicing/MPS replica
    holder, sorted). ``pod_uids``: pod UID -> (namespace, name). ``uid_containers``:
    (pod UID, device UUID) -> container names of that pod holding that device. ``shares``:
    GPU UUID -> the DRA claims holding shares of it (consumable capacity), from the driver.
    """

    holders: Mapping[str, tuple[PodRef, ...]] = field(default_factory=dict)
    pod_uids: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    uid_containers: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    unresolved: tuple[str, ...] = ()
    shares: Mapping[str, tuple[ClaimShare, ...]] = field(default_factory=dict)

    def owner(self, device_uuid: str) -> PodRef | None:
        """The one container holding a device, or None when none or several do (a shared
        device's DCGM series stay unattributed; per-pod series cover it)."""
        found = self.holders.get(device_uuid, ())
        return found[0] if len(found) == 1 else None

    def resolve_process(self, ident: CgroupIdentity | None, device_uuid: str) -> PodRef | None:
        """The container a process on ``device_uuid`` belongs to, or None when unknown."""
        holders = self.holders.get(device_uuid, ())
        if ident is not None and ident.pod_uid in self.pod_uids:
            namespace, name = self.pod_uids[ident.pod_uid]
            names = self.uid_containers.get((ident.pod_uid, device_uuid))
            if names:
                return PodRef(namespace, name, names[0])
            same_pod = [h for h in holders if (h.namespace, h.name) == (namespace, name)]
            if same_pod:
                return same_pod[0]
            return PodRef(namespace, name, "")
        pods = {(h.namespace, h.name) for h in holders}
        if len(pods) != 1:
            return None
        if ident is not None:
            # A process of a pod we cannot name: it is the holder's only if the holder's UID is
            # unknown too (else it is some other pod using the GPU without holding it).
            known = {v: k for k, v in self.pod_uids.items()}
            holder_uid = known.get(next(iter(pods)))
            if holder_uid is not None and holder_uid != ident.pod_uid:
                return None
        return holders[0]


def device_index(view: NodeView | None) -> dict[str, str]:
    """Every advertised device id -> the UUID of the GPU or MIG device behind it."""
    if view is None:
        return {}
    return {dev.id: dev.backing_uuid for res in view.resources for dev in res.devices}


def known_uuids(machine: Machine | None) -> set[str]:
    if machine is None:
        return set()
    out = set()
    for gpu in machine.gpus:
        out.add(gpu.uuid)
        out.update(m.uuid for m in gpu.mig_devices)
    return out


def resolve_device_id(
    device_id: str, index: Mapping[str, str], machine: Machine | None
) -> str | None:
    """The GPU/MIG UUID behind a device-plugin id, or None."""
    if device_id in index:
        return index[device_id]
    base = strip_replica(device_id)
    if base in index:
        return index[base]
    if machine is None:
        return base if UUID_RE.fullmatch(base) else None
    if base in known_uuids(machine):
        return base
    if base.isdigit():
        for gpu in machine.gpus:
            if gpu.index == int(base):
                return gpu.uuid
    match = _MIG_INDEX_RE.match(base)
    if match:
        parent, mig = int(match.group(1)), int(match.group(2))
        for gpu in machine.gpus:
            if gpu.index == parent:
                for m in gpu.mig_devices:
                    if m.index == mig:
                        return m.uuid
    return None
