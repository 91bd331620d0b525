"""A plugin server and the fake kubelet talking over real unix sockets."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from kgpu.kubelet.deviceplugin.server import PluginServer, socket_name
from kgpu.kubelet.deviceplugin.servicer import DevicePluginServicer
from kgpu.kubelet.proto.deviceplugin.v1beta1 import api_pb2
from kgpu.node.allocate import AllocationError
from kgpu.node.model import NodeView
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.views import gpu_uuid, make_machine, make_view, replicas, whole_gpus

MACHINE = make_machine(4, nvlink_pairs=[(0, 1, 12), (2, 3, 12)], numa=[0, 0, 1, 1])


class Holder:
    """The agent's role in miniature: a current view other threads can swap."""

    def __init__(self, view: NodeView) -> None:
        self.view = view
        self.lock = threading.Lock()

    def __call__(self) -> NodeView:
        with self.lock:
            return self.view


@pytest.fixture
def short_root() -> Iterator[Path]:
    """Unix socket paths are limited to 107 bytes: keep the root short."""
    path = Path(tempfile.mkdtemp(prefix="kgk", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_in_process_calls_work_without_a_context() -> None:
    view = make_view(MACHINE, [replicas(MACHINE, 2, fail_requests_greater_than_one=True)])
    servicer = DevicePluginServicer("nvidia.com/gpu", lambda: view)
    req = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[f"{gpu_uuid(2)}::1"])]
    )
    resp = servicer.Allocate(req, None)
    assert resp.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == gpu_uuid(2)
    bad = api_pb2.AllocateRequest(
        container_requests=[
            api_pb2.ContainerAllocateRequest(devices_ids=[f"{gpu_uuid(2)}::1", f"{gpu_uuid(2)}::0"])
        ]
    )
    with pytest.raises(AllocationError, match="maximum request size for shared resources is 1"):
        servicer.Allocate(bad, None)
    first = next(servicer.ListAndWatch(api_pb2.Empty(), None))
    assert len(first.devices) == 8 and first.devices[0].topology.nodes[0].ID == 0


def test_register_serve_allocate_and_health_updates(short_root: Path) -> None:
    holder = Holder(make_view(MACHINE, [whole_gpus(MACHINE)]))
    with FakeKubelet(short_root) as kubelet:
        server = PluginServer("nvidia.com/gpu", holder, short_root)
        server.start()
        server.register()
        assert kubelet.registrations == [("nvidia.com/gpu", socket_name("nvidia.com/gpu"))]
        assert kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/gpu")) == 4)

        got = kubelet.preferred("nvidia.com/gpu", [gpu_uuid(i) for i in range(4)], [gpu_uuid(3)], 2)
        assert got == [gpu_uuid(3), gpu_uuid(2)]
        alloc = kubelet.allocate("nvidia.com/gpu", [gpu_uuid(3)])
        assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == gpu_uuid(3)

        with pytest.raises(grpc.RpcError) as err:
            kubelet.allocate("nvidia.com/gpu", ["GPU-unknown"])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "unknown device: GPU-unknown" in (err.value.details() or "")

        with holder.lock:
            holder.view = holder.view.with_health(frozenset({gpu_uuid(1)}))
        server.notify()
        assert kubelet.wait_for(
            lambda: kubelet.devices("nvidia.com/gpu").get(gpu_uuid(1)) == "Unhealthy"
        )
        server.stop()
        assert not server.socket_path.exists()


def test_kubelet_restart_wipes_plugin_sockets(short_root: Path) -> None:
    holder = Holder(make_view(MACHINE, [whole_gpus(MACHINE)]))
    with FakeKubelet(short_root) as kubelet:
        server = PluginServer("nvidia.com/gpu", holder, short_root)
        server.start()
        server.register()
        (short_root / "device-plugins" / "mps").mkdir()
        kubelet.restart()
        assert not server.socket_intact()
        assert (short_root / "device-plugins" / "mps").is_dir()
        server.stop()
        again = PluginServer("nvidia.com/gpu", holder, short_root)
        again.start()
        again.register()
        assert kubelet.wait_for(lambda: len(kubelet.healthy("nvidia.com/gpu")) == 4)
        assert len(kubelet.registrations) == 2  # history survives the restart
        again.stop()


def test_fake_kubelet_refuses_a_wrong_version(short_root: Path) -> None:
    from kgpu.kubelet.deviceplugin import registration

    with FakeKubelet(short_root):
        old = registration.API_VERSION
        registration.API_VERSION = "v1alpha"
        try:
            with pytest.raises(registration.RegistrationError, match="not supported"):
                registration.register(
                    short_root / "device-plugins" / "kubelet.sock", "x.sock", "nvidia.com/gpu"
                )
        finally:
            registration.API_VERSION = old


def test_a_server_that_never_becomes_ready_leaves_no_socket_behind(
    short_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kgpu.kubelet.deviceplugin import server as server_module

    def never_ready(path: Path, timeout_s: float = 5.0) -> None:
        raise TimeoutError(f"{path} does not accept connections")

    monkeypatch.setattr(server_module, "wait_listening", never_ready)
    server = PluginServer(
        "nvidia.com/gpu", Holder(make_view(MACHINE, [whole_gpus(MACHINE)])), short_root
    )
    with pytest.raises(TimeoutError):
        server.start()
    assert not server.socket_path.exists()
    assert server._server is None  # stopped, not left serving on a file nobody knows
