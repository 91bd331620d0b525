"""The simulator's modules import one another without a circle: each can be read (and
changed) knowing only what it imports. Every import counts: at module level, inside
functions and under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

SIM = Path(__file__).resolve().parents[2] / "src" / "kgpu" / "sim"


def module_of(path: Path) -> str:
    parts = ["kgpu", *path.relative_to(SIM.parent).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sim_imports(path: Path, modules: set[str]) -> set[str]:
    """The ``kgpu.sim`` modules ``path`` imports (``from kgpu.sim import x`` names module
    ``kgpu.sim.x`` when there is one)."""
    me = module_of(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], base]
                ).rstrip(".")
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names
            ]
        out.update(n for n in names if n in modules and n != me)
    return out


def graph() -> dict[str, set[str]]:
    paths = sorted(SIM.rglob("*.py"))
    modules = {module_of(p) for p in paths}
    return {module_of(p): sim_imports(p, modules) for p in paths}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_simulator_has_no_import_cycles() -> None:
    g = graph()
    assert "kgpu.sim.simulation" in g and "kgpu.sim.controllers.job" in g
    assert cycles(g) == []


def test_the_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
