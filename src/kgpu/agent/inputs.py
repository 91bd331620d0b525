"""The agent's inputs from files: node labels and change detection.

On a real node the labels come from the Node object; ``--labels-file`` stands in for it (a
downward-API or sidecar-written file, or a test rewriting it), so a label change such as
``nvidia.com/device-plugin.config`` reaches the agent the same way a config change does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from kgpu.errors import FieldError, FieldProblem
from kgpu.node.labels import is_valid_label_key, is_valid_label_value
from kgpu.userfiles import parse_json, parse_yaml, read_bytes, read_text


def parse_label_args(items: Iterable[str]) -> dict[str, str]:
    """``["k=v", ...]`` -> mapping; FieldError naming the bad item.

    Keys and values must be what the API server would accept on a Node, since they select the
    device-plugin and MIG configs exactly as the Node's labels would.
    """
    out: dict[str, str] = {}
    for i, item in enumerate(items):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        path = f"--label[{i}]"
        if not sep or not key:
            raise FieldError(FieldProblem(f"{item!r} is not key=value", path=path))
        if not is_valid_label_key(key):
            raise FieldError(
                FieldProblem(
                    f"{key!r} is not a valid label key: an optional DNS-subdomain prefix and '/', "
                    "then at most 63 letters, digits, '-', '_' or '.', starting and ending with "
                    "a letter or digit",
                    path=path,
                )
            )
        if not is_valid_label_value(value):
            raise FieldError(
                FieldProblem(
                    f"{value!r} is not a valid label value: at most 63 letters, digits, '-', '_' "
                    "or '.', starting and ending with a letter or digit (or empty)",
                    path=path,
                )
            )
        out[key] = value
    return out


def read_labels_file(path: Path) -> dict[str, str]:
    """``key=value`` lines (``#`` comments allowed), or a JSON/YAML mapping of strings."""
    if not path.exists():
        return {}
    text = read_text(path)  # a regular file, bounded, UTF-8 (FieldError naming it)
    stripped = text.strip()
    if not stripped:
        return {}
    if stripped.startswith("{") or (":" in stripped.splitlines()[0] and "=" not in stripped):
        file = str(path)
        data = parse_json(stripped, file=file) if stripped.startswith("{") else None
        if data is None:
            docs = parse_yaml(stripped, file=file)
            data = docs[0] if len(docs) == 1 else None
        if not isinstance(data, dict):
            raise FieldError(FieldProblem("expected a mapping of labels", file=str(path)))
        return {str(k): "" if v is None else str(v) for k, v in data.items()}
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise FieldError(FieldProblem(f"line {n}: {line!r} is not key=value", file=str(path)))
        out[key.strip()] = value.strip()
    return out


def fingerprint(paths: Iterable[Path]) -> tuple[tuple[str, str], ...]:
    """Content digests of the files (missing ones included), to notice any change."""
    out = []
    for path in paths:
        try:
            digest = hashlib.sha256(read_bytes(path)).hexdigest()
        except FieldError:  # missing, unreadable, not a regular file (a FIFO never blocks)
            digest = "-"
        out.append((str(path), digest))
    return tuple(out)
