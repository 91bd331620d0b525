"""The import contract: kgpu's layers import one way (docs/architecture.md).

Every ``import`` and ``from ... import`` in ``src/kgpu`` counts, at module level or inside a
function, and so does a module named in a string to ``importlib.import_module`` or
``__import__`` (which this contract forbids for kgpu's own modules: everything ships in one
wheel; optional third-party libraries such as ``pynvml`` may still be probed by name). A new
package must be placed in a layer here before it can be imported by anything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "kgpu"

#: Lowest first. A package may import packages of lower layers, and of its own layer only when
#: the layer lists it as ordered (core) -- shells of one layer never import each other.
LAYERS: list[tuple[str, tuple[str, ...], bool]] = [
    # name, packages (in order, for ordered layers), ordered?
    (
        "core",
        (
            "errors",
            "regex",
            "userfiles",
            "quantity",
            "releases",
            "store",
            "hardware",
            "config",
            "node",
            "dra",
            "computedomain",
            "promql",
            "autoscaling",
            "manifests",
        ),
        True,
    ),
    ("shells", ("kubelet", "metrics", "cluster"), False),
    ("drivers", ("drivers",), True),
    ("processes", ("testing", "agent", "controller", "sim"), False),
    ("cli", ("cli", "__main__"), True),
]


def rank(package: str) -> tuple[int, int, bool]:
    for i, (_, packages, ordered) in enumerate(LAYERS):
        if package in packages:
            return i, packages.index(package), ordered
    raise AssertionError(f"package kgpu.{package} is in no layer: add it to LAYERS")


def allowed(src: str, dst: str) -> bool:
    if src == dst:
        return True
    s_layer, s_pos, ordered = rank(src)
    d_layer, d_pos, _ = rank(dst)
    if d_layer != s_layer:
        return d_layer < s_layer
    return ordered and d_pos < s_pos


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import in a file, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    me = module_name(path).split(".")
    package = me if path.name == "__init__.py" else me[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from kgpu import agent` imports kgpu.agent
                yield node.lineno, f"{target}.{alias.name}"
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                arg = node.args[0] if node.args else None
                literal = arg.value if isinstance(arg, ast.Constant) else "<computed>"
                if not isinstance(literal, str) or literal.split(".")[0] in ("kgpu", "<computed>"):
                    yield node.lineno, f"<by name> {literal}"


def package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "kgpu" or len(parts) < 2:
        return None
    return parts[1]


def source_files() -> list[Path]:
    return [p for p in sorted(SRC.rglob("*.py")) if "proto" not in p.relative_to(SRC).parts[:2]]


def edges() -> list[tuple[str, int, str, str, str]]:
    """(file, line, from package, to package, module) for every kgpu-internal import."""
    out = []
    for path in source_files():
        src_pkg = package_of(module_name(path))
        if src_pkg is None:
            continue
        for line, target in imports(path):
            rel = str(path.relative_to(SRC.parent))
            if target.startswith("<by name>"):
                out.append((rel, line, src_pkg, "<by name>", target))
                continue
            dst = package_of(target)
            if dst is not None and dst != "__version__":
                out.append((rel, line, src_pkg, dst, target))
    return out


def test_every_package_has_a_layer() -> None:
    for path in sorted(SRC.iterdir()):
        name = path.stem if path.suffix == ".py" else path.name
        if (name.startswith("_") and name != "__main__") or path.suffix not in ("", ".py"):
            continue
        if path.is_dir() and not (path / "__init__.py").exists():
            continue
        rank(name)


def test_no_module_is_loaded_by_name() -> None:
    by_name = [f"{f}:{line}: {mod}" for f, line, _, dst, mod in edges() if dst == "<by name>"]
    assert not by_name, "load modules with plain imports:\n" + "\n".join(by_name)


def test_imports_run_one_way() -> None:
    bad = [
        f"{f}:{line}: kgpu.{src} -> {mod}"
        for f, line, src, dst, mod in edges()
        if dst != "<by name>" and not allowed(src, dst)
    ]
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    ("src", "dst", "ok"),
    [
        ("dra", "node", True),
        ("node", "dra", False),
        ("kubelet", "metrics", False),
        ("metrics", "cluster", False),
        ("drivers", "kubelet", True),
        ("kubelet", "drivers", False),
        ("sim", "agent", False),
        ("cli", "sim", True),
        ("store", "cluster", False),
        ("manifests", "computedomain", True),
        ("computedomain", "manifests", False),
    ],
)
def test_the_rule_itself(src: str, dst: str, ok: bool) -> None:
    assert allowed(src, dst) is ok


def test_the_checker_sees_imports_inside_functions(tmp_path: Path) -> None:
    f = tmp_path / "mod.py"
    f.write_text(
        "def f():\n    from kgpu.sim import x\n    import importlib\n"
        "    importlib.import_module('kgpu.agent')\n"
    )
    # the parser is path-agnostic below SRC; feed it through ast directly
    found = []
    for node in ast.walk(ast.parse(f.read_text())):
        if isinstance(node, ast.ImportFrom):
            found.append(node.module)
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
            found.append("<by name>")
    assert found == ["kgpu.sim", "<by name>"]
