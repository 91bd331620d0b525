"""The helpers build.sh runs, on small made-up trees (no root, no buildah): slim-site.py keeps
what a node runs and removes the rest, elf-arch.py catches one wrong-architecture file among
many, and dockerfile-config.py gives the assembled arm64 image the Dockerfile's config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .conftest import REPO

TOOLS = REPO / "deploy" / "container"


def _tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOLS / name), *args], capture_output=True, text=True, timeout=60
    )


def _dist(site: Path, name: str, version: str, files: dict[str, str]) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Name: {name}\nVersion: {version}\n")
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)
    records = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in records))


def test_slim_site_keeps_what_runs_and_drops_the_rest(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    site.mkdir()
    _dist(site, "kgpu", "0.1.0", {"kgpu/__init__.py": "X = 1\n", "kgpu/testing/fake.py": ""})
    _dist(
        site,
        "kubernetes",
        "37.0.2",
        {
            "kubernetes/__init__.py": "from . import client\n",
            "kubernetes/client/__init__.py": "from .models import pod\n",
            "kubernetes/client/models/__init__.py": "",
            "kubernetes/client/models/pod.py": "KIND = 'Pod'\n",
            "kubernetes/aio/__init__.py": "import aiohttp\n",
            "kubernetes/py.typed": "",
        },
    )
    _dist(site, "aiohttp", "3.14.5", {"aiohttp/__init__.py": "", "aiohttp/_parser.so": "x"})
    _dist(site, "certifi", "2026.1", {"certifi/__init__.py": "", "certifi/tests/t.py": ""})
    _dist(site, "grpc_stubs", "1.0", {"grpc-stubs/__init__.pyi": ""})
    pip_pyc = "pip/__pycache__/__init__.cpython-311.pyc"
    _dist(site, "pip", "23.0.1", {"pip/__init__.py": "", pip_pyc: "base layer"})

    done = _tool("slim-site.py", str(site))
    assert done.returncode == 0, done.stderr

    assert not (site / "kubernetes" / "aio").exists()
    assert not (site / "aiohttp").exists() and not list(site.glob("aiohttp-*.dist-info"))
    assert not (site / "certifi" / "tests").exists()
    assert not list(site.rglob("*.pyi")) and not (site / "kubernetes" / "py.typed").exists()
    # the generated client classes as byte code only, beside where the source was
    assert (site / "kubernetes/client/models/pod.pyc").exists()
    assert not (site / "kubernetes/client/models/pod.py").exists()
    # kgpu (its testing fakes too) and the rest keep their source, with byte code
    assert (site / "kgpu/testing/fake.py").exists()
    assert list((site / "kgpu" / "__pycache__").glob("__init__.cpython-*.pyc"))
    # the base image's pip is left exactly as it was (it lives in a lower layer)
    assert (site / pip_pyc).read_text() == "base layer"
    # and what is kept still imports, from byte code where the source is gone
    probe = subprocess.run(
        [sys.executable, "-c", "import kubernetes; print(kubernetes.client.pod.KIND)"],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip() == "Pod", probe.stderr


def _elf(path: Path, machine: int) -> None:
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4], header[5] = 2, 1  # 64-bit, little-endian
    header[18:20] = machine.to_bytes(2, "little")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(header))


def test_elf_arch_names_the_one_file_of_another_architecture(tmp_path: Path) -> None:
    for i in range(5):
        _elf(tmp_path / "usr" / "lib" / f"lib{i}.so", 183)
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "script").write_text("#!/bin/sh\n")
    (tmp_path / "usr" / "lib" / "link.so").symlink_to("lib0.so")
    ok = _tool("elf-arch.py", "--arch", "arm64", str(tmp_path))
    assert ok.returncode == 0 and "all 5 ELF files" in ok.stdout, ok.stderr

    _elf(tmp_path / "opt" / "venv" / "_cext.cpython-311-x86_64-linux-gnu.so", 62)
    bad = _tool("elf-arch.py", "--arch", "arm64", str(tmp_path))
    assert bad.returncode == 1
    assert "opt/venv/_cext.cpython-311-x86_64-linux-gnu.so: amd64, not arm64" in bad.stderr
    assert "1 of 6 ELF files are not arm64" in bad.stderr


def test_the_assembled_image_gets_the_dockerfiles_config() -> None:
    done = _tool("dockerfile-config.py", str(TOOLS / "Dockerfile"), "/opt/venv/bin:/usr/bin:/bin")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    pairs = list(zip(lines[::2], lines[1::2], strict=True))
    assert ("--user", "65532:65532") in pairs
    assert ("--entrypoint", json.dumps(["kgpu"])) in pairs
    assert ("--env", "LD_LIBRARY_PATH=/run/kgpu/driver/lib") in pairs
    assert ("--env", "PATH=/opt/venv/bin:/usr/bin:/bin:/run/kgpu/driver/bin") in pairs
    assert ("--label", "org.opencontainers.image.title=kgpu") in pairs
