"""Registering a device plugin with the kubelet's ``v1beta1.Registration`` service."""

from __future__ import annotations

from pathlib import Path

import grpc

from kgpu.kubelet.proto.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from kgpu.kubelet.sockets import unix_target as unix_target  # re-exported for older callers

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
DEVICE_PLUGINS_DIR = "device-plugins"


class RegistrationError(RuntimeError):
    """The kubelet could not be reached or refused the plugin."""


def register(
    kubelet_socket: Path,
    endpoint: str,
    resource: str,
    *,
    timeout_s: float = 5.0,
    preferred_allocation: bool = True,
) -> None:
    """Tell the kubelet that ``resource`` is served on ``endpoint`` (a bare socket file name in
    the kubelet's device-plugins directory). Call only once that socket serves: the kubelet
    dials back right away."""
    request = api_pb2.RegisterRequest(
        version=API_VERSION,
        endpoint=endpoint,
        resource_name=resource,
        options=api_pb2.DevicePluginOptions(
            pre_start_required=False,
            get_preferred_allocation_available=preferred_allocation,
        ),
    )
    try:
        with grpc.insecure_channel(unix_target(kubelet_socket)) as channel:
            api_pb2_grpc.RegistrationStub(channel).Register(
                request, timeout=timeout_s, wait_for_ready=True
            )
    except grpc.RpcError as exc:
        detail = exc.details() if hasattr(exc, "details") else str(exc)
        raise RegistrationError(
            f"registering {resource} with {kubelet_socket} failed: {detail}"
        ) from None
