"""CDI specs a runtime can apply on the node they are written for (issue 22).

On a real H200 (no container toolkit installed) both specs named ``/usr/bin/nvidia-cdi-hook``
four times: a runtime would have failed every container. Here: the node's own hook where the
toolkit installs it, else specs that need none; graphics files and ``/dev/dri`` nodes when the
node has them; no host path that does not exist.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fake_driver_root import VERSION, lay_out_driver

from kgpu.config.loader import load_config_strings
from kgpu.hardware.profiles import load_machine
from kgpu.kubelet import cdi
from kgpu.kubelet.driver_root import DriverRoot
from kgpu.kubelet.nvidia_cdi import HookOptions, NodeDriver, write_device_plugin_spec
from kgpu.node.view import build_node_view

LIB = "/usr/lib/x86_64-linux-gnu"


def node_driver(root: Path, **kwargs: Any) -> NodeDriver:
    return NodeDriver(
        root=DriverRoot(root),
        toolkit_spec_dirs=(root / "etc/cdi",),
        uts_release="6.8.0-test",
        firmware_path="",
        **kwargs,
    )


def host_paths(spec: dict[str, Any]) -> list[str]:
    """Every host path a spec names: mounts, device nodes, hook binaries."""
    out: list[str] = []
    for edits in [spec.get("containerEdits", {}), *(d["containerEdits"] for d in spec["devices"])]:
        out += [m["hostPath"] for m in edits.get("mounts", [])]
        out += [n.get("hostPath", n["path"]) for n in edits.get("deviceNodes", [])]
        out += [h["path"] for h in edits.get("hooks", [])]
    return out


def test_a_node_without_the_toolkit_gets_specs_that_need_no_hook(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host", hook=None)
    driver = node_driver(root)
    edits = driver.common_edits(VERSION)
    assert edits.hooks == ()
    # what update-ldcache would have put in the container's linker cache
    assert f"LD_LIBRARY_PATH={LIB}:{LIB}/vdpau" in edits.env
    mounted = {m.container_path for m in edits.mounts}
    assert f"{LIB}/libcuda.so.1" in mounted  # what create-symlinks would have made
    assert any("no nvidia-cdi-hook or nvidia-ctk" in w for w in driver.warnings)


def test_the_nodes_own_hook_is_used_where_the_toolkit_installed_it(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host", hook="/usr/local/nvidia/toolkit/nvidia-cdi-hook")
    edits = node_driver(root).common_edits(VERSION)
    assert {h.path for h in edits.hooks} == {f"{root}/usr/local/nvidia/toolkit/nvidia-cdi-hook"}
    assert not any(e.startswith("LD_LIBRARY_PATH=") for e in edits.env)

    ctk = lay_out_driver(tmp_path / "ctk", hook="/usr/bin/nvidia-ctk")
    hooks = node_driver(ctk).common_edits(VERSION).hooks
    assert hooks[0].path == f"{ctk}/usr/bin/nvidia-ctk"
    assert hooks[0].args[:3] == ("nvidia-ctk", "hook", "create-symlinks")


def test_a_configured_hook_missing_on_the_node_falls_back_to_the_nodes_own(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host", hook="/usr/local/bin/nvidia-ctk")
    driver = node_driver(root, hooks=HookOptions(path=f"{root}/usr/bin/nvidia-cdi-hook"))
    edits = driver.common_edits(VERSION)
    assert {h.path for h in edits.hooks} == {f"{root}/usr/local/bin/nvidia-ctk"}
    assert driver.warnings == [
        f"the hook {root}/usr/bin/nvidia-cdi-hook does not exist on the node; "
        f"using {root}/usr/local/bin/nvidia-ctk"
    ]


def test_graphics_files_are_mounted_as_the_toolkit_mounts_them(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host")
    for rel in (
        "usr/share/vulkan/icd.d/nvidia_icd.json",
        "usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        "etc/OpenCL/vendors/nvidia.icd",
        "etc/OpenCL/vendors/pocl.icd",  # another vendor's: not ours to mount
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("{}")
    mounts = {m.container_path: m.host_path for m in node_driver(root).common_edits(VERSION).mounts}
    assert mounts["/etc/vulkan/icd.d/nvidia_icd.json"] == (
        f"{root}/usr/share/vulkan/icd.d/nvidia_icd.json"
    )
    assert mounts["/usr/share/glvnd/egl_vendor.d/10_nvidia.json"] == (
        f"{root}/usr/share/glvnd/egl_vendor.d/10_nvidia.json"
    )
    assert "/etc/OpenCL/vendors/nvidia.icd" in mounts
    assert "/etc/OpenCL/vendors/pocl.icd" not in mounts


def test_a_whole_gpu_gets_its_dri_nodes_when_the_node_has_them(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host")
    dri = root / "dev/dri"
    (dri / "by-path").mkdir(parents=True)
    for node in ("card1", "renderD128"):
        (dri / node).write_bytes(b"")
    os.symlink("../card1", dri / "by-path/pci-0000:1b:00.0-card")
    os.symlink("../renderD128", dri / "by-path/pci-0000:1b:00.0-render")
    driver = node_driver(root)
    assert [n.path for n in driver.device_nodes(0, None, "00000000:1B:00.0")] == [
        "/dev/nvidia0",
        "/dev/dri/card1",
        "/dev/dri/renderD128",
    ]
    assert [n.path for n in driver.device_nodes(1, None, "00000000:2A:00.0")] == ["/dev/nvidia1"]


def test_no_written_spec_names_a_host_path_the_node_lacks(tmp_path: Path) -> None:
    """The H200's case: no toolkit, yet the configured hook path is the default one."""
    machine = load_machine("dgx-h100", hostname="n")
    root = lay_out_driver(tmp_path / "host", version=machine.driver_version, gpus=8, hook=None)
    config = "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n"
    view = build_node_view(machine, load_config_strings({"c.yaml": config}), {})
    driver = node_driver(root, hooks=HookOptions(path=f"{root}/usr/bin/nvidia-cdi-hook"))
    path = write_device_plugin_spec(view, tmp_path / "cdi", driver)
    assert path is not None
    spec = cdi.read_spec(path)
    named = host_paths(spec)
    assert named and all(os.path.lexists(p) for p in named), [
        p for p in named if not os.path.lexists(p)
    ]
    assert "hooks" not in spec["containerEdits"]
    # UUID-named devices whose nodes name no separate hostPath: the CDI library's minimum
    assert spec["cdiVersion"] == cdi.minimum_version(spec)


def test_a_reused_toolkit_spec_loses_the_files_the_node_no_longer_has(tmp_path: Path) -> None:
    root = lay_out_driver(tmp_path / "host")
    edits = cdi.ContainerEdits(
        env=("NVIDIA_VISIBLE_DEVICES=void",),
        mounts=(
            cdi.Mount(f"{root}{LIB}/libcuda.so.{VERSION}", f"{LIB}/libcuda.so.{VERSION}"),
            cdi.Mount(f"{root}{LIB}/libcuda.so.1.gone", f"{LIB}/libcuda.so.1.gone"),
        ),
        hooks=(cdi.Hook("createContainer", f"{root}/usr/bin/nvidia-ctk", ("nvidia-ctk", "hook")),),
    )
    spec = cdi.build_spec(
        "nvidia.com/gpu",
        [cdi.CdiDevice("all", cdi.ContainerEdits(device_nodes=(cdi.DeviceNode("/dev/nvidia0"),)))],
        edits,
    )
    (root / "etc/cdi").mkdir(parents=True)
    cdi.write_spec(root / "etc/cdi/nvidia.yaml", spec)
    driver = node_driver(root)
    common = driver.common_edits(VERSION)
    assert [m.container_path for m in common.mounts] == [f"{LIB}/libcuda.so.{VERSION}"]
    assert common.hooks == ()
    assert sorted(w.split(" ")[0] for w in driver.warnings) == [
        f"{root}/usr/bin/nvidia-ctk",
        f"{root}{LIB}/libcuda.so.1.gone",
    ]
