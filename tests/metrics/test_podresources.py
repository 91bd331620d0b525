"""The PodResources client against a kubelet stand-in over a real unix socket."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from kgpu.kubelet.podresources import (
    ClaimDevice,
    ContainerResources,
    DynamicClaim,
    PodResources,
    PodResourcesClient,
    parse_device_checkpoint,
    read_device_checkpoint,
)
from kgpu.testing.fake_podresources import FakePodResourcesServer

POD = PodResources(
    "default",
    "trainer",
    (
        ContainerResources(
            "main",
            (("nvidia.com/gpu", ("GPU-aaaa::0", "GPU-aaaa::1")),),
            (
                DynamicClaim(
                    "gpu-claim",
                    "default",
                    (
                        ClaimDevice(
                            "gpu.nvidia.com",
                            "node-a",
                            "gpu-1",
                            ("k8s.gpu.nvidia.com/device=gpu-1",),
                        ),
                    ),
                ),
            ),
        ),
        ContainerResources("sidecar"),
    ),
)


def test_list_get_and_allocatable_round_trip(tmp_path: Path) -> None:
    with FakePodResourcesServer(tmp_path, [POD, PodResources("default", "cpu-only")]) as server:
        server.set_allocatable([("nvidia.com/gpu", ["GPU-aaaa::0", "GPU-aaaa::1", "GPU-aaaa::2"])])
        client = PodResourcesClient.for_kubelet_root(tmp_path)
        try:
            assert client.socket_path == tmp_path / "pod-resources" / "kubelet.sock"
            assert client.list() == [POD]  # a pod holding nothing is not listed
            assert client.get("default", "trainer") == POD
            with pytest.raises(grpc.RpcError) as err:
                client.get("default", "missing")
            assert err.value.code() == grpc.StatusCode.NOT_FOUND
            assert client.allocatable() == [
                ("nvidia.com/gpu", ("GPU-aaaa::0", "GPU-aaaa::1", "GPU-aaaa::2"))
            ]
        finally:
            client.close()


def test_receive_limit_is_raised_past_grpcs_4mib_default(tmp_path: Path) -> None:
    """A busy node's List answer outgrows 4 MiB; dcgm-exporter's default limit fails there."""
    pods = [
        PodResources(
            "batch",
            f"job-{i:05d}",
            (
                ContainerResources(
                    "c", (("example.com/nic", tuple(f"nic-{i:05d}-{j:03d}" for j in range(160))),)
                ),
            ),
        )
        for i in range(2000)
    ]
    with FakePodResourcesServer(tmp_path, pods):
        small = PodResourcesClient.for_kubelet_root(tmp_path, max_receive_bytes=4 * 1024 * 1024)
        ours = PodResourcesClient.for_kubelet_root(tmp_path)
        try:
            with pytest.raises(grpc.RpcError) as err:
                small.list()
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert len(ours.list()) == 2000
        finally:
            small.close()
            ours.close()


def test_missing_socket_is_an_rpc_error(tmp_path: Path) -> None:
    client = PodResourcesClient.for_kubelet_root(tmp_path, timeout_s=0.5)
    try:
        with pytest.raises(grpc.RpcError):
            client.list()
    finally:
        client.close()


def test_device_checkpoint_both_layouts(tmp_path: Path) -> None:
    new = (
        '{"Data":{"PodDeviceEntries":[{"PodUID":"u1","ContainerName":"c","ResourceName":'
        '"nvidia.com/gpu","DeviceIDs":{"1":["GPU-b"],"0":["GPU-a"]},"AllocResp":""}],'
        '"RegisteredDevices":{}},"Checksum":1}'
    )
    old = (
        '{"Data":{"PodDeviceEntries":[{"PodUID":"u2","ContainerName":"d","ResourceName":'
        '"nvidia.com/gpu","DeviceIDs":["GPU-c"]}]}}'
    )
    (first,) = parse_device_checkpoint(new)
    assert (first.pod_uid, first.container, first.device_ids) == ("u1", "c", ("GPU-a", "GPU-b"))
    assert parse_device_checkpoint(old)[0].device_ids == ("GPU-c",)
    assert parse_device_checkpoint("not json") == []
    assert read_device_checkpoint(tmp_path) == []
