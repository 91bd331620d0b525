"""Driver roots laid out as real NVIDIA driver installs, for the CDI discovery tests.

A real install (``.run`` installer, distro packages, or the GPU Operator's driver container
under ``/run/nvidia/driver``) puts ``lib<name>.so.<version>`` files in the library directory,
SONAME symlinks to them (``libcuda.so.1 -> libcuda.so.550.54.15``), the VDPAU driver under
``vdpau/``, tools in ``/usr/bin``, GSP firmware in ``/lib/firmware/nvidia/<version>/`` and a
linker cache listing the SONAME links. The libraries here are minimal ELF shared objects whose
only content is their ``DT_SONAME`` (what the discovery reads); device nodes and sockets are
plain files standing in for them.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path

from kgpu.kubelet.ldcache import build_ld_cache

VERSION = "550.54.15"

#: (file name without version, SONAME or None when the SONAME is the versioned file name), as a
#: 550 driver ships them.
LIBRARIES: tuple[tuple[str, str | None], ...] = (
    ("libcuda.so", "libcuda.so.1"),
    ("libnvidia-ml.so", "libnvidia-ml.so.1"),
    ("libnvidia-ptxjitcompiler.so", "libnvidia-ptxjitcompiler.so.1"),
    ("libnvidia-nvvm.so", "libnvidia-nvvm.so.4"),
    ("libcudadebugger.so", "libcudadebugger.so.1"),
    ("libnvidia-opencl.so", "libnvidia-opencl.so.1"),
    ("libnvidia-gpucomp.so", None),
    ("libnvidia-allocator.so", "libnvidia-allocator.so.1"),
    ("libnvidia-cfg.so", "libnvidia-cfg.so.1"),
    ("libnvidia-opticalflow.so", "libnvidia-opticalflow.so.1"),
    ("libnvcuvid.so", "libnvcuvid.so.1"),
    ("libnvidia-encode.so", "libnvidia-encode.so.1"),
)
BINARIES = (
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-persistenced",
    "nvidia-cuda-mps-control",
    "nvidia-cuda-mps-server",
)
FIRMWARE = ("gsp_ga10x.bin", "gsp_tu10x.bin")


def elf_shared_object(soname: str | None) -> bytes:
    """A 64-bit little-endian ELF shared object with a ``.dynstr`` and a ``.dynamic`` section
    holding ``DT_SONAME`` (none when ``soname`` is None)."""
    dynstr = b"\x00" + (soname.encode() + b"\x00" if soname else b"")
    entries = ([(14, 1)] if soname else []) + [(0, 0)]
    dynamic = b"".join(struct.pack("<qQ", tag, value) for tag, value in entries)
    header_size, sh_size = 64, 64
    dynstr_at = header_size
    dynamic_at = dynstr_at + len(dynstr)
    dynamic_at += -dynamic_at % 8
    shoff = dynamic_at + len(dynamic)
    header = bytearray(64)
    header[:16] = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    struct.pack_into(
        "<HHIQQQIHHHHHH", header, 16, 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, sh_size, 3, 0
    )
    sections = [
        bytes(sh_size),
        struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, dynstr_at, len(dynstr), 0, 0, 1, 0),
        struct.pack("<IIQQQQIIQQ", 0, 6, 0, 0, dynamic_at, len(dynamic), 1, 0, 8, 16),
    ]
    body = bytearray(header)
    body += dynstr
    body += bytes(dynamic_at - len(body))
    body += dynamic
    for section in sections:
        body += section
    return bytes(body)


def _write(path: Path, data: bytes = b"", mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mode is not None:
        path.chmod(mode)


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    os.symlink(target, path)


def lay_out_driver(
    root: Path,
    *,
    version: str = VERSION,
    libdir: str = "/usr/lib/x86_64-linux-gnu",
    libraries: Iterable[tuple[str, str | None]] = LIBRARIES,
    ld_cache: bool = True,
    dev_links: Iterable[str] = (),
    binaries: Iterable[str] = BINARIES,
    firmware: Iterable[str] = FIRMWARE,
    persistenced: bool = True,
    fabricmanager: bool = False,
    mps: bool = True,
    gpus: int = 2,
    uvm: bool = True,
    hook: str | None = "/usr/bin/nvidia-cdi-hook",
) -> Path:
    """Install a fake driver of ``version`` under ``root``. ``dev_links`` names the libraries
    (``libcuda.so``) that also get a development ``.so`` link, as a ``-dev`` package adds;
    ``hook`` is where the container toolkit's hook binary is (None: no toolkit installed)."""
    lib = root / libdir.lstrip("/")
    cache: list[tuple[str, str]] = []
    for name, soname in libraries:
        real = f"{name}.{version}"
        _write(lib / real, elf_shared_object(soname or real))
        if soname:
            _link(lib / soname, real)
            cache.append((soname, f"{libdir}/{soname}"))
        else:
            cache.append((real, f"{libdir}/{real}"))
    for name in dev_links:
        soname = dict(libraries).get(name) or f"{name}.{version}"
        _link(lib / name, soname)
    _write(
        lib / "vdpau" / f"libvdpau_nvidia.so.{version}", elf_shared_object("libvdpau_nvidia.so.1")
    )
    _link(lib / "vdpau" / "libvdpau_nvidia.so.1", f"libvdpau_nvidia.so.{version}")
    if ld_cache:
        cache.append(("libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"))
        _write(root / "etc/ld.so.cache", build_ld_cache(cache))
    for name in binaries:
        _write(root / "usr/bin" / name, b"#!/bin/sh\n", 0o755)
    if hook is not None:
        _write(root / hook.lstrip("/"), b"#!/bin/sh\n", 0o755)
    for name in firmware:
        _write(root / "lib/firmware/nvidia" / version / name, b"\x00")
    if persistenced:
        _write(root / "run/nvidia-persistenced/socket")
    if fabricmanager:
        _write(root / "run/nvidia-fabricmanager/socket")
    if mps:
        (root / "tmp/nvidia-mps").mkdir(parents=True, exist_ok=True)
    for node in ["nvidiactl", *(["nvidia-uvm", "nvidia-uvm-tools"] if uvm else [])]:
        _write(root / "dev" / node)
    for i in range(gpus):
        _write(root / "dev" / f"nvidia{i}")
    return root
