"""Generate Python stubs for every kubelet ``.proto`` kept under :mod:`kgpu.kubelet.proto`.

The ``.proto`` files are the contract with the kubelet, so they are the source of truth and the
generated modules are committed beside them (a node running ``kgpu agent`` needs no compiler).
This module regenerates them, and ``--check`` regenerates into a scratch directory and compares,
so a stale stub fails CI instead of drifting silently from its ``.proto``.

Every file is compiled with ``-I src``: a file at
``src/kgpu/kubelet/proto/<api>/<version>/api.proto`` becomes the module
``kgpu.kubelet.proto.<api>.<version>.api_pb2`` and its ``.proto`` is registered in the descriptor
pool under that unique path, so several APIs never collide on file names. (Message names still
share one pool: two files in the same protobuf package must not define the same message.)

Usage::

    python -m kgpu.kubelet.protogen          # regenerate in place
    python -m kgpu.kubelet.protogen --check  # exit 1 listing stale or missing files
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent / "proto"
SRC_ROOT = PROTO_ROOT.parents[2]  # .../src


class ProtogenError(RuntimeError):
    """protoc refused a file; the message carries protoc's own diagnostics."""


def find_protos(root: Path = PROTO_ROOT) -> list[Path]:
    return sorted(root.rglob("*.proto"))


def _plugin_args() -> list[str]:
    """mypy-protobuf's plugins, when installed beside this interpreter, give typed ``.pyi``."""
    bindir = Path(sys.executable).parent
    mypy_plugin = bindir / "protoc-gen-mypy"
    grpc_plugin = bindir / "protoc-gen-mypy_grpc"
    if not mypy_plugin.exists() or not grpc_plugin.exists():
        found_mypy = shutil.which("protoc-gen-mypy")
        found_grpc = shutil.which("protoc-gen-mypy_grpc")
        if not found_mypy or not found_grpc:
            return []
        mypy_plugin, grpc_plugin = Path(found_mypy), Path(found_grpc)
    return [
        f"--plugin=protoc-gen-mypy={mypy_plugin}",
        f"--plugin=protoc-gen-mypy_grpc={grpc_plugin}",
    ]


def _generate_into(out_dir: Path, protos: Sequence[Path]) -> None:
    from grpc_tools import protoc  # type: ignore[import-untyped]  # build-time tool only

    include = Path(protoc.__file__).resolve().parent / "_proto"  # google/protobuf/*.proto
    plugins = _plugin_args()
    typed = [f"--mypy_out={out_dir}", f"--mypy_grpc_out={out_dir}"] if plugins else []
    for proto in protos:
        rel = proto.resolve().relative_to(SRC_ROOT)
        args = [
            "grpc_tools.protoc",
            f"-I{SRC_ROOT}",
            f"-I{include}",
            f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            *plugins,
            *typed,
            str(rel),
        ]
        if not plugins:
            args.insert(-1, f"--pyi_out={out_dir}")
        code = protoc.main(args)
        if code != 0:
            raise ProtogenError(f"protoc failed on {rel} (exit {code})")


def _package_dirs(root: Path = PROTO_ROOT) -> list[Path]:
    """Every directory from ``root`` down to a ``.proto``: each must be an importable package."""
    dirs: set[Path] = set()
    for proto in find_protos(root):
        directory = proto.parent
        while True:
            dirs.add(directory)
            if directory == root:
                break
            directory = directory.parent
    return sorted(dirs)


def _ensure_packages(root: Path = PROTO_ROOT) -> None:
    for directory in _package_dirs(root):
        init = directory / "__init__.py"
        if not init.exists():
            init.write_text(f'"""Generated kubelet API stubs: {directory.name}."""\n')


def generate(root: Path = PROTO_ROOT) -> list[Path]:
    """Regenerate every stub in place; return the files written."""
    protos = find_protos(root)
    with tempfile.TemporaryDirectory() as tmp:
        _generate_into(Path(tmp), protos)
        written = []
        for produced in sorted(Path(tmp).rglob("*")):
            if produced.is_file():
                target = SRC_ROOT / produced.relative_to(tmp)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(produced, target)
                written.append(target)
    _ensure_packages(root)
    return written


def stale(root: Path = PROTO_ROOT) -> list[str]:
    """Generated files that differ from (or are missing next to) what their ``.proto`` gives."""
    protos = find_protos(root)
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        _generate_into(Path(tmp), protos)
        for produced in sorted(Path(tmp).rglob("*")):
            if not produced.is_file():
                continue
            target = SRC_ROOT / produced.relative_to(tmp)
            if not target.exists():
                problems.append(f"{target.relative_to(SRC_ROOT)}: missing")
            elif not filecmp.cmp(produced, target, shallow=False):
                problems.append(f"{target.relative_to(SRC_ROOT)}: stale")
    for directory in _package_dirs(root):
        if not (directory / "__init__.py").exists():
            problems.append(f"{(directory / '__init__.py').relative_to(SRC_ROOT)}: missing")
    return sorted(set(problems))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kgpu.kubelet.protogen", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if any stub is stale")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print("run: python -m kgpu.kubelet.protogen", file=sys.stderr)
        return 1 if problems else 0
    for path in generate():
        print(path.relative_to(SRC_ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
