"""Registering a device plugin with the kubelet's ``v1beta1.Registration`` service."""

from __future__ import annotations

import random
from dataclasses import dataclass
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
    channel: grpc.Channel | None = None,
) -> None:
    """Tell the kubelet that ``resource`` is served on ``endpoint`` (a bare socket file name in
    the kubelet's device-plugins directory). Call only once that socket serves: the kubelet
    dials back right away. With ``channel`` (to ``kubelet_socket``) the caller can cut a hung
    call short by closing it."""
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
        if channel is not None:
            api_pb2_grpc.RegistrationStub(channel).Register(
                request, timeout=timeout_s, wait_for_ready=True
            )
            return
        with grpc.insecure_channel(unix_target(kubelet_socket)) as own:
            api_pb2_grpc.RegistrationStub(own).Register(
                request, timeout=timeout_s, wait_for_ready=True
            )
    except grpc.RpcError as exc:
        detail = exc.details() if hasattr(exc, "details") else str(exc)
        raise RegistrationError(
            f"registering {resource} with {kubelet_socket} failed: {detail}"
        ) from None
    except ValueError as exc:  # the channel was closed under us (the plugin is stopping)
        raise RegistrationError(f"registering {resource} was cut short: {exc}") from None


@dataclass
class Backoff:
    """Exponential backoff with jitter between attempts at one thing (registering one
    resource): ``initial_s`` after the first failure, doubling up to ``maximum_s``, each delay
    shortened by a random fraction up to ``jitter`` so that plugins refused together do not
    retry in step. ``reset()`` after a success or when the situation changed (a new kubelet)."""

    initial_s: float = 0.1
    maximum_s: float = 10.0
    factor: float = 2.0
    jitter: float = 0.5
    failures: int = 0

    def next_delay(self, rng: random.Random | None = None) -> float:
        """The wait before the next attempt, counting one more failure."""
        base = min(self.maximum_s, self.initial_s * self.factor**self.failures)
        self.failures += 1
        return base * (1.0 - self.jitter * (rng or random).random())

    def reset(self) -> None:
        self.failures = 0
