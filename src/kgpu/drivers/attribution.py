"""Who holds which GPU, from the kubelet: PodResources and the device checkpoint joined to the
node view (:func:`build_attribution`, pure), kept fresh off the scrape path by
:class:`AttributionCache`. This joins the kubelet shell (PodResources) to the metrics shell,
so it is a driver-layer part; the metrics exporter only consumes its
:class:`~kgpu.metrics.attribution.Attribution`.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from kgpu.dra.allocated_shares import ClaimShare
from kgpu.dra.devices import gi_profile_id, parse_mig_name, profile_slug
from kgpu.hardware.mig import geometry_for
from kgpu.hardware.model import Machine
from kgpu.kubelet.podresources import CheckpointEntry, ClaimDevice, PodResources
from kgpu.metrics.attribution import (
    UUID_RE,
    Attribution,
    DraKey,
    device_index,
    known_uuids,
    resolve_device_id,
)
from kgpu.metrics.sources import PodRef
from kgpu.node.model import NodeView

log = logging.getLogger(__name__)

_DRA_GPU_RE = re.compile(r"^gpu-(\d+)$")


def _dra_mig_uuid(name: str, machine: Machine) -> str | None:
    """The MIG device a ``gpu.nvidia.com`` MIG device name stands for: today's
    ``gpu-<minor>-mig-<profile>-<GI profile id>-<start>`` or the 25.8 driver's
    ``gpu-<minor>-mig-<GI profile id>-<start>-<size>``, parent found by minor number."""
    parsed = parse_mig_name(name)
    if parsed is None:
        return None
    parent = next((g for g in machine.gpus if g.minor == parsed.parent_minor), None)
    if parent is None:
        return None
    geometry = geometry_for(parent)
    for mig in parent.mig_devices:
        if mig.placement_start != parsed.start:
            continue
        if parsed.size is not None and mig.placement_size != parsed.size:
            continue
        if parsed.profile is not None and profile_slug(mig.profile) != parsed.profile:
            continue
        if gi_profile_id(mig.profile, mig.placement_size, geometry) == parsed.profile_id:
            return mig.uuid
    return None


def resolve_dra_device(
    device: ClaimDevice, machine: Machine | None, explicit: Mapping[DraKey, str]
) -> str | None:
    """The GPU/MIG UUID behind a DRA device, or None: the driver's own (driver, pool, device)
    map first, then a UUID in the device's CDI names, then the device name as
    ``gpu.nvidia.com`` forms it (``gpu-<minor>``, MIG names as :func:`_dra_mig_uuid` reads
    them)."""
    key = (device.driver, device.pool, device.device)
    if key in explicit:
        return explicit[key]
    known = known_uuids(machine)
    for cdi in device.cdi_devices:
        for found in UUID_RE.finditer(cdi):
            if found.group(0) in known:
                return found.group(0)
    if machine is None:
        return None
    match = _DRA_GPU_RE.match(device.device)
    if match:
        minor = int(match.group(1))
        return next((g.uuid for g in machine.gpus if g.minor == minor), None)
    return _dra_mig_uuid(device.device, machine)


def build_attribution(
    pods: Sequence[PodResources],
    checkpoint: Sequence[CheckpointEntry] = (),
    view: NodeView | None = None,
    machine: Machine | None = None,
    dra_devices: Mapping[DraKey, str] | None = None,
) -> Attribution:
    """Join PodResources, the device checkpoint and the node view (pure)."""
    machine = machine if machine is not None else (view.machine if view is not None else None)
    index = device_index(view)
    explicit = dra_devices or {}
    holders: dict[str, set[PodRef]] = {}
    # (container, device id) -> (namespace, name): the join key with the checkpoint.
    by_container_id: dict[tuple[str, str], tuple[str, str]] = {}
    unresolved: list[str] = []
    resource_names = {res.name for res in view.resources} if view is not None else set()
    for pod in pods:
        for container in pod.containers:
            ref = PodRef(pod.namespace, pod.name, container.name)
            for resource, device_id in container.device_ids():
                by_container_id[(container.name, device_id)] = (pod.namespace, pod.name)
                uuid = resolve_device_id(device_id, index, machine)
                if uuid is None:
                    if resource in resource_names or resource.startswith("nvidia.com/"):
                        unresolved.append(device_id)
                    continue
                holders.setdefault(uuid, set()).add(ref)
            for claim in container.claims:
                for dev in claim.devices:
                    uuid = resolve_dra_device(dev, machine, explicit)
                    if uuid is None:
                        unresolved.append(f"{dev.driver}/{dev.pool}/{dev.device}")
                        continue
                    holders.setdefault(uuid, set()).add(ref)
    pod_uids: dict[str, tuple[str, str]] = {}
    uid_containers: dict[tuple[str, str], set[str]] = {}
    for entry in checkpoint:
        for device_id in entry.device_ids:
            owner = by_container_id.get((entry.container, device_id))
            if owner is None:
                continue
            pod_uids[entry.pod_uid] = owner
            uuid = resolve_device_id(device_id, index, machine)
            if uuid is not None:
                uid_containers.setdefault((entry.pod_uid, uuid), set()).add(entry.container)
    return Attribution(
        holders={k: tuple(sorted(v)) for k, v in holders.items()},
        pod_uids=pod_uids,
        uid_containers={k: tuple(sorted(v)) for k, v in uid_containers.items()},
        unresolved=tuple(sorted(set(unresolved))),
    )


class AttributionCache:
    """Keeps an :class:`Attribution` fresh from a background thread.

    ``fetch_pods`` calls the kubelet (``PodResourcesClient.list``); ``fetch_checkpoint`` reads
    its device checkpoint. A failed refresh keeps the last good answer and reports the error
    through ``on_error`` (the exporter counts it). A new node view re-joins the last answer at
    once, without calling the kubelet.
    """

    def __init__(
        self,
        fetch_pods: Callable[[], Sequence[PodResources]],
        fetch_checkpoint: Callable[[], Sequence[CheckpointEntry]] = lambda: (),
        interval_s: float = 10.0,
        on_error: Callable[[str, str], None] = lambda op, reason: None,
    ) -> None:
        self._fetch_pods = fetch_pods
        self._fetch_checkpoint = fetch_checkpoint
        self.interval_s = interval_s
        self._on_error = on_error
        self._lock = threading.Lock()
        self._pods: Sequence[PodResources] = ()
        self._checkpoint: Sequence[CheckpointEntry] = ()
        self._view: NodeView | None = None
        self._machine: Machine | None = None
        self._dra: dict[DraKey, str] = {}
        # GPU UUID -> the DRA claims holding shares of it, read by ``fetch_shares`` (the DRA
        # driver's prepared claims) on each refresh, never during a scrape
        self._fetch_shares: Callable[[], Mapping[str, tuple[ClaimShare, ...]]] | None = None
        self._shares: Mapping[str, tuple[ClaimShare, ...]] = {}
        self._current = Attribution()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def current(self) -> Attribution:
        return self._current

    def set_view(self, view: NodeView | None) -> None:
        with self._lock:
            self._view = view
            self._rebuild()

    def set_machine(self, machine: Machine | None) -> None:
        """The hardware to resolve ids against when there is no node view."""
        with self._lock:
            self._machine = machine
            self._rebuild()

    def set_dra_devices(self, mapping: Mapping[DraKey, str]) -> None:
        """Exact (driver, pool, device) -> GPU/MIG UUID names from the DRA driver."""
        with self._lock:
            self._dra = dict(mapping)
            self._rebuild()

    def set_share_source(
        self, fetch: Callable[[], Mapping[str, tuple[ClaimShare, ...]]] | None
    ) -> None:
        """Where each refresh reads the GPU shares the DRA driver prepared (GPU UUID -> the
        claims holding them): the ``kgpu_dra_share_*`` series."""
        with self._lock:
            self._fetch_shares = fetch
        self._refresh_shares()

    def _refresh_shares(self) -> None:
        fetch = self._fetch_shares
        if fetch is None:
            return
        try:
            shares = dict(fetch())
        except Exception as exc:  # a store error: keep the last answer
            self._on_error("dra-shares", type(exc).__name__)
            log.debug("reading the DRA driver's shares failed: %s", exc)
            return
        with self._lock:
            self._shares = shares
            self._rebuild()

    def _rebuild(self) -> None:
        built = build_attribution(
            self._pods, self._checkpoint, self._view, self._machine, self._dra
        )
        self._current = replace(built, shares=self._shares) if self._shares else built

    def refresh(self) -> bool:
        """One round against the kubelet; True when it answered."""
        try:
            pods = list(self._fetch_pods())
        except Exception as exc:  # a gRPC error, a missing socket: keep the last answer
            self._on_error("PodResources.List", type(exc).__name__)
            log.debug("PodResources refresh failed: %s", exc)
            return False
        try:
            checkpoint = list(self._fetch_checkpoint())
        except Exception as exc:
            self._on_error("kubelet_internal_checkpoint", type(exc).__name__)
            checkpoint = list(self._checkpoint)
        with self._lock:
            self._pods = pods
            self._checkpoint = checkpoint
            self._rebuild()
        self._refresh_shares()
        return True

    def _run(self) -> None:
        while True:
            self.refresh()
            if self._stop.wait(self.interval_s):
                return

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="kgpu-podresources", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
