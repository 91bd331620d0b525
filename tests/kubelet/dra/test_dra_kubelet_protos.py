"""The wire names the kubelet calls must be exactly upstream's, and every kubelet API kgpu
ships must load into one process without symbol clashes."""

from __future__ import annotations

import importlib

from kgpu.kubelet.proto.dra.v1 import api_pb2 as v1
from kgpu.kubelet.proto.dra.v1beta1 import api_pb2 as v1beta1
from kgpu.kubelet.proto.pluginregistration.v1 import api_pb2 as reg


def methods(module: object, service: str) -> set[str]:
    svc = module.DESCRIPTOR.services_by_name[service]  # type: ignore[attr-defined]
    return {f"/{svc.full_name}/{m.name}" for m in svc.methods}


def test_method_paths_match_the_kubelet() -> None:
    for version, module in (("v1", v1), ("v1beta1", v1beta1)):
        assert methods(module, "DRAPlugin") == {
            f"/k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin/NodePrepareResources",
            f"/k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin/NodeUnprepareResources",
        }
    assert methods(reg, "Registration") == {
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
    }


def test_field_numbers_are_upstreams() -> None:
    for module in (v1, v1beta1):
        device = module.Device.DESCRIPTOR
        assert {f.name: f.number for f in device.fields} == {
            "request_names": 1,
            "pool_name": 2,
            "device_name": 3,
            "cdi_device_ids": 4,
        }
        claim = module.Claim.DESCRIPTOR
        assert {f.name: f.number for f in claim.fields} == {"namespace": 1, "uid": 2, "name": 3}
        assert module.NodePrepareResourceResponse.DESCRIPTOR.fields_by_name["error"].number == 2
    info = reg.PluginInfo.DESCRIPTOR
    assert {f.name: f.number for f in info.fields} == {
        "type": 1,
        "name": 2,
        "endpoint": 3,
        "supported_versions": 4,
    }


def test_all_kubelet_apis_load_together() -> None:
    for name in (
        "kgpu.kubelet.proto.deviceplugin.v1beta1.api_pb2",
        "kgpu.kubelet.proto.podresources.v1.api_pb2",
    ):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:  # another helper's API not generated yet
            continue
