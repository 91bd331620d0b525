"""The gRPC shell of one DRA driver: its DRAPlugin socket and its registration socket.

Layout and protocol follow the kubelet (and Kubernetes' kubeletplugin helper that DRA drivers
use): the plugin serves both ``v1.DRAPlugin`` and ``v1beta1.DRAPlugin`` on
``<kubelet-root>/plugins/<driver>/dra.sock`` and the plugin-registration service on
``<kubelet-root>/plugins_registry/<driver>-reg.sock``. The kubelet's plugin watcher notices the
registration socket, calls ``GetInfo`` (type ``DRAPlugin``, name = driver, endpoint, the
services as supported versions, newest first, from which the kubelet picks the first it knows),
and reports the result with ``NotifyRegistrationStatus``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from pathlib import Path
from typing import Any

import grpc

from kgpu.kubelet.dra.handler import ClaimRef
from kgpu.kubelet.dra.plugin import DraPlugin
from kgpu.kubelet.proto.dra.v1 import api_pb2 as v1_pb2
from kgpu.kubelet.proto.dra.v1 import api_pb2_grpc as v1_grpc
from kgpu.kubelet.proto.dra.v1beta1 import api_pb2 as v1beta1_pb2
from kgpu.kubelet.proto.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from kgpu.kubelet.proto.pluginregistration.v1 import api_pb2 as reg_pb2
from kgpu.kubelet.proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from kgpu.kubelet.sockets import Identity, identity, serve_unix

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
#: Newest first: the kubelet takes the first entry it supports. Every modelled release's kubelet
#: (:mod:`kgpu.releases`: ``v1beta1`` in 1.32-1.33, ``v1`` from 1.34, still ``v1beta1`` too in
#: 1.37) finds one of these. kgpu does not serve ``v1alpha4.Node`` (1.31's) nor, yet, a
#: ``DRAResourceHealth`` service: the kubelet picks one only from the registered services, so a
#: 1.36+ kubelet (ResourceHealthStatus on) opens no health stream to kgpu's drivers.
SUPPORTED_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")


def plugin_dir(kubelet_root: Path, driver: str) -> Path:
    return kubelet_root / "plugins" / driver


def dra_socket(kubelet_root: Path, driver: str) -> Path:
    return plugin_dir(kubelet_root, driver) / "dra.sock"


def registration_socket(kubelet_root: Path, driver: str) -> Path:
    return kubelet_root / "plugins_registry" / f"{driver}-reg.sock"


def _refs(claims: Any) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.uid, c.name) for c in claims]


class _DraServicer:
    """NodePrepareResources / NodeUnprepareResources for one protobuf version (v1 and v1beta1
    have identical messages, so one implementation serves both with the version's module)."""

    def __init__(self, plugin: DraPlugin, pb2: Any) -> None:
        self._plugin = plugin
        self._pb2 = pb2

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        pb2 = self._pb2
        response = pb2.NodePrepareResourcesResponse()
        for uid, result in self._plugin.prepare(_refs(request.claims)).items():
            entry = response.claims[uid]
            if result.error:
                entry.error = result.error
                continue
            for dev in result.devices:
                entry.devices.append(
                    pb2.Device(
                        request_names=list(dev.request_names),
                        pool_name=dev.pool_name,
                        device_name=dev.device_name,
                        cdi_device_ids=list(dev.cdi_device_ids),
                    )
                )
        return response

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        pb2 = self._pb2
        response = pb2.NodeUnprepareResourcesResponse()
        for uid, error in self._plugin.unprepare(_refs(request.claims)).items():
            response.claims[uid].error = error
        return response


class V1Servicer(_DraServicer, v1_grpc.DRAPluginServicer):
    def __init__(self, plugin: DraPlugin) -> None:
        super().__init__(plugin, v1_pb2)


class V1beta1Servicer(_DraServicer, v1beta1_grpc.DRAPluginServicer):
    def __init__(self, plugin: DraPlugin) -> None:
        super().__init__(plugin, v1beta1_pb2)


class RegistrationServicer(reg_grpc.RegistrationServicer):
    """Answers the kubelet's plugin watcher and remembers what it said."""

    def __init__(self, driver: str, endpoint: Path) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.registered = threading.Event()
        self.error = ""

    def GetInfo(self, request: Any, context: grpc.ServicerContext) -> Any:
        return reg_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=self.driver,
            endpoint=str(self.endpoint),
            supported_versions=list(SUPPORTED_SERVICES),
        )

    def NotifyRegistrationStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.plugin_registered:
            self.error = ""
            self.registered.set()
            log.info("%s: registered with the kubelet", self.driver)
        else:
            self.error = request.error
            self.registered.clear()
            log.error("%s: the kubelet refused the registration: %s", self.driver, request.error)
        return reg_pb2.RegistrationStatusResponse()


class DriverServer:
    """Both sockets of one driver; ``start`` serves DRAPlugin first, then registers."""

    def __init__(self, plugin: DraPlugin, kubelet_root: Path) -> None:
        self.plugin = plugin
        self.driver = plugin.driver
        kubelet_root = kubelet_root.absolute()  # the kubelet dials the endpoint GetInfo names
        self.socket = dra_socket(kubelet_root, self.driver)
        self.registration_socket = registration_socket(kubelet_root, self.driver)
        self.registration = RegistrationServicer(self.driver, self.socket)
        self._dra: grpc.Server | None = None
        self._reg: grpc.Server | None = None
        self._dra_id: Identity | None = None
        self._reg_id: Identity | None = None

    def _serve_dra(self) -> grpc.Server:
        def add_dra(server: grpc.Server) -> None:
            v1_grpc.add_DRAPluginServicer_to_server(V1Servicer(self.plugin), server)
            v1beta1_grpc.add_DRAPluginServicer_to_server(V1beta1Servicer(self.plugin), server)

        server = serve_unix(self.socket, add_dra, workers=4)
        self._dra_id = identity(self.socket)
        return server

    def start(self) -> None:
        self._dra = self._serve_dra()
        try:
            self._reg = self._serve_registration()
        except BaseException:  # the component never learns of us: leave nothing serving
            self._dra.stop(grace=None)
            self._dra = None
            self.socket.unlink(missing_ok=True)
            raise
        log.info(
            "%s: serving %s, registering at %s", self.driver, self.socket, self.registration_socket
        )

    def ensure_serving(self) -> list[str]:
        """Re-create whichever of our sockets something removed or replaced; the names of
        those re-created ([] when both are intact).

        A new DRAPlugin socket comes with a new registration socket too: the kubelet learns
        about plugins only from registration sockets it sees appear, and registering again
        makes it dial the endpoint anew."""
        if self._dra is None or self._reg is None:
            return []
        redone = []
        if identity(self.socket) != self._dra_id:
            self._dra.stop(grace=None)
            self._dra = self._serve_dra()
            redone.append(self.socket.name)
        if redone or identity(self.registration_socket) != self._reg_id:
            self._reg.stop(grace=None)
            self.registration.registered.clear()
            self._reg = self._serve_registration()
            redone.append(self.registration_socket.name)
        return redone

    def ensure_registered(self) -> bool:
        """:meth:`ensure_serving`, True when anything had to be re-created."""
        return bool(self.ensure_serving())

    def _serve_registration(self) -> grpc.Server:
        server = serve_unix(
            self.registration_socket,
            lambda server: reg_grpc.add_RegistrationServicer_to_server(self.registration, server),
            workers=2,
        )
        self._reg_id = identity(self.registration_socket)
        return server

    def stop(self) -> None:
        """Deregister first (socket removed: the kubelet stops routing to us), then stop."""
        for server, path, ident in (
            (self._reg, self.registration_socket, self._reg_id),
            (self._dra, self.socket, self._dra_id),
        ):
            if server is not None:
                server.stop(grace=1.0).wait(2.0)
            if ident is not None and identity(path) == ident:  # ours, not a successor's
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        self._reg = self._dra = None
