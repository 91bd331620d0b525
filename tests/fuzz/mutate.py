"""Hypothesis strategies that turn a good input file into a bad one.

A seed file is parsed, changed structurally at a few places (a key dropped, renamed or its value
replaced by another type, a huge number, a long string, NUL, ``../``, a copy of another part of
the file, a deeply nested value, an alias bomb), dumped back to YAML, and sometimes damaged as
text afterwards (a line repeated — a duplicated key —, the file cut short, bytes that are not
UTF-8, a byte-order mark). The values are the shapes that once broke kgpu (issue 11) and their
neighbours; numbers are small or past every limit (a legitimate scenario of 15,000 nodes takes
a minute: slow, not a bug), and the limits themselves are tried from both sides by the corpus
(tests/data/fuzz).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import yaml
from hypothesis import strategies as st

Draw = Callable[..., Any]

DEEP = "KGPUFUZZDEEP"  # placeholders replaced in the dumped text (the dumper would recurse)
BOMB = "KGPUFUZZBOMB"

HUGE_NUMBERS: list[Any] = [
    -1,
    0,
    1,
    2,
    2**31 - 1,
    2**31,
    2**32,
    2**53 + 1,
    2**63,
    2**64,
    10**12,
    10**30,
    10**400,
    -(2**63),
    1.5,
    1e308,
    -1e-308,
    float("inf"),
    float("nan"),
    100_001,
]

ODD_STRINGS: list[str] = [
    "",
    " ",
    "a" * 64,
    "a" * 254,
    "a" * 256,
    "a" * 5000,
    "x\x00y",
    "\x00",
    "../../../../etc/passwd",
    "../x",
    "a/../../b",
    "/dev/zero",
    "/dev/null",
    "/",
    ".",
    "..",
    "nvidia.com/gpu",
    "UPPER",
    "ünïcödé",
    "\U0001d518",
    "1e3",
    "0x1F",
    "yes",
    "~",
    "*",
    "-",
    "a:b",
    "${HOME}",
    "{{ .Values.x }}",
    "\n",
    "'\"",
    "[",
    "%s%n",
    "9" * 400,
    "1Gi",
    "-1",
    "1e400",
    "device.driver == 'gpu.nvidia.com' && " * 40,
]

SCALARS = st.one_of(
    st.sampled_from(HUGE_NUMBERS),
    st.sampled_from(ODD_STRINGS),
    st.none(),
    st.booleans(),
    # small, or past every limit: a legitimate count of 15,000 nodes is slow, not a bug
    st.integers(min_value=-1000, max_value=1000),
    st.integers(min_value=2**31, max_value=2**70),
    st.text(max_size=40),
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a document: keys of mappings and indices of lists, depth first."""
    out: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            out.append((*prefix, key))
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.append((*prefix, index))
            out.extend(_paths(value, (*prefix, index)))
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


def _bomb_text(levels: int, width: int) -> str:
    """A flow sequence whose last element stands for width**levels nodes through aliases."""
    parts = [f"&b0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        parts.append(f"&b{level} [{', '.join([f'*b{level - 1}'] * width)}]")
    return "[" + ", ".join(parts) + "]"


@st.composite
def replacement(draw: Draw, doc: Any) -> Any:
    """A value to put somewhere: odd scalars, containers, a copy of another part, or a marker
    for a deep value / an alias bomb (filled in after dumping)."""
    kind = draw(
        st.sampled_from(
            ["scalar", "scalar", "scalar", "scalar", "copy", "list", "map", "deep", "bomb"]
        )
    )
    if kind == "scalar":
        return draw(SCALARS)
    if kind == "copy":
        paths = _paths(doc)
        if not paths:
            return draw(SCALARS)
        path = paths[draw(st.integers(0, len(paths) - 1))]
        return copy.deepcopy(_parent(doc, path)[path[-1]])
    if kind == "list":
        return draw(st.lists(SCALARS, max_size=3))
    if kind == "map":
        return draw(
            st.dictionaries(st.sampled_from(["a", "name", "kind", "x"]), SCALARS, max_size=3)
        )
    if kind == "deep":
        depth = draw(st.sampled_from([50, 99, 100, 101, 200, 1000, 5000, 50_000]))
        style = draw(st.sampled_from(["seq", "map"]))
        return f"{DEEP}-{style}-{depth}"
    levels = draw(st.sampled_from([3, 5, 9]))
    width = draw(st.sampled_from([3, 10]))
    return f"{BOMB}-{levels}-{width}"


def _fill_markers(text: str) -> str:
    out = []
    for line in text.split("\n"):
        for marker in (DEEP, BOMB):
            start = line.find(marker)
            if start < 0:
                continue
            end = start
            while end < len(line) and (line[end].isalnum() or line[end] == "-"):
                end += 1
            token = line[start:end]
            if start > 0 and end < len(line) and line[start - 1] == line[end] == '"':
                start, end = start - 1, end + 1  # a JSON string
            _, a, b = token.split("-")
            if marker == DEEP:
                depth = int(b)
                value = (
                    "[" * depth + "]" * depth if a == "seq" else "{a: " * depth + "1" + "}" * depth
                )
            else:
                value = _bomb_text(int(a), int(b))
            line = line[:start] + value + line[end:]
        out.append(line)
    return "\n".join(out)


@st.composite
def structural(draw: Draw, docs: list[Any]) -> list[Any]:
    """``docs`` with one to four places changed."""
    docs = copy.deepcopy(docs)
    for _ in range(draw(st.integers(1, 4))):
        if not docs:
            docs.append(draw(replacement([])))
            continue
        d = draw(st.integers(0, len(docs) - 1))
        paths = _paths(docs[d])
        op = draw(
            st.sampled_from(["replace", "replace", "replace", "drop", "rename", "add", "root"])
        )
        if op == "root" or not paths:
            docs[d] = draw(replacement(docs[d]))
            continue
        path = paths[draw(st.integers(0, len(paths) - 1))]
        parent = _parent(docs[d], path)
        key = path[-1]
        if op == "replace":
            parent[key] = draw(replacement(docs[d]))
        elif op == "drop":
            del parent[key]
        elif op == "rename" and isinstance(parent, dict):
            new = draw(st.sampled_from(["", "x", str(key) + "s", str(key)[:-1], "kind", 7, None]))
            if new not in parent:
                parent[new] = parent.pop(key)
        elif op == "add" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "name", "count", "replicas", "apply"]))] = draw(
                replacement(docs[d])
            )
        elif op == "add" and isinstance(parent, list):
            parent.append(draw(replacement(docs[d])))
    return docs


def dump(docs: list[Any]) -> str:
    text = yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True, width=10_000)
    return _fill_markers(text)


@st.composite
def textual(draw: Draw, text: str) -> bytes:
    """The file's bytes, sometimes damaged below the YAML level."""
    data = text.encode("utf-8")
    op = draw(
        st.sampled_from(["none", "none", "none", "dupline", "truncate", "badbytes", "bom", "tab"])
    )
    lines = data.split(b"\n")
    if op == "dupline" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        lines.insert(i, lines[i])
        return b"\n".join(lines)
    if op == "truncate" and data:
        return data[: draw(st.integers(0, len(data) - 1))]
    if op == "badbytes":
        at = draw(st.integers(0, len(data)))
        junk = draw(st.sampled_from([b"\xff\xfe", b"\xc3", b"\x80\x81", b"\xed\xa0\x80", b"\x00"]))
        return data[:at] + junk + data[at:]
    if op == "bom":
        return draw(st.sampled_from([b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"])) + data
    if op == "tab" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        lines[i] = b"\t" + lines[i]
        return b"\n".join(lines)
    return data


@st.composite
def mutated_yaml(draw: Draw, docs: list[Any]) -> bytes:
    """A damaged version of the documents, as the bytes of a file."""
    return draw(textual(dump(draw(structural(docs)))))


@st.composite
def mutated_json(draw: Draw, doc: Any) -> bytes:
    """A damaged JSON document (a machine snapshot)."""
    changed = draw(structural([doc]))[0]
    try:
        text = json.dumps(changed, indent=1)
    except (TypeError, ValueError):
        text = json.dumps(str(changed))
    return draw(textual(_fill_markers(text)))
