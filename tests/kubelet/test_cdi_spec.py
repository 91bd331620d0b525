"""kgpu's CDI spec validation against its JSON Schema of the CDI specification and the CDI
library's version table: a spec kgpu accepts is one a runtime accepts, and the other way."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kgpu.kubelet import cdi

DATA = Path(__file__).parent / "data"
SCHEMA = json.loads((DATA / "cdi-spec.schema.json").read_text())
VERSIONS = yaml.safe_load((DATA / "cdi-versions.yaml").read_text())


def schema_errors(spec: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    return [e.message for e in validator.iter_errors(spec)]


GOOD: dict[str, Any] = {
    "cdiVersion": "0.6.0",
    "kind": "vendor.com/device",
    "devices": [
        {
            "name": "myDevice",
            "containerEdits": {
                "deviceNodes": [
                    {"hostPath": "/vendorroot/dev/card1", "path": "/dev/card1"},
                    {"path": "/dev/card2"},
                ]
            },
        }
    ],
    "containerEdits": {
        "env": ["FOO=CDI_SPEC", "BAR=BARVALUE1"],
        "deviceNodes": [{"path": "/dev/vendorctl", "uid": 1000, "gid": 1000}],
        "mounts": [
            {"hostPath": "/bin/vendorBin", "containerPath": "/bin/vendorBin"},
            {"hostPath": "/usr/lib/libVendor.so.0", "containerPath": "/usr/lib/libVendor.so.0"},
        ],
        "hooks": [
            {"hookName": "createContainer", "path": "/bin/vendor-hook"},
            {"hookName": "startContainer", "path": "/usr/bin/ldconfig", "timeout": 5},
        ],
    },
}


def mutate(path: str, value: Any) -> dict[str, Any]:
    """GOOD with the field at dotted ``path`` set to ``value`` (``...`` deletes it)."""
    spec = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node: Any = spec
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is ...:
        del node[int(last) if last.isdigit() else last]
    elif last.isdigit():
        node[int(last)] = value
    else:
        node[last] = value
    return spec


BAD = {
    "unknown top-level field": ("vendor", "x"),
    "no devices": ("devices", []),
    "kind without a class": ("kind", "vendor.com"),
    "class starting with a digit": ("kind", "vendor.com/1device"),
    "device name with a slash": ("devices.0.name", "a/b"),
    "device without edits": ("devices.0.containerEdits", {}),
    "unknown edit": ("containerEdits.devices", []),
    "env without =": ("containerEdits.env", ["FOO"]),
    "env starting with =": ("containerEdits.env", ["=x"]),
    "relative device path": ("containerEdits.deviceNodes.0.path", "dev/vendorctl"),
    "bad device type": ("containerEdits.deviceNodes.0.type", "x"),
    "bad permissions": ("containerEdits.deviceNodes.0.permissions", "rwx"),
    "negative uid": ("containerEdits.deviceNodes.0.uid", -1),
    "unknown device-node field": ("containerEdits.deviceNodes.0.mode", 1),
    "mount without hostPath": ("containerEdits.mounts.0.hostPath", ...),
    "relative mount target": ("containerEdits.mounts.0.containerPath", "bin"),
    "mount options not strings": ("containerEdits.mounts.0.options", [1]),
    "unknown hook point": ("containerEdits.hooks.0.hookName", "prestop"),
    "relative hook path": ("containerEdits.hooks.0.path", "bin/hook"),
    "zero timeout": ("containerEdits.hooks.1.timeout", 0),
    "hook env without =": ("containerEdits.hooks.0.env", ["DEBUG"]),
    "gids not integers": ("containerEdits.additionalGids", ["1"]),
}


def test_the_spec_examples_are_valid_to_both() -> None:
    assert cdi.validate_spec(GOOD) == []
    assert schema_errors(GOOD) == []


@pytest.mark.parametrize("case", sorted(BAD))
def test_kgpu_and_the_schema_refuse_the_same_specs(case: str) -> None:
    path, value = BAD[case]
    spec = mutate(path, value)
    assert schema_errors(spec), f"schema accepts: {case}"
    problems = cdi.validate_spec(spec)
    assert problems, f"kgpu accepts: {case}"
    # every problem names the field it is about
    assert all(":" in p for p in problems)


@pytest.mark.parametrize("case", VERSIONS["minimum"], ids=lambda c: c["doc"])
def test_minimum_version(case: dict[str, Any]) -> None:
    assert cdi.minimum_version(case["spec"]) == case["want"]


@pytest.mark.parametrize("case", VERSIONS["validate"], ids=lambda c: c["doc"])
def test_version_validation(case: dict[str, Any]) -> None:
    spec = {
        "cdiVersion": case["version"],
        "kind": "vendor.com/device",
        "devices": [{"name": "d", "containerEdits": {"env": ["A=1"]}}],
        "containerEdits": case.get("edits", {}),
    }
    problems = [p for p in cdi.validate_spec(spec) if p.startswith("cdiVersion")]
    if "error" in case:
        assert problems and case["error"] in problems[0]
    else:
        assert problems == []


def test_built_specs_carry_the_lowest_version_that_holds_them(tmp_path: Path) -> None:
    edits = cdi.ContainerEdits(
        env=("A=1",),
        device_nodes=(cdi.DeviceNode("/dev/nvidia0", "/run/nvidia/driver/dev/nvidia0"),),
        hooks=(cdi.Hook("createContainer", "/usr/bin/nvidia-cdi-hook", ("nvidia-cdi-hook", "x")),),
        mounts=(cdi.Mount("/usr/lib64/libcuda.so.1", "/usr/lib64/libcuda.so.1", ("ro",)),),
    )
    spec = cdi.build_spec("k8s.device-plugin.nvidia.com/gpu", [cdi.CdiDevice("0", edits)])
    assert spec["cdiVersion"] == "0.5.0"  # hostPath on a device node, a numeric device name
    for name in ("spec.yaml", "spec.json"):
        cdi.write_spec(tmp_path / name, spec)
        assert cdi.read_spec(tmp_path / name) == spec
        assert schema_errors(cdi.read_spec(tmp_path / name)) == []
    assert json.loads((tmp_path / "spec.json").read_text())["kind"] == spec["kind"]


def test_edits_read_back_from_a_spec_equal_the_edits_written() -> None:
    edits = cdi.ContainerEdits(
        env=("A=1",),
        device_nodes=(cdi.DeviceNode("/dev/x", "/h/dev/x", "rw", "c", 195, 0, 0o666, 0, 0),),
        mounts=(cdi.Mount("/h/a", "/a", ("ro", "rbind"), "bind"),),
        hooks=(cdi.Hook("createContainer", "/bin/h", ("h", "x"), ("D=1",), 10),),
        additional_gids=(44,),
    )
    assert cdi.ContainerEdits.from_dict(edits.to_dict()) == edits
    with pytest.raises(ValueError, match=r"containerEdits\.netDevices"):
        cdi.ContainerEdits.from_dict({"netDevices": [{"hostInterfaceName": "a", "name": "b"}]})
    with pytest.raises(ValueError, match=r"containerEdits\.env\[0\]"):
        cdi.ContainerEdits.from_dict({"env": ["nope"]})
