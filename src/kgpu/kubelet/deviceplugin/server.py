"""One gRPC server per extended resource, each on its own unix socket.

The kubelet identifies a plugin by socket: it dials ``<kubelet-root>/device-plugins/<endpoint>``
named in the registration, and after a restart it deletes every socket there. A
:class:`PluginServer` therefore owns exactly one socket file, remembers its identity (inode and
change time, :func:`kgpu.kubelet.sockets.identity`) so it can tell "my socket was deleted" from
"someone else's socket took the name", and can be restarted on its own without disturbing the
other resources' streams.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import grpc

from kgpu.kubelet.deviceplugin.registration import DEVICE_PLUGINS_DIR, KUBELET_SOCKET, register
from kgpu.kubelet.deviceplugin.servicer import AllocateGuard, DevicePluginServicer
from kgpu.kubelet.nvidia_cdi import NodeDriver
from kgpu.kubelet.proto.deviceplugin.v1beta1 import api_pb2_grpc
from kgpu.kubelet.sockets import Identity, identity, serve_unix, wait_listening
from kgpu.node.model import NodeView

log = logging.getLogger(__name__)


def socket_name(resource: str) -> str:
    """``nvidia.com/gpu`` -> ``kgpu-nvidia.com-gpu.sock``."""
    return "kgpu-" + resource.replace("/", "-") + ".sock"


class PluginServer:
    """Serves one resource's :class:`DevicePluginServicer` on one socket."""

    def __init__(
        self,
        resource: str,
        view: Callable[[], NodeView],
        kubelet_root: Path,
        *,
        max_workers: int = 4,
        driver: Callable[[], NodeDriver | None] | None = None,
        guard: AllocateGuard | None = None,
    ) -> None:
        self.resource = resource
        self.kubelet_root = Path(kubelet_root)
        self.plugin_dir = self.kubelet_root / DEVICE_PLUGINS_DIR
        self.endpoint = socket_name(resource)
        self.socket_path = self.plugin_dir / self.endpoint
        self.servicer = DevicePluginServicer(resource, view, driver, guard)
        self._max_workers = max_workers
        self._server: grpc.Server | None = None
        self._identity: Identity | None = None
        self.registered = False

    def start(self, ready_timeout_s: float = 5.0) -> None:
        """Listen on the socket and return once it accepts calls."""
        self._server = serve_unix(
            self.socket_path,
            lambda server: api_pb2_grpc.add_DevicePluginServicer_to_server(self.servicer, server),
            workers=self._max_workers,
            thread_name_prefix="dp",
            options=[("grpc.so_reuseport", 0)],
        )
        self._identity = identity(self.socket_path)
        try:
            wait_listening(self.socket_path, ready_timeout_s)
        except BaseException:  # the caller drops us: leave no server threads or socket behind
            self.stop(grace_s=0)
            raise
        log.info("serving %s on %s", self.resource, self.socket_path)

    def register(self, timeout_s: float = 5.0) -> None:
        register(
            self.plugin_dir / KUBELET_SOCKET, self.endpoint, self.resource, timeout_s=timeout_s
        )
        self.registered = True
        log.info("registered %s with the kubelet", self.resource)

    def socket_intact(self) -> bool:
        """False once the socket file we created is gone or replaced (kubelet restart)."""
        return self._identity is not None and identity(self.socket_path) == self._identity

    def notify(self) -> None:
        self.servicer.notify()

    def stop(self, grace_s: float = 0.2) -> None:
        """Close streams, stop serving and remove our socket (not a stranger's)."""
        self.servicer.stop()
        if self._server is not None:
            self._server.stop(grace_s).wait()
            self._server = None
        if self.socket_intact():
            self.socket_path.unlink(missing_ok=True)
        self.registered = False
        log.info("stopped serving %s", self.resource)
