"""CDI specs that carry the driver: common edits from a driver root or the toolkit's own spec,
in DRA claim specs and in the device plugin's spec, checked against the CDI JSON Schema."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from fake_driver_root import VERSION, lay_out_driver

from kgpu.config.loader import load_config_strings
from kgpu.drivers.gpu import GpuHandler
from kgpu.hardware.mig import apply_layout
from kgpu.hardware.model import Machine
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet import cdi
from kgpu.kubelet.dra.handler import ClaimInfo
from kgpu.kubelet.driver_root import DriverRoot, discover
from kgpu.kubelet.nvidia_cdi import (
    DEFAULT_HOOK_PATH,
    DEVICE_PLUGIN_SPEC,
    HookOptions,
    NodeDriver,
    device_paths,
    driver_edits,
    for_backend,
    pass_device_specs,
    write_device_plugin_spec,
)
from kgpu.node.allocate import cdi_device_name, container_allocation
from kgpu.node.model import NodeView
from kgpu.node.view import build_node_view
from kgpu.testing.fake_nvml import FakeNvml

DATA = Path(__file__).parent / "data"
SCHEMA = json.loads((DATA / "cdi-spec.schema.json").read_text())
LIB = "/usr/lib/x86_64-linux-gnu"


def assert_valid(spec: dict[str, Any]) -> None:
    assert cdi.validate_spec(spec) == []
    jsonschema.Draft202012Validator(SCHEMA).validate(spec)


def node_driver(root: Path, **kwargs: Any) -> NodeDriver:
    return NodeDriver(
        root=DriverRoot(root),
        toolkit_spec_dirs=(root / "etc/cdi", root / "var/run/cdi"),
        uts_release="6.8.0-test",
        firmware_path="",
        **kwargs,
    )


# -- upstream's generated spec, as data -------------------------------------------------------

UPSTREAM = yaml.safe_load((DATA / "nvcdi-generate.yaml").read_text())


def _fill(value: Any, root: str) -> Any:
    if isinstance(value, str):
        return value.replace("{root}", root)
    if isinstance(value, list):
        return [_fill(v, root) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, root) for k, v in value.items()}
    return value


@pytest.mark.parametrize("case", UPSTREAM["cases"], ids=lambda c: c["name"])
def test_the_toolkits_generate_case_gives_the_toolkits_common_edits(
    tmp_path: Path, case: dict[str, Any]
) -> None:
    for rel in UPSTREAM["layout"]["files"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    for rel, target in UPSTREAM["layout"]["links"].items():
        os.symlink(target, tmp_path / rel)
    hooks = HookOptions(DEFAULT_HOOK_PATH, disabled=frozenset(case["disabled_hooks"]))
    files = discover(DriverRoot(tmp_path), uts_release="x", firmware_path="")
    edits = driver_edits(files, DriverRoot(tmp_path), hooks).to_dict()
    expected = _fill(case["containerEdits"], str(tmp_path))
    expected["hooks"] = [
        h for h in expected["hooks"] if h["args"][1] not in case.get("drop_hooks", [])
    ]
    assert edits == expected
    if "device" in case:
        driver = node_driver(tmp_path, hooks=hooks)
        nodes = driver.device_nodes(0)
        assert cdi.CdiDevice("0", cdi.ContainerEdits(device_nodes=nodes)).to_dict() == _fill(
            case["device"], str(tmp_path)
        )


# -- DRA claim specs ------------------------------------------------------------------------


@pytest.fixture
def machine() -> Machine:
    return apply_layout(load_machine("dgx-h100", hostname="node-a"), {0: {"1g.10gb": 7}})


def claim(uid: str, *devices: str) -> ClaimInfo:
    return ClaimInfo(
        uid=uid,
        namespace="default",
        name=uid,
        results=tuple(
            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-a", "device": d}
            for d in devices
        ),
    )


def claim_spec(handler: GpuHandler, info: ClaimInfo) -> dict[str, Any]:
    prepared = handler.prepare(info)
    devices = [cdi.CdiDevice(d.cdi_name, d.edits) for d in prepared.devices]
    return cdi.build_spec("k8s.gpu.nvidia.com/claim", devices, prepared.common_edits)


def test_a_claim_spec_on_a_real_node_carries_the_driver(tmp_path: Path, machine: Machine) -> None:
    root = lay_out_driver(tmp_path / "host", version=machine.driver_version, gpus=8)
    driver = node_driver(root)
    handler = GpuHandler(machine, "node-a", tmp_path / "plugin", node_driver=driver)
    mig = machine.gpus[0].mig_devices[3]
    mig_name = next(n for n, d in handler.devices().items() if d.mig == mig)
    spec = claim_spec(handler, claim("u1", "gpu-1", mig_name))
    assert_valid(spec)
    edits = spec["containerEdits"]
    targets = {m["containerPath"] for m in edits["mounts"]}
    assert f"{LIB}/libcuda.so.{machine.driver_version}" in targets
    assert f"{LIB}/libnvidia-ml.so.{machine.driver_version}" in targets
    assert "/usr/bin/nvidia-smi" in targets
    assert "/run/nvidia-persistenced/socket" in targets
    assert f"/lib/firmware/nvidia/{machine.driver_version}/gsp_ga10x.bin" in targets
    assert all(m["hostPath"] == f"{root}{m['containerPath']}" for m in edits["mounts"])
    names = [h["args"][1] for h in edits["hooks"]]
    assert names == [
        "create-symlinks",
        "enable-cuda-compat",
        "update-ldcache",
        "disable-device-node-modification",
    ]
    assert "NVIDIA_VISIBLE_DEVICES=void" in edits["env"]
    assert f"NVIDIA_CTK_LIBCUDA_DIR={LIB}" in edits["env"]
    nodes = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    assert nodes["u1-gpu-1"] == [{"path": "/dev/nvidia1", "hostPath": f"{root}/dev/nvidia1"}]
    assert [n["path"] for n in nodes[f"u1-{mig_name}"]][:1] == ["/dev/nvidia0"]
    assert driver.source == f"driver root {root} (ld.so.cache)"


def test_a_simulated_node_keeps_its_driverless_spec(tmp_path: Path, machine: Machine) -> None:
    handler = GpuHandler(machine, "node-a", tmp_path / "plugin")
    spec = claim_spec(handler, claim("u2", "gpu-2"))
    assert_valid(spec)
    assert "mounts" not in spec["containerEdits"]
    assert [n["path"] for n in spec["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert for_backend(SimulatedBackend(machine)) is None


def test_the_toolkits_own_spec_is_reused_when_the_node_has_one(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host")
    generated = driver_edits(
        discover(DriverRoot(root), uts_release="x", firmware_path=""),
        DriverRoot(root),
        HookOptions(DEFAULT_HOOK_PATH),
    )
    toolkit = cdi.build_spec(
        "nvidia.com/gpu",
        [cdi.CdiDevice("all", cdi.ContainerEdits(device_nodes=(cdi.DeviceNode("/dev/nvidia0"),)))],
        generated,
    )
    (root / "var/run/cdi").mkdir(parents=True)
    cdi.write_spec(root / "var/run/cdi/nvidia.yaml", toolkit)
    # the toolkit's spec wins even when its hooks differ from what kgpu would write
    driver = node_driver(root, hooks=HookOptions(path=None))
    assert driver.common_edits(VERSION) == generated
    assert driver.source == f"toolkit spec {root}/var/run/cdi/nvidia.yaml"


def test_a_broken_toolkit_spec_is_reported_and_the_driver_root_used(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host")
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/nvidia.yaml").write_text("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    driver = node_driver(root)
    edits = driver.common_edits(VERSION)
    assert any(m.container_path == "/usr/bin/nvidia-smi" for m in edits.mounts)
    assert driver.warnings == [
        f"not reusing the toolkit's CDI spec: {root}/etc/cdi/nvidia.yaml: devices: at least "
        "one device is required"
    ]


def test_without_hooks_the_soname_links_are_mounted_instead(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host")
    edits = node_driver(root, hooks=HookOptions(path=None)).common_edits(VERSION)
    assert edits.hooks == ()
    targets = [m.container_path for m in edits.mounts]
    assert f"{LIB}/libcuda.so.1" in targets
    assert f"{LIB}/libcuda.so" not in targets  # a link only the hook would have made


def test_nvidia_ctk_as_the_hook_binary_runs_its_hook_subcommand(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host")
    hooks = HookOptions(path="/usr/local/nvidia/toolkit/nvidia-ctk")
    edits = node_driver(root, hooks=hooks).common_edits(VERSION)
    assert edits.hooks[0].args[:3] == ("nvidia-ctk", "hook", "create-symlinks")


def test_a_node_without_a_driver_gets_the_nodes_it_has_and_a_reason(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/nvidiactl").write_bytes(b"")
    driver = node_driver(tmp_path)
    edits = driver.common_edits("550.54.15")
    assert edits.to_dict() == {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": f"{tmp_path}/dev/nvidiactl"}],
    }
    assert driver.source == "none"
    assert "NVIDIA_DRIVER_ROOT" in driver.warnings[-1]


def test_common_edits_are_looked_up_once_per_ttl(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host")
    now = [0.0]
    driver = node_driver(root, clock=lambda: now[0], ttl_s=300)
    first = driver.common_edits(VERSION)
    (root / "usr/bin/nvidia-smi").unlink()
    assert driver.common_edits(VERSION) is first
    now[0] = 301.0
    assert all(
        m.container_path != "/usr/bin/nvidia-smi" for m in driver.common_edits(VERSION).mounts
    )


def test_nvmls_version_and_the_installed_libraries_disagree(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host", version="535.161.08")
    driver = node_driver(root)
    edits = driver.common_edits(VERSION)
    assert any(m.container_path.endswith(".so.535.161.08") for m in edits.mounts)
    assert "lib*.so.550.54.15" in driver.warnings[0]


# -- the device plugin's spec ----------------------------------------------------------------


def view_with(machine: Machine, strategy: str, id_strategy: str = "uuid") -> NodeView:
    config = (
        "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n"
        f"    deviceListStrategy: {strategy}\n    deviceIDStrategy: {id_strategy}\n"
    )
    return build_node_view(machine, load_config_strings({"config.yaml": config}), {})


@pytest.mark.parametrize("id_strategy", ["uuid", "index"])
def test_every_cdi_name_allocate_hands_out_is_in_the_written_spec(
    tmp_path: Path, machine: Machine, id_strategy: str
) -> None:
    root = lay_out_driver(tmp_path / "host", version=machine.driver_version, gpus=8)
    for gpu in machine.gpus:  # the MIG capability nodes nvidia-modprobe made
        for m in gpu.mig_devices:
            for node in device_paths(gpu.minor, (m.gi_id, m.ci_id))[1:]:
                (root / node.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
                (root / node.lstrip("/")).write_bytes(b"")
    view = view_with(machine, "cdi-cri", id_strategy)
    path = write_device_plugin_spec(view, tmp_path / "cdi", node_driver(root))
    assert path == tmp_path / "cdi" / DEVICE_PLUGIN_SPEC
    assert path.name == "k8s.device-plugin.nvidia.com-gpu.json"
    spec = cdi.read_spec(path)
    assert_valid(spec)
    defined = {f"{spec['kind']}={d['name']}" for d in spec["devices"]}
    for res in view.resources:
        for dev in res.devices:
            alloc = container_allocation(view, res.name, [dev.id])
            assert set(alloc.cdi_devices) <= defined
    assert cdi_device_name("all") in defined
    mig = machine.gpus[0].mig_devices[0]
    mig_id = mig.uuid if id_strategy == "uuid" else f"0:{mig.index}"
    (mig_device,) = [d for d in spec["devices"] if d["name"] == mig_id]
    paths = [n["path"] for n in mig_device["containerEdits"]["deviceNodes"]]
    assert paths[0] == "/dev/nvidia0" and paths[1].startswith("/dev/nvidia-caps/nvidia-cap")
    assert any(
        m["containerPath"].endswith("libcuda.so." + machine.driver_version)
        for m in (spec["containerEdits"]["mounts"])
    )


def test_the_spec_is_rewritten_only_when_it_changes(tmp_path: Path, machine: Machine) -> None:
    view = view_with(machine, "cdi-annotations")
    path = write_device_plugin_spec(view, tmp_path)
    assert path is not None
    before = path.stat().st_mtime_ns
    os.utime(path, ns=(before - 10**9, before - 10**9))
    assert write_device_plugin_spec(view, tmp_path) == path
    assert path.stat().st_mtime_ns == before - 10**9
    assert write_device_plugin_spec(view_with(machine, "envvar"), tmp_path / "other") is None
    assert not (tmp_path / "other").exists()


def test_pass_device_specs_lists_the_control_nodes_then_the_devices(
    tmp_path: Path, machine: Machine
) -> None:
    root = lay_out_driver(tmp_path / "host", gpus=8, uvm=False)
    view = view_with(machine, "envvar")
    mig = machine.gpus[0].mig_devices[2]
    specs = pass_device_specs(view, [machine.gpus[3].uuid, mig.uuid], node_driver(root))
    paths = [s.container_path for s in specs]
    assert paths[:2] == ["/dev/nvidiactl", "/dev/nvidia3"]
    assert paths[2] == "/dev/nvidia0" and len(paths) == 5
    assert all(s.host_path == f"{root}{s.container_path}" for s in specs)
    assert {s.permissions for s in specs} == {"rw"}


def test_a_real_gpu_backend_gets_the_driver_from_upstreams_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NVIDIA_DRIVER_ROOT", "/run/nvidia/driver")
    monkeypatch.setenv("DRIVER_ROOT_CTR_PATH", "/driver-root")
    backend = NvmlBackend(FakeNvml(SimulatedBackend(load_machine("dgx-h100"))))
    driver = for_backend(backend)  # it reads real GPUs through NVML: it has a driver
    assert driver is not None
    assert driver.root.root == Path("/driver-root")
    assert driver.root.host("/usr/bin/nvidia-smi") == "/run/nvidia/driver/usr/bin/nvidia-smi"


def test_a_toolkit_spec_that_is_not_yaml_is_reported_not_raised(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host")
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/nvidia.yaml").write_text("devices: [unclosed\n")
    driver = node_driver(root)
    assert any(m.container_path == "/usr/bin/nvidia-smi" for m in driver.common_edits().mounts)
    assert "not a YAML or JSON file" in driver.warnings[0]
