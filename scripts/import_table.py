"""Print the import table of kgpu's packages (docs/architecture.md): for each package, the
packages its modules import and how many import statements do (at module level or inside
functions), marking every edge against the layer order of ``tests/test_layers.py`` with ``✗``.

Usage: python scripts/import_table.py [REV]   (a git revision; default: the working tree)
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _layers() -> object:
    spec = importlib.util.spec_from_file_location("test_layers", ROOT / "tests" / "test_layers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sources(rev: str | None) -> dict[str, str]:
    """path -> text of every ``src/kgpu/**.py`` but the generated stubs, at ``rev``."""
    if rev is None:
        paths = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "src" / "kgpu").rglob("*.py"))
        texts = {p: (ROOT / p).read_text() for p in paths}
    else:
        listing = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", rev, "src/kgpu"],
            cwd=ROOT, check=True, capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        texts = {
            p: subprocess.run(
                ["git", "show", f"{rev}:{p}"], cwd=ROOT, check=True, capture_output=True, text=True
            ).stdout
            for p in listing
            if p.endswith(".py")
        }
    return {p: t for p, t in texts.items() if "/proto/" not in p}


def package_edges(texts: dict[str, str]) -> dict[str, Counter[str]]:
    out: dict[str, Counter[str]] = {}
    for path, text in texts.items():
        parts = Path(path).with_suffix("").parts[1:]  # kgpu, pkg, ...
        src = parts[1] if len(parts) > 1 else ""
        if not src or src == "__init__":
            continue
        package = list(parts[:-1]) if parts[-1] != "__init__" else list(parts[:-1])
        counts = out.setdefault(src, Counter())
        for node in ast.walk(ast.parse(text)):
            targets: set[str] = set()
            if isinstance(node, ast.Import):
                targets = {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package[: len(package) - node.level + 1], base])
                targets = {base} | {f"{base}.{a.name}" for a in node.names} if base == "kgpu" else {base}
            dsts = {t.split(".")[1] for t in targets if t.startswith("kgpu.")}
            for dst in dsts - {src, "__version__"}:
                counts[dst] += 1
    return out


def table(rev: str | None) -> str:
    layers = _layers()
    edges = package_edges(sources(rev))
    order = [p for _, pkgs, _ in layers.LAYERS for p in pkgs]  # type: ignore[attr-defined]
    rows = ["| package | imports (statements); ✗ = against the layer order |", "|---|---|"]
    against = 0
    for src in sorted(edges, key=lambda p: order.index(p) if p in order else len(order)):
        cells = []
        for dst in sorted(edges[src], key=lambda p: order.index(p) if p in order else len(order)):
            bad = not layers.allowed(src, dst)  # type: ignore[attr-defined]
            against += edges[src][dst] if bad else 0
            cells.append(f"{'✗ ' if bad else ''}{dst} ({edges[src][dst]})")
        rows.append(f"| {src} | {', '.join(cells) or '-'} |")
    rows.append(f"\n{against} import statement(s) against the layer order.")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(sys.argv[1] if len(sys.argv) > 1 else None))
