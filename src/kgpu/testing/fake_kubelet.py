"""A stand-in for the kubelet's device manager, speaking the real protocol over real sockets.

It follows what the kubelet does (pkg/kubelet/cm/devicemanager), as far as a device plugin can
observe:

* It serves ``v1beta1.Registration`` on ``<root>/device-plugins/kubelet.sock`` and accepts only
  ``version == "v1beta1"`` and a bare endpoint file name.
* After a successful Register it dials ``<root>/device-plugins/<endpoint>`` at once, calls
  ``GetDevicePluginOptions`` and then keeps one ``ListAndWatch`` stream open, replacing its
  device list for the resource with every message (the kubelet treats each message as the
  complete list). A second registration for the same resource replaces the first endpoint.
* :meth:`restart` does what a kubelet restart does to plugins: it stops serving, deletes every
  file in ``device-plugins/`` except directories and ``kubelet_internal_checkpoint``, and
  serves a fresh ``kubelet.sock``; plugins must notice and register again.
* :meth:`allocate` and :meth:`preferred` call the plugin the way the kubelet does at pod
  admission (one container request per call). Allocations already made are remembered in
  :attr:`allocations` the way the kubelet's checkpoint keeps them across restarts.

Misbehaviour on demand, for reliability tests: :attr:`register_mode` ``"hang"`` makes
``Register`` block (until the mode changes, the fake stops or ``hang_limit_s`` passes, the way a
wedged kubelet holds the call), ``"refuse"`` answers every ``Register`` with ``UNAVAILABLE``.
Every call, whatever its outcome, is counted in :attr:`register_calls`.

It does not model pod admission, the topology manager or the checkpoint file's format.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from kgpu.kubelet.deviceplugin.registration import API_VERSION, KUBELET_SOCKET
from kgpu.kubelet.proto.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from kgpu.kubelet.sockets import serve_unix, unix_target

CHECKPOINT = "kubelet_internal_checkpoint"


@dataclass
class Endpoint:
    """One registered plugin as the kubelet keeps it."""

    resource: str
    endpoint: str
    options: api_pb2.DevicePluginOptions
    channel: grpc.Channel
    stub: api_pb2_grpc.DevicePluginStub
    devices: dict[str, str] = field(default_factory=dict)  # id -> health
    updates: int = 0
    stream: Any = None
    connected: bool = True


REGISTER_MODES = ("ok", "hang", "refuse")


class FakeKubelet:
    """Plays the kubelet's device manager for one node rooted at ``root``."""

    def __init__(self, root: Path, *, hang_limit_s: float = 30.0) -> None:
        self.root = Path(root)
        self.plugin_dir = self.root / "device-plugins"
        self.socket = self.plugin_dir / KUBELET_SOCKET
        self.endpoints: dict[str, Endpoint] = {}
        self.registrations: list[tuple[str, str]] = []  # (resource, endpoint) in order
        self.allocations: list[tuple[str, tuple[str, ...], api_pb2.ContainerAllocateResponse]] = []
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None
        self._mode = "ok"
        self._stopped = False
        self.hang_limit_s = hang_limit_s
        self.register_calls: list[tuple[float, str, str]] = []  # (monotonic, resource, mode)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def register_mode(self) -> str:
        return self._mode

    @register_mode.setter
    def register_mode(self, mode: str) -> None:
        if mode not in REGISTER_MODES:
            raise ValueError(f"register_mode {mode!r}: one of {', '.join(REGISTER_MODES)}")
        with self._cond:
            self._mode = mode
            self._cond.notify_all()  # hung calls go on under the new mode

    def start(self) -> FakeKubelet:
        self._server = serve_unix(
            self.socket,
            lambda server: api_pb2_grpc.add_RegistrationServicer_to_server(
                _Registration(self), server
            ),
            workers=16,
            thread_name_prefix="fake-kubelet",
        )
        self._stopped = False
        return self

    def stop(self) -> None:
        with self._cond:
            self._stopped = True  # hung Register calls return
            self._cond.notify_all()
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None
        with self._cond:
            endpoints = list(self.endpoints.values())
            self.endpoints.clear()
            self._cond.notify_all()
        for ep in endpoints:
            self._close(ep)

    def restart(self, *, wipe: bool = True) -> None:
        """Stop, wipe the socket directory as the kubelet does, and serve again.
        ``wipe=False`` leaves the plugins' sockets alone: a restart that a plugin can only
        notice by ``kubelet.sock`` being a new file (or by its streams closing)."""
        self.stop()
        for entry in self.plugin_dir.iterdir():
            if not wipe and entry.name != KUBELET_SOCKET:
                continue
            if entry.name == CHECKPOINT or entry.is_dir():
                continue
            entry.unlink(missing_ok=True)
        self.start()

    def forget(self, resource: str) -> None:
        """Drop a plugin's registration and close its stream, as the kubelet does with an
        endpoint it considers gone; the plugin's socket stays."""
        with self._cond:
            ep = self.endpoints.pop(resource, None)
            self._cond.notify_all()
        if ep is not None:
            self._close(ep)

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what the kubelet saw -------------------------------------------------------------

    def resources(self) -> list[str]:
        with self._cond:
            return sorted(r for r, ep in self.endpoints.items() if ep.connected)

    def devices(self, resource: str) -> dict[str, str]:
        """The latest device list (id -> "Healthy"/"Unhealthy") the plugin sent."""
        with self._cond:
            ep = self.endpoints.get(resource)
            return dict(ep.devices) if ep else {}

    def healthy(self, resource: str) -> list[str]:
        return sorted(i for i, h in self.devices(resource).items() if h == "Healthy")

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
        """Wait until ``predicate()`` holds (re-checked on every registration or update)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if predicate():
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))

    # -- calls into the plugin ------------------------------------------------------------

    def _stub(self, resource: str) -> api_pb2_grpc.DevicePluginStub:
        with self._cond:
            ep = self.endpoints.get(resource)
        if ep is None:
            raise KeyError(f"no plugin registered for {resource}")
        return ep.stub

    def allocate(
        self, resource: str, ids: list[str], timeout_s: float = 5.0
    ) -> api_pb2.ContainerAllocateResponse:
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)]
        )
        response = self._stub(resource).Allocate(request, timeout=timeout_s)
        container = response.container_responses[0]
        self.allocations.append((resource, tuple(ids), container))
        return container

    def preferred(
        self,
        resource: str,
        available: list[str],
        must_include: list[str],
        size: int,
        timeout_s: float = 5.0,
    ) -> list[str]:
        request = api_pb2.PreferredAllocationRequest(
            container_requests=[
                api_pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available,
                    must_include_deviceIDs=must_include,
                    allocation_size=size,
                )
            ]
        )
        response = self._stub(resource).GetPreferredAllocation(request, timeout=timeout_s)
        return list(response.container_responses[0].deviceIDs)

    # -- registration handling ------------------------------------------------------------

    def _misbehave(self, resource: str) -> str | None:
        """Play the mode: block while hanging; the refusal to send, or None to go on."""
        deadline = time.monotonic() + self.hang_limit_s
        with self._cond:
            self.register_calls.append((time.monotonic(), resource, self._mode))
            self._cond.notify_all()
            while self._mode == "hang" and not self._stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "the kubelet hung and gave up"
                self._cond.wait(left)
            if self._stopped:
                return "the kubelet is stopping"
            if self._mode == "refuse":
                return "the kubelet refuses registrations (fake, register_mode=refuse)"
        return None

    def _on_register(self, request: api_pb2.RegisterRequest) -> str | None:
        """Validate as the kubelet does; return an error message or None."""
        if request.version != API_VERSION:
            return (
                f"Requested device plugin version {request.version!r} is not supported;"
                f" supported: {API_VERSION}"
            )
        if not request.endpoint or "/" in request.endpoint:
            return f"endpoint {request.endpoint!r} must be a file name in {self.plugin_dir}"
        if "/" not in request.resource_name:
            return f"invalid extended resource name {request.resource_name!r}"
        with self._cond:
            self.registrations.append((request.resource_name, request.endpoint))
            self._cond.notify_all()
        threading.Thread(
            target=self._connect, args=(request,), daemon=True, name="fake-kubelet-dial"
        ).start()
        return None

    def _connect(self, request: api_pb2.RegisterRequest) -> None:
        channel = grpc.insecure_channel(unix_target(self.plugin_dir / request.endpoint))
        stub = api_pb2_grpc.DevicePluginStub(channel)
        try:
            # the kubelet dials a new endpoint blocking, for up to 10 s (grpc.WithBlock): a
            # first connection attempt that fails under load is retried, not fatal
            options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=10, wait_for_ready=True)
            stream = stub.ListAndWatch(api_pb2.Empty())
        except grpc.RpcError:
            channel.close()
            return
        ep = Endpoint(
            resource=request.resource_name,
            endpoint=request.endpoint,
            options=options,
            channel=channel,
            stub=stub,
            stream=stream,
        )
        with self._cond:
            old = self.endpoints.get(ep.resource)
            self.endpoints[ep.resource] = ep
            self._cond.notify_all()
        if old is not None:
            self._close(old)
        try:
            for message in stream:
                with self._cond:
                    ep.devices = {d.ID: d.health for d in message.devices}
                    ep.updates += 1
                    self._cond.notify_all()
        except grpc.RpcError:
            pass
        with self._cond:
            ep.connected = False
            self._cond.notify_all()

    @staticmethod
    def _close(ep: Endpoint) -> None:
        if ep.stream is not None:
            ep.stream.cancel()
        ep.channel.close()


class _Registration(api_pb2_grpc.RegistrationServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    def Register(self, request: api_pb2.RegisterRequest, context: Any) -> api_pb2.Empty:
        refusal = self._kubelet._misbehave(request.resource_name)
        if refusal is not None:
            context.abort(grpc.StatusCode.UNAVAILABLE, refusal)
        problem = self._kubelet._on_register(request)
        if problem is not None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        return api_pb2.Empty()
