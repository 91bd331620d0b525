"""Offline versions of the API server's CEL compile check and the GPU driver's webhook."""

from __future__ import annotations

from kgpu.dra.checks import dra_object_problems

BAD_CEL = "device.attributes['gpu.nvidia.com'].productName ==== 'x'"
BAD_PARAMS = {
    "driver": "gpu.nvidia.com",
    "parameters": {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 150}},
    },
}


def test_template_selectors_and_parameters_are_checked_at_their_paths() -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "firstAvailable": [
                                {
                                    "name": "h100",
                                    "deviceClassName": "gpu.nvidia.com",
                                    "selectors": [{"cel": {"expression": BAD_CEL}}],
                                }
                            ],
                        }
                    ],
                    "config": [{"requests": ["gpu"], "opaque": BAD_PARAMS}],
                }
            }
        },
    }
    problems = dra_object_problems(template)
    paths = [p.path for p in problems]
    assert paths == [
        "spec.spec.devices.requests[0].firstAvailable[0].selectors[0].cel.expression",
        "spec.spec.devices.config[0].opaque.parameters.sharing.mpsConfig."
        "defaultActiveThreadPercentage",
    ]
    assert problems[0].message.startswith("CEL does not compile")


def test_valid_class_and_other_drivers_parameters_pass() -> None:
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
            "config": [{"opaque": {"driver": "other.example.com", "parameters": {"x": 1}}}],
        },
    }
    assert dra_object_problems(device_class) == []
    pod = {"apiVersion": "v1", "kind": "Pod", "spec": {"selectors": "whatever"}}
    assert dra_object_problems(pod) == []
