"""Finding a driver's files in driver roots laid out as real installs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fake_driver_root import BINARIES, LIBRARIES, VERSION, elf_shared_object, lay_out_driver

from kgpu.kubelet.driver_root import (
    DriverFiles,
    DriverNotFound,
    DriverRoot,
    discover,
    elf_soname,
    resolve_chain,
    so_link,
)
from kgpu.kubelet.ldcache import read_ld_cache

LIB = "/usr/lib/x86_64-linux-gnu"


def find_files(root: Path, version: str | None = None) -> DriverFiles:
    return discover(DriverRoot(root), version, uts_release="6.8.0-test", firmware_path="")


def test_a_packaged_install_yields_every_versioned_library_tool_firmware_and_socket(
    tmp_path: Path,
) -> None:
    lay_out_driver(tmp_path)
    files = find_files(tmp_path)
    assert files.version == VERSION
    assert files.source == "ld.so.cache"
    assert files.library_dirs == (LIB,)
    assert set(files.libraries) == {f"{LIB}/{name}.{VERSION}" for name, _ in LIBRARIES} | {
        f"{LIB}/vdpau/libvdpau_nvidia.so.{VERSION}"
    }
    assert files.binaries == tuple(f"/usr/bin/{b}" for b in BINARIES)
    assert files.firmware == (
        f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin",
        f"/lib/firmware/nvidia/{VERSION}/gsp_tu10x.bin",
    )
    assert files.ipc == ("/run/nvidia-persistenced/socket", "/tmp/nvidia-mps")
    assert files.control_devices == ("/dev/nvidia-uvm-tools", "/dev/nvidia-uvm", "/dev/nvidiactl")
    assert files.warnings == ()


def test_soname_links_come_from_the_elf_soname_and_only_where_the_host_has_them(
    tmp_path: Path,
) -> None:
    lay_out_driver(tmp_path, dev_links=["libnvidia-ml.so"])
    links = dict((link, target) for target, link in find_files(tmp_path).symlinks)
    # libcuda.so -> libcuda.so.1 always (applications dlopen the unversioned name)
    assert links[f"{LIB}/libcuda.so"] == "libcuda.so.1"
    assert links[f"{LIB}/libcuda.so.1"] == f"libcuda.so.{VERSION}"
    assert links[f"{LIB}/libnvidia-nvvm.so.4"] == f"libnvidia-nvvm.so.{VERSION}"
    # a .so development link only where the host has one
    assert links[f"{LIB}/libnvidia-ml.so"] == "libnvidia-ml.so.1"
    assert f"{LIB}/libnvidia-cfg.so" not in links
    # a library whose SONAME is its own file name gets no link
    assert not any("libnvidia-gpucomp" in link for link in links)
    assert links[f"{LIB}/libnvidia-opticalflow.so"] == "libnvidia-opticalflow.so.1"
    assert links[f"{LIB}/vdpau/libvdpau_nvidia.so.1"] == f"libvdpau_nvidia.so.{VERSION}"


def test_a_driver_container_root_is_read_where_mounted_and_named_as_the_host_sees_it(
    tmp_path: Path,
) -> None:
    # the GPU Operator's driver container: /run/nvidia/driver on the host, mounted into the
    # agent's container at /driver-root (here: tmp_path); libraries under /usr/lib64, and the
    # driver root's symlinks are absolute inside that root
    lay_out_driver(tmp_path, libdir="/usr/lib64")
    os.unlink(tmp_path / "usr/lib64/libcuda.so.1")
    os.symlink(f"/usr/lib64/libcuda.so.{VERSION}", tmp_path / "usr/lib64/libcuda.so.1")
    root = DriverRoot.from_env(
        {"NVIDIA_DRIVER_ROOT": "/run/nvidia/driver", "DRIVER_ROOT_CTR_PATH": str(tmp_path)}
    )
    files = discover(root, VERSION, uts_release="x", firmware_path="")
    assert f"/usr/lib64/libcuda.so.{VERSION}" in files.libraries
    assert root.host(f"/usr/lib64/libcuda.so.{VERSION}") == (
        f"/run/nvidia/driver/usr/lib64/libcuda.so.{VERSION}"
    )
    assert root.host_dev("/dev/nvidiactl") == "/run/nvidia/driver/dev/nvidiactl"
    assert resolve_chain(tmp_path, "/usr/lib64/libcuda.so.1") == [
        "/usr/lib64/libcuda.so.1",
        f"/usr/lib64/libcuda.so.{VERSION}",
    ]


def test_a_library_directory_only_the_linker_cache_knows_is_found(tmp_path: Path) -> None:
    lay_out_driver(tmp_path, libdir="/opt/nvidia/lib")
    assert find_files(tmp_path).library_dirs == ("/opt/nvidia/lib",)
    (tmp_path / "etc/ld.so.cache").unlink()
    with pytest.raises(DriverNotFound, match="NVIDIA_DRIVER_ROOT"):
        find_files(tmp_path)


def test_without_a_linker_cache_the_standard_directories_are_searched(tmp_path: Path) -> None:
    lay_out_driver(tmp_path, ld_cache=False)
    files = find_files(tmp_path)
    assert files.source == "library directories"
    assert files.version == VERSION
    assert f"{LIB}/libnvidia-ml.so.{VERSION}" in files.libraries


def test_nvmls_version_picks_the_matching_libraries_among_two_installs(tmp_path: Path) -> None:
    lay_out_driver(tmp_path, version="535.161.08", ld_cache=False)
    lay_out_driver(tmp_path, version=VERSION, ld_cache=False)
    files = find_files(tmp_path, "535.161.08")
    assert all(lib.endswith(".so.535.161.08") for lib in files.libraries)
    with pytest.raises(DriverNotFound, match=r"lib\*\.so\.999\.1\.1"):
        find_files(tmp_path, "999.1.1")


def test_missing_optional_parts_are_left_out_and_a_missing_nvidiactl_is_reported(
    tmp_path: Path,
) -> None:
    lay_out_driver(
        tmp_path,
        binaries=["nvidia-smi"],
        firmware=[],
        persistenced=False,
        fabricmanager=True,
        mps=False,
        uvm=False,
    )
    (tmp_path / "dev/nvidiactl").unlink()
    files = find_files(tmp_path)
    assert files.binaries == ("/usr/bin/nvidia-smi",)
    assert files.firmware == ()
    assert files.ipc == ("/run/nvidia-fabricmanager/socket",)
    assert files.control_devices == ()
    assert any("/dev/nvidiactl not found" in w for w in files.warnings)


def test_a_non_executable_tool_is_not_mounted(tmp_path: Path) -> None:
    lay_out_driver(tmp_path)
    (tmp_path / "usr/bin/nvidia-debugdump").chmod(0o644)
    assert "/usr/bin/nvidia-debugdump" not in find_files(tmp_path).binaries


def test_firmware_follows_the_kernels_search_order(tmp_path: Path) -> None:
    lay_out_driver(tmp_path, firmware=[])
    updates = tmp_path / "lib/firmware/updates/6.8.0-test/nvidia" / VERSION
    updates.mkdir(parents=True)
    (updates / "gsp_ga10x.bin").write_bytes(b"\x00")
    custom = tmp_path / "srv/fw/nvidia" / VERSION
    custom.mkdir(parents=True)
    (custom / "gsp_tu10x.bin").write_bytes(b"\x00")
    files = discover(DriverRoot(tmp_path), uts_release="6.8.0-test", firmware_path="/srv/fw")
    assert files.firmware == (
        f"/srv/fw/nvidia/{VERSION}/gsp_tu10x.bin",
        f"/lib/firmware/updates/6.8.0-test/nvidia/{VERSION}/gsp_ga10x.bin",
    )


def test_an_empty_root_names_where_it_looked_and_what_to_set(tmp_path: Path) -> None:
    with pytest.raises(DriverNotFound) as info:
        find_files(tmp_path)
    assert str(tmp_path) in str(info.value)
    assert "nvidiaDriverRoot" in str(info.value)


def test_a_symlink_loop_resolves_to_nothing(tmp_path: Path) -> None:
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    assert resolve_chain(tmp_path, "/a") == []


def test_elf_sonames_match_the_hosts_linker_cache() -> None:
    """ldconfig names every cache entry by its library's SONAME: reading the SONAME of each
    versioned 64-bit library on this machine must give that name back."""
    try:
        entries = [e for e in read_ld_cache("/") if e.bits == 64 and ".so." in e.name]
    except OSError:
        pytest.skip("no host linker cache")
    checked = 0
    for entry in entries[:200]:
        real = Path(os.path.realpath(entry.path))
        if real.is_file():
            assert elf_soname(real) == entry.name, real
            checked += 1
    assert checked > 10


def test_elf_soname_of_what_is_not_a_library(tmp_path: Path) -> None:
    (tmp_path / "empty.so.1").write_bytes(b"")
    (tmp_path / "text.so.1").write_text("INPUT(libfoo.so.1)\n")
    (tmp_path / "nosoname.so.1").write_bytes(elf_shared_object(None))
    assert elf_soname(tmp_path / "empty.so.1") is None
    assert elf_soname(tmp_path / "text.so.1") is None
    assert elf_soname(tmp_path / "nosoname.so.1") == "nosoname.so.1"
    assert elf_soname(tmp_path / "missing.so.1") is None


@pytest.mark.parametrize(
    ("name", "link"),
    [
        ("libcuda.so.1", "libcuda.so"),
        ("libcuda.so.550.54.15", "libcuda.so"),
        ("libcuda.so", "libcuda.so"),
        ("README", ""),
    ],
)
def test_so_link_names(name: str, link: str) -> None:
    assert so_link(name) == link
