"""deploy/container/kgpu-link-driver.sh, the agent's init container: on a fake driver root laid
out as Debian/Ubuntu and RHEL hosts install the driver, it links the driver's libraries and MPS
binaries where the image's LD_LIBRARY_PATH and PATH look, never the host's other libraries, and
fails naming where it looked when no driver is there.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import REPO

SCRIPT = REPO / "deploy" / "container" / "kgpu-link-driver.sh"
VERSION = "570.124.06"


def fake_driver(root: Path, lib_dir: str, *, absolute_links: bool = False) -> Path:
    lib = root / lib_dir
    lib.mkdir(parents=True)
    for name in ("libnvidia-ml", "libcuda", "libnvidia-ptxjitcompiler"):
        (lib / f"{name}.so.{VERSION}").write_bytes(b"\x7fELF")
        target = f"/{lib_dir}/{name}.so.{VERSION}" if absolute_links else f"{name}.so.{VERSION}"
        (lib / f"{name}.so.1").symlink_to(target)
    (lib / "libc.so.6").write_bytes(b"\x7fELF")  # the host's libc must stay out
    (lib / "libssl.so.3").write_bytes(b"\x7fELF")
    (root / "usr" / "bin").mkdir(parents=True, exist_ok=True)
    for b in ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server", "nvidia-smi"):
        (root / "usr" / "bin" / b).write_text("#!/bin/sh\n")
    return root


def link(root: Path, links: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT), *args],
        env={**os.environ, "KGPU_DRIVER_ROOT": str(root), "KGPU_DRIVER_LINKS": str(links)},
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("lib_dir", "absolute"),
    [("usr/lib/x86_64-linux-gnu", False), ("usr/lib64", False), ("usr/lib64", True)],
)
def test_links_driver_libraries_and_mps_binaries(
    tmp_path: Path, lib_dir: str, absolute: bool
) -> None:
    root = fake_driver(tmp_path / "driver-root", lib_dir, absolute_links=absolute)
    links = tmp_path / "links"
    done = link(root, links)
    assert done.returncode == 0, done.stderr
    libs = {p.name: p for p in (links / "lib").iterdir()}
    assert "libnvidia-ml.so.1" in libs and "libcuda.so.1" in libs
    assert not {"libc.so.6", "libssl.so.3"} & set(libs)
    # the soname resolves to the real file inside the driver root, even through an absolute
    # host symlink (which would point outside the mount if followed as is)
    real = libs["libnvidia-ml.so.1"].resolve()
    assert real == (root / lib_dir / f"libnvidia-ml.so.{VERSION}").resolve()
    assert {p.name for p in (links / "bin").iterdir()} == {
        "nvidia-cuda-mps-control",
        "nvidia-cuda-mps-server",
        "nvidia-smi",
    }
    assert link(root, links).returncode == 0  # a restarted pod links again


def test_no_driver_fails_naming_where_it_looked(tmp_path: Path) -> None:
    (tmp_path / "driver-root").mkdir()
    done = link(tmp_path / "driver-root", tmp_path / "links", "--wait", "0")
    assert done.returncode == 1
    assert "no libnvidia-ml.so.1 under" in done.stderr
    assert "usr/lib/x86_64-linux-gnu" in done.stderr and "nvidiaDriverRoot" in done.stderr
