"""A stand-in for the kubelet's PodResources endpoint, for tests and demos without a kubelet.

:class:`FakePodResourcesServer` serves the real ``v1.PodResourcesLister`` service over gRPC on a
real unix socket (by default ``<kubelet-root>/pod-resources/kubelet.sock``) from a pod list the
test sets. It follows the kubelet's behaviour where an exporter can notice it:

* ``List`` returns every pod with its containers, device-plugin devices (resource name + device
  ids, replicas such as ``GPU-…::3`` as they were allocated) and DRA ``dynamic_resources``;
  like the kubelet, it lists only pods that hold something, in a stable order;
* ``Get`` answers one pod, and NOT_FOUND for a pod it does not know (the kubelet's
  ``pod <ns>/<name> not found`` error);
* ``GetAllocatableResources`` returns the devices set with :meth:`set_allocatable`;
* the socket directory is created like the kubelet does, and the socket file removed on stop.

Optionally it also writes the kubelet's device checkpoint
(``device-plugins/kubelet_internal_checkpoint``) for pods given a UID, in the kubelet's JSON
layout (``Data.PodDeviceEntries[].{PodUID,ContainerName,ResourceName,DeviceIDs{numa:[ids]}}``),
which the exporter reads to join pod UIDs to pods.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc

from kgpu.kubelet.podresources import (
    CHECKPOINT_RELATIVE,
    SOCKET_RELATIVE,
    PodResources,
    to_proto,
)
from kgpu.kubelet.proto.podresources.v1 import api_pb2 as pb
from kgpu.kubelet.proto.podresources.v1 import api_pb2_grpc as pb_grpc
from kgpu.kubelet.sockets import serve_unix


class _Servicer(pb_grpc.PodResourcesListerServicer):
    def __init__(self, owner: FakePodResourcesServer) -> None:
        self.owner = owner

    def List(self, request: Any, context: Any) -> Any:
        self.owner.calls.append("List")
        pods = [p for p in self.owner.pods() if any(c.devices or c.claims for c in p.containers)]
        return pb.ListPodResourcesResponse(pod_resources=[to_proto(p) for p in pods])

    def Get(self, request: Any, context: Any) -> Any:
        self.owner.calls.append("Get")
        for pod in self.owner.pods():
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return pb.GetPodResourcesResponse(pod_resources=to_proto(pod))
        context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"pod {request.pod_namespace}/{request.pod_name} not found",
        )

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        self.owner.calls.append("GetAllocatableResources")
        return pb.AllocatableResourcesResponse(
            devices=[
                pb.ContainerDevices(resource_name=resource, device_ids=list(ids))
                for resource, ids in self.owner.allocatable
            ]
        )


class FakePodResourcesServer:
    """Serve a pod list as the kubelet's PodResources API on a unix socket."""

    def __init__(self, kubelet_root: Path | str, pods: Iterable[PodResources] = ()) -> None:
        self.kubelet_root = Path(kubelet_root)
        self.socket_path = self.kubelet_root / SOCKET_RELATIVE
        self._lock = threading.Lock()
        self._pods: list[PodResources] = list(pods)
        self.allocatable: list[tuple[str, tuple[str, ...]]] = []
        self.calls: list[str] = []
        self._server: grpc.Server | None = None

    def pods(self) -> list[PodResources]:
        with self._lock:
            return list(self._pods)

    def set_pods(self, pods: Iterable[PodResources]) -> None:
        with self._lock:
            self._pods = list(pods)

    def set_allocatable(self, devices: Iterable[tuple[str, Sequence[str]]]) -> None:
        self.allocatable = [(resource, tuple(ids)) for resource, ids in devices]

    def write_checkpoint(self, uids: Mapping[tuple[str, str], str]) -> Path:
        """Write the device checkpoint for pods whose (namespace, name) has a UID in ``uids``."""
        entries = []
        for pod in self.pods():
            uid = uids.get((pod.namespace, pod.name))
            if uid is None:
                continue
            for container in pod.containers:
                for resource, ids in container.devices:
                    entries.append(
                        {
                            "PodUID": uid,
                            "ContainerName": container.name,
                            "ResourceName": resource,
                            "DeviceIDs": {"0": list(ids)},
                            "AllocResp": "",
                        }
                    )
        path = self.kubelet_root / CHECKPOINT_RELATIVE
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 0}
        path.write_text(json.dumps(doc), encoding="utf-8")
        return path

    def start(self) -> FakePodResourcesServer:
        self._server = serve_unix(
            self.socket_path,
            lambda server: pb_grpc.add_PodResourcesListerServicer_to_server(
                _Servicer(self), server
            ),
            workers=4,
        )
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
            self._server = None
        if self.socket_path.exists():
            self.socket_path.unlink()

    def __enter__(self) -> FakePodResourcesServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
