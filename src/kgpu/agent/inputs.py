"""The agent's inputs from files: node labels and change detection.

On a real node the labels come from the Node object; ``--labels-file`` stands in for it (a
downward-API or sidecar-written file, or a test rewriting it), so a label change such as
``nvidia.com/device-plugin.config`` reaches the agent the same way a config change does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from kgpu.config.loader import configmap_volume_files
from kgpu.errors import FieldError, FieldProblem
from kgpu.userfiles import parse_json, parse_yaml, read_bytes, read_text


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
    """Content digests of the files (missing ones included), to notice any change. A
    directory (a mounted ConfigMap) is digested key by key, through its ``..data`` link, so the
    kubelet's atomic swap of that link is a change like any edit."""
    out = []
    for path in paths:
        if path.is_dir():
            digest = hashlib.sha256()
            for key in configmap_volume_files(path):
                digest.update(key.name.encode() + b"\0")
                try:
                    digest.update(hashlib.sha256(read_bytes(key)).digest())
                except FieldError:
                    digest.update(b"-")
            out.append((str(path), digest.hexdigest()))
            continue
        try:
            file_digest = hashlib.sha256(read_bytes(path)).hexdigest()
        except FieldError:  # missing, unreadable, not a regular file (a FIFO never blocks)
            file_digest = "-"
        out.append((str(path), file_digest))
    return tuple(out)
