"""The committed stubs must be what the committed ``.proto`` files generate."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kgpu.kubelet import protogen


def test_committed_stubs_are_current() -> None:
    problems = protogen.stale()
    assert problems == [], (
        "generated kubelet stubs are stale; run `python -m kgpu.kubelet.protogen`:\n"
        + "\n".join(problems)
    )


def test_every_proto_has_its_stubs() -> None:
    protos = protogen.find_protos()
    assert any(p.parts[-3:] == ("deviceplugin", "v1beta1", "api.proto") for p in protos)
    for proto in protos:
        stem = proto.with_suffix("")
        for suffix in ("_pb2.py", "_pb2_grpc.py"):
            assert Path(f"{stem}{suffix}").exists(), f"{proto}: {suffix} missing"


def test_check_notices_an_edited_proto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stub generated from an older .proto is reported, so the check can actually fail."""
    fake_src = tmp_path / "src"
    root = fake_src / "kgpu" / "kubelet" / "proto"
    shutil.copytree(protogen.PROTO_ROOT / "deviceplugin", root / "deviceplugin")
    (root / "__init__.py").write_text("")
    monkeypatch.setattr(protogen, "SRC_ROOT", fake_src)
    assert protogen.stale(root) == []
    proto = root / "deviceplugin" / "v1beta1" / "api.proto"
    proto.write_text(proto.read_text().replace("bool pre_start_required = 1;", "bool x = 1;"))
    problems = protogen.stale(root)
    assert "kgpu/kubelet/proto/deviceplugin/v1beta1/api_pb2.py: stale" in problems


def test_method_paths_match_the_kubelet() -> None:
    from kgpu.kubelet.proto.deviceplugin.v1beta1 import api_pb2

    services = api_pb2.DESCRIPTOR.services_by_name
    assert services["Registration"].full_name == "v1beta1.Registration"
    assert sorted(m.name for m in services["DevicePlugin"].methods) == [
        "Allocate",
        "GetDevicePluginOptions",
        "GetPreferredAllocation",
        "ListAndWatch",
        "PreStartContainer",
    ]
    req = api_pb2.ContainerPreferredAllocationRequest
    assert req.DESCRIPTOR.fields_by_name["allocation_size"].number == 3
    assert api_pb2.ContainerAllocateResponse.DESCRIPTOR.fields_by_name["cdi_devices"].number == 5
