"""The ``v1beta1.DevicePlugin`` service for one extended resource.

Every answer is computed from the node view returned by the ``view`` callable at call time, so
a health change or config reload is visible to the next Allocate without restarting anything;
``notify()`` wakes the ListAndWatch streams to resend the list.

The methods also work in-process: pass a protobuf request and ``context=None``.
``GetPreferredAllocation`` and ``Allocate`` then return the response or raise
:class:`kgpu.node.allocate.AllocationError` (over gRPC the same error aborts the call with
``INVALID_ARGUMENT`` and upstream's message). The simulator's kubelets call them this way so
they run the very code a real kubelet reaches through the socket.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import grpc

from kgpu.kubelet.nvidia_cdi import NodeDriver, pass_device_specs
from kgpu.kubelet.proto.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from kgpu.node.allocate import (
    AllocationError,
    DeviceNode,
    container_allocation,
    preferred_allocation,
)
from kgpu.node.model import NodeView, ResourceView

log = logging.getLogger(__name__)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
CDI_STRATEGIES = frozenset({"cdi-annotations", "cdi-cri"})
_STREAM_POLL_S = 0.5  # how often an idle stream checks that the kubelet is still there


def device_list(res: ResourceView | None) -> list[api_pb2.Device]:
    """The ListAndWatch payload for a resource (empty when the resource is gone)."""
    if res is None:
        return []
    out = []
    for dev in res.devices:
        topology = (
            api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=dev.numa_node)])
            if dev.numa_node is not None
            else None
        )
        out.append(
            api_pb2.Device(
                ID=dev.id, health=HEALTHY if dev.healthy else UNHEALTHY, topology=topology
            )
        )
    return out


class AllocateGuard(Protocol):
    """Who else may hold the node's devices (:class:`kgpu.drivers.ownership.GpuOwnership`):
    Allocate reserves the ids there before answering, and cancels them when it refuses."""

    def reserve(self, resource: str, ids: Sequence[str]) -> None:
        """Hold ``ids``, or raise :class:`AllocationError` saying who holds them."""
        ...

    def cancel(self, resource: str, ids: Sequence[str]) -> None: ...


class DevicePluginServicer(api_pb2_grpc.DevicePluginServicer):
    """Serves one resource of the node view returned by ``view``."""

    def __init__(
        self,
        resource: str,
        view: Callable[[], NodeView],
        driver: Callable[[], NodeDriver | None] | None = None,
        guard: AllocateGuard | None = None,
    ) -> None:
        self.resource = resource
        self._view = view
        self._guard = guard
        # the node's driver, for the device nodes passDeviceSpecs adds (None: a simulated node)
        self._driver = driver or (lambda: None)
        self._cond = threading.Condition()
        self._version = 0
        self._stopped = False
        self.streams = 0  # open ListAndWatch streams, for status and tests
        # since when no kubelet stream has been open (monotonic; None while one is, or before
        # the first): a kubelet that dropped us while our socket survived shows up here
        self.idle_since: float | None = None

    # -- change notification -------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    def notify(self) -> None:
        """The view may have changed: wake every stream to compare and resend."""
        with self._cond:
            self._version += 1
            self._cond.notify_all()

    def stop(self) -> None:
        """End every stream (the server is going away)."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def current(self) -> ResourceView | None:
        try:
            return self._view().resource(self.resource)
        except KeyError:
            return None

    # -- v1beta1.DevicePlugin ------------------------------------------------------------

    def GetDevicePluginOptions(
        self, request: api_pb2.Empty, context: Any
    ) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=True
        )

    def ListAndWatch(
        self, request: api_pb2.Empty, context: Any
    ) -> Iterator[api_pb2.ListAndWatchResponse]:
        with self._cond:
            self.streams += 1
            self.idle_since = None
        if context is not None:  # a kubelet that goes away wakes the stream at once
            context.add_callback(self._wake)
        try:
            last: list[api_pb2.Device] | None = None
            seen = -1
            while True:
                with self._cond:
                    while not self._stopped and self._version == seen:
                        self._cond.wait(_STREAM_POLL_S)
                        if context is not None and not context.is_active():
                            return
                    if self._stopped:
                        return
                    seen = self._version
                devices = device_list(self.current())
                if devices != last:
                    last = devices
                    yield api_pb2.ListAndWatchResponse(devices=devices)
        finally:
            with self._cond:
                self.streams -= 1
                if self.streams == 0 and not self._stopped:
                    self.idle_since = time.monotonic()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def GetPreferredAllocation(
        self, request: api_pb2.PreferredAllocationRequest, context: Any
    ) -> api_pb2.PreferredAllocationResponse:
        view = self._view()
        response = api_pb2.PreferredAllocationResponse()
        try:
            for creq in request.container_requests:
                ids = preferred_allocation(
                    view,
                    self.resource,
                    list(creq.available_deviceIDs),
                    list(creq.must_include_deviceIDs),
                    creq.allocation_size,
                )
                response.container_responses.add(deviceIDs=ids)
        except AllocationError as exc:
            _refuse(context, exc)
        return response

    def Allocate(self, request: api_pb2.AllocateRequest, context: Any) -> api_pb2.AllocateResponse:
        response = api_pb2.AllocateResponse()
        reserved: list[str] = []
        try:
            if self._guard is not None:  # one owner per GPU: held here before anyone sees it
                for creq in request.container_requests:
                    ids = list(creq.devices_ids)
                    self._guard.reserve(self.resource, ids)
                    reserved += ids
            view = self._view()
            for creq in request.container_requests:
                alloc = container_allocation(view, self.resource, list(creq.devices_ids))
                out = response.container_responses.add()
                out.envs.update(alloc.envs)
                out.annotations.update(alloc.annotations)
                for m in alloc.mounts:
                    out.mounts.add(
                        container_path=m.container_path,
                        host_path=m.host_path,
                        read_only=m.read_only,
                    )
                for d in alloc.devices:
                    out.devices.add(
                        container_path=d.container_path,
                        host_path=d.host_path,
                        permissions=d.permissions,
                    )
                for name in alloc.cdi_devices:
                    out.cdi_devices.add(name=name)
                for d in self._device_specs(view, list(creq.devices_ids)):
                    out.devices.add(
                        container_path=d.container_path,
                        host_path=d.host_path,
                        permissions=d.permissions,
                    )
        except AllocationError as exc:
            log.warning("refused Allocate for %s: %s", self.resource, exc)
            if self._guard is not None and reserved:
                self._guard.cancel(self.resource, reserved)
            _refuse(context, exc)
        return response

    def _device_specs(self, view: NodeView, ids: list[str]) -> tuple[DeviceNode, ...]:
        """``passDeviceSpecs``: the device nodes the kubelet gives the container itself, as
        upstream adds them: only when a non-CDI device-list strategy is in use."""
        if not view.pass_device_specs or not set(view.device_list_strategy) - CDI_STRATEGIES:
            return ()
        return pass_device_specs(view, ids, self._driver())

    def PreStartContainer(
        self, request: api_pb2.PreStartContainerRequest, context: Any
    ) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()


def _refuse(context: Any, exc: AllocationError) -> None:
    if context is None:
        raise exc
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
