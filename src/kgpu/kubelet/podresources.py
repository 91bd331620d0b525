"""Client for the kubelet's PodResources API v1, and the kubelet's device checkpoint.

The kubelet serves PodResources on ``<kubelet-root>/pod-resources/kubelet.sock``: which pod and
container holds which device-plugin device ids (``List``), which devices exist
(``GetAllocatableResources``), one pod (``Get``), and the DRA devices of each container's
ResourceClaims (``dynamic_resources``). The metrics exporter uses it to put ``pod``,
``namespace`` and ``container`` labels on GPU series.

The client raises the gRPC receive limit to 64 MiB: a busy node's ``List`` answer outgrows
gRPC's 4 MiB default, which is what makes dcgm-exporter's scrapes fail there. Callers keep it
off the scrape path (see :class:`kgpu.metrics.attribution.AttributionCache`).

PodResources names pods but not their UIDs; the kubelet's device-manager checkpoint
(``<kubelet-root>/device-plugins/kubelet_internal_checkpoint``) names the pod UID and container
of every device-plugin allocation, so reading both joins a pod UID (what a process's cgroup
shows) to a pod name through the device ids they share.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from kgpu.kubelet.proto.podresources.v1 import api_pb2 as pb
from kgpu.kubelet.proto.podresources.v1 import api_pb2_grpc as pb_grpc
from kgpu.kubelet.sockets import unix_target

SOCKET_RELATIVE = Path("pod-resources") / "kubelet.sock"
CHECKPOINT_RELATIVE = Path("device-plugins") / "kubelet_internal_checkpoint"
MAX_RECEIVE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ClaimDevice:
    """One DRA device allocated to a claim: driver, pool and device name identify it."""

    driver: str
    pool: str
    device: str
    cdi_devices: tuple[str, ...] = ()


@dataclass(frozen=True)
class DynamicClaim:
    name: str
    namespace: str
    devices: tuple[ClaimDevice, ...] = ()


@dataclass(frozen=True)
class ContainerResources:
    name: str
    devices: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (resource name, device ids)
    claims: tuple[DynamicClaim, ...] = ()

    def device_ids(self) -> Iterable[tuple[str, str]]:
        """(resource, id) pairs of every device-plugin device the container holds."""
        for resource, ids in self.devices:
            for device_id in ids:
                yield resource, device_id


@dataclass(frozen=True)
class PodResources:
    namespace: str
    name: str
    containers: tuple[ContainerResources, ...] = ()


@dataclass(frozen=True)
class CheckpointEntry:
    """One device-plugin allocation as the kubelet checkpoints it."""

    pod_uid: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


def from_proto(msg: Any) -> PodResources:
    """Our plain value from a ``v1.PodResources`` message."""
    containers = []
    for c in msg.containers:
        devices = tuple((d.resource_name, tuple(d.device_ids)) for d in c.devices)
        claims = tuple(
            DynamicClaim(
                name=dr.claim_name,
                namespace=dr.claim_namespace,
                devices=tuple(
                    ClaimDevice(
                        driver=cr.driver_name,
                        pool=cr.pool_name,
                        device=cr.device_name,
                        cdi_devices=tuple(cdi.name for cdi in cr.cdi_devices),
                    )
                    for cr in dr.claim_resources
                ),
            )
            for dr in c.dynamic_resources
        )
        containers.append(ContainerResources(c.name, devices, claims))
    return PodResources(msg.namespace, msg.name, tuple(containers))


def to_proto(pod: PodResources) -> Any:
    """A ``v1.PodResources`` message for a plain value (what a kubelet would send)."""
    return pb.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            pb.ContainerResources(
                name=c.name,
                devices=[
                    pb.ContainerDevices(resource_name=resource, device_ids=list(ids))
                    for resource, ids in c.devices
                ],
                dynamic_resources=[
                    pb.DynamicResource(
                        claim_name=claim.name,
                        claim_namespace=claim.namespace,
                        claim_resources=[
                            pb.ClaimResource(
                                driver_name=d.driver,
                                pool_name=d.pool,
                                device_name=d.device,
                                cdi_devices=[pb.CDIDevice(name=n) for n in d.cdi_devices],
                            )
                            for d in claim.devices
                        ],
                    )
                    for claim in c.claims
                ],
            )
            for c in pod.containers
        ],
    )


class PodResourcesClient:
    """A blocking client over the kubelet's unix socket. Every call raises ``grpc.RpcError``
    on failure (socket missing, kubelet restarting, deadline exceeded)."""

    def __init__(
        self,
        socket_path: Path | str,
        timeout_s: float = 5.0,
        max_receive_bytes: int = MAX_RECEIVE_BYTES,
    ) -> None:
        self.socket_path = Path(socket_path)
        self.timeout_s = timeout_s
        self._channel = grpc.insecure_channel(
            unix_target(self.socket_path),
            options=[("grpc.max_receive_message_length", max_receive_bytes)],
        )
        self._stub = pb_grpc.PodResourcesListerStub(self._channel)

    @classmethod
    def for_kubelet_root(cls, kubelet_root: Path | str, **kwargs: Any) -> PodResourcesClient:
        return cls(Path(kubelet_root) / SOCKET_RELATIVE, **kwargs)

    def list(self) -> list[PodResources]:
        reply = self._stub.List(pb.ListPodResourcesRequest(), timeout=self.timeout_s)
        return [from_proto(p) for p in reply.pod_resources]

    def get(self, namespace: str, name: str) -> PodResources:
        reply = self._stub.Get(
            pb.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace),
            timeout=self.timeout_s,
        )
        return from_proto(reply.pod_resources)

    def allocatable(self) -> builtins.list[tuple[str, tuple[str, ...]]]:
        """(resource, device ids) the kubelet can allocate from device plugins."""
        reply = self._stub.GetAllocatableResources(
            pb.AllocatableResourcesRequest(), timeout=self.timeout_s
        )
        return [(d.resource_name, tuple(d.device_ids)) for d in reply.devices]

    def close(self) -> None:
        self._channel.close()


def parse_device_checkpoint(text: str) -> list[CheckpointEntry]:
    """Entries of the kubelet's ``kubelet_internal_checkpoint`` JSON.

    ``DeviceIDs`` is a map of NUMA node to ids since Kubernetes 1.20 and a plain list before;
    both are read. Malformed content yields no entries (the caller keeps what it had).
    """
    try:
        doc = json.loads(text)
    except ValueError:
        return []
    data = doc.get("Data") if isinstance(doc, dict) else None
    entries = data.get("PodDeviceEntries") if isinstance(data, dict) else None
    out: list[CheckpointEntry] = []
    for entry in entries or []:
        if not isinstance(entry, dict):
            continue
        raw = entry.get("DeviceIDs")
        ids: list[str] = []
        if isinstance(raw, dict):
            for numa in sorted(raw, key=str):
                ids.extend(str(i) for i in raw[numa] or [])
        elif isinstance(raw, list):
            ids.extend(str(i) for i in raw)
        out.append(
            CheckpointEntry(
                pod_uid=str(entry.get("PodUID", "")),
                container=str(entry.get("ContainerName", "")),
                resource=str(entry.get("ResourceName", "")),
                device_ids=tuple(ids),
            )
        )
    return out


def read_device_checkpoint(kubelet_root: Path | str) -> list[CheckpointEntry]:
    """The checkpoint under a kubelet root; no entries when it does not exist."""
    path = Path(kubelet_root) / CHECKPOINT_RELATIVE
    try:
        return parse_device_checkpoint(path.read_text(encoding="utf-8"))
    except OSError:
        return []
