"""Check that every ELF file under a root is built for one architecture.

    python elf-arch.py --arch arm64 ROOT

deploy/container/build.sh runs it on the mounted image: an image assembled for arm64 on an
amd64 host (docs/install.md "arm64") must not carry a single x86-64 binary or library, which
would fail only when that code path first loads it on a Grace node. Exit 1 listing the
offenders (at most 20 named), 0 with a count otherwise. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from pathlib import Path

#: ELF e_machine values (System V ABI)
MACHINES = {"amd64": 62, "arm64": 183}
NAMES = {v: k for k, v in MACHINES.items()} | {3: "i386", 40: "arm", 243: "riscv64"}


def elf_machine(path: Path) -> int | None:
    """The e_machine of an ELF file, None for anything else."""
    try:
        with path.open("rb") as f:
            head = f.read(20)
    except OSError:
        return None
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order = "little" if head[5] == 1 else "big"
    return int.from_bytes(head[18:20], order)


def scan(root: Path, want: int) -> tuple[int, list[tuple[str, int]]]:
    """How many ELF files there are under root, and those not for ``want``."""
    count: int = 0
    wrong: list[tuple[str, int]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == str(root):
            dirnames[:] = [d for d in dirnames if d not in ("proc", "sys", "dev")]
        for name in filenames:
            path = Path(dirpath, name)
            try:
                if not stat.S_ISREG(path.lstat().st_mode):
                    continue
            except OSError:
                continue
            machine = elf_machine(path)
            if machine is None:
                continue
            count += 1
            if machine != want:
                wrong.append((str(path.relative_to(root)), machine))
    return count, wrong


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=sorted(MACHINES), required=True)
    parser.add_argument("root", type=Path)
    args = parser.parse_args()
    want = MACHINES[args.arch]
    count, wrong = scan(args.root, want)
    if wrong:
        for rel, machine in wrong[:20]:
            name = NAMES.get(machine, machine)
            print(f"elf-arch: {rel}: {name}, not {args.arch}", file=sys.stderr)
        print(f"elf-arch: {len(wrong)} of {count} ELF files are not {args.arch}", file=sys.stderr)
        sys.exit(1)
    if count == 0:
        print(f"elf-arch: no ELF file under {args.root}", file=sys.stderr)
        sys.exit(1)
    print(f"elf-arch: all {count} ELF files under {args.root} are {args.arch}")
