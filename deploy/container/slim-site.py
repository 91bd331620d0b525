"""Trim an installed kgpu environment to what a node runs; run once, right after ``pip install
--no-compile``, in the same image layer (so what it removes never reaches the image).

    python slim-site.py [SITE_PACKAGES]     # default: this interpreter's purelib

Standard library only: it runs inside the image (amd64) and on the build host against an
unpacked arm64 tree, where nothing can be imported. Each rule, and what it saves (measured with
the ``kubernetes`` 37 client, docs/install.md "Image size"):

* ``kubernetes/aio``: the client's asyncio twin; kgpu uses the synchronous ``ApiClient`` only
  (src/kgpu/cluster/kube.py), and ``import kubernetes`` never loads it (about 42 MB of source);
* ``aiohttp`` and the distributions only it needs: the asyncio client's transport (12 MB);
* test suites (``tests`` directories; kgpu's own ``kgpu.testing`` fakes stay), type stubs
  (``*.pyi``) and typing markers: read by test runners and type checkers, never at run time;
* byte code: written for every module kept (the image sets ``PYTHONDONTWRITEBYTECODE``, so
  nothing is compiled at run time), except the generated API and model classes of the
  kubernetes client, which keep only byte code (``.pyc`` beside the module, the source
  dropped): ``import kubernetes`` loads all of them on every start (2 s of CPU when compiled
  at start, measured), but nobody reads their source in a traceback.

The base image's pip, setuptools and wheel are left untouched (they live in a lower layer).
Prints what it removed and the size before and after.
"""

from __future__ import annotations

import compileall
import shutil
import sys
import sysconfig
from pathlib import Path

#: kubernetes client packages kept as byte code only
SOURCELESS = ("kubernetes/client/api", "kubernetes/client/models")
#: removed outright
UNUSED = ("kubernetes/aio",)
#: distributions only ``kubernetes/aio`` uses (aiohttp and what it alone requires), removed
#: with their metadata; ``pip check`` then names kubernetes' unmet aiohttp requirement
UNUSED_DISTRIBUTIONS = (
    "aiohttp",
    "aiohttp_retry",
    "aiosignal",
    "aiohappyeyeballs",
    "frozenlist",
    "multidict",
    "yarl",
    "propcache",
)
#: the installers the base image brings, left as they are
BASE_DISTRIBUTIONS = {"pip", "setuptools", "wheel"}


def size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def base_entries(site: Path) -> set[str]:
    """Top-level names of the base image's own installers (pip, setuptools, wheel): they are
    in a lower layer already, and rewriting them here would only copy them into this one."""
    names: set[str] = set()
    for info in site.glob("*.dist-info"):
        if info.name.split("-")[0].lower() not in BASE_DISTRIBUTIONS:
            continue
        names.add(info.name)
        record = info / "RECORD"
        if record.exists():
            for line in record.read_text().splitlines():
                names.add(line.split(",")[0].split("/")[0])
    return names


def slim(site: Path) -> list[str]:
    removed: list[str] = []
    keep = base_entries(site)
    tops = [t for t in sorted(site.iterdir()) if t.name not in keep]
    for rel in UNUSED:
        if (site / rel).is_dir():
            shutil.rmtree(site / rel)
            removed.append(rel)
    for info in sorted(site.glob("*.dist-info")):
        name = info.name.split("-")[0].lower().replace(".", "_")
        if name not in UNUSED_DISTRIBUTIONS:
            continue
        files = [line.rsplit(",", 2)[0] for line in (info / "RECORD").read_text().splitlines()]
        for entry in sorted({Path(f).parts[0] for f in files if f and not f.startswith("..")}):
            path = site / entry
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        removed.append(info.name)
    tops = [t for t in tops if t.exists()]
    for top in tops:
        if not top.is_dir() or top.name.startswith("kgpu"):
            continue
        for tests in sorted(top.glob("**/tests")):
            if tests.is_dir():
                shutil.rmtree(tests)
                removed.append(str(tests.relative_to(site)))
        for stub in [*top.rglob("*.pyi"), *top.rglob("py.typed")]:
            stub.unlink()
    for top in tops:
        for pycache in list(top.rglob("__pycache__")) if top.is_dir() else []:
            shutil.rmtree(pycache)
    # sourceless byte code for the generated client classes ...
    for rel in SOURCELESS:
        package = site / rel
        if package.is_dir():
            if not compileall.compile_dir(package, quiet=1, legacy=True, workers=0):
                raise SystemExit(f"slim-site: cannot compile {package}")
            for source in package.rglob("*.py"):
                source.unlink()
    # ... and byte code beside the source for everything else (the legacy .pyc files above
    # have no source left, so compile_dir passes over them)
    for top in tops:
        ok = (
            compileall.compile_dir(top, quiet=1, workers=0)
            if top.is_dir()
            else top.suffix != ".py" or compileall.compile_file(top, quiet=1)
        )
        if not ok:
            raise SystemExit(f"slim-site: cannot compile {top}")
    return removed


def main(argv: list[str]) -> int:
    site = Path(argv[1]) if len(argv) > 1 else Path(sysconfig.get_paths()["purelib"])
    if not (site / "kgpu").is_dir():
        print(f"slim-site: no kgpu under {site}", file=sys.stderr)
        return 1
    before = size(site)
    removed = slim(site)
    after = size(site)
    print(f"slim-site: {site}: {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB")
    for rel in removed:
        print(f"slim-site:   removed {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
