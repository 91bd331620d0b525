"""``--report FILE.html``: a picture of the cluster in one self-contained HTML file.

Pure functions from JSON-shaped data to HTML: :mod:`~kgpu.sim.html.capture` records the
cluster after each step of a run (:func:`record_run`) as a *picture* document;
:mod:`~kgpu.sim.html.plan` makes one from ``kgpu plan``'s node view; :mod:`~kgpu.sim.html.page`
turns a picture into the page (:func:`render_page`), with the plots of
:mod:`~kgpu.sim.html.plots`. The page needs no network: CSS, script and SVG are inline.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kgpu.errors import KgpuError
from kgpu.sim.html.capture import DEFAULT_MAX_NODES, Recorder, record_run
from kgpu.sim.html.page import render_page
from kgpu.sim.html.plan import plan_picture


def check_target(path: Path) -> None:
    """Refuse a report path that cannot be written before a long run starts."""
    if path.is_dir():
        raise KgpuError(f"--report {path}: is a directory; name an .html file")
    if not path.parent.is_dir():
        raise KgpuError(f"--report {path}: folder {path.parent} does not exist")


def write_report(path: Path, picture: Mapping[str, Any]) -> int:
    """Render ``picture`` and write it to ``path``; the number of bytes written."""
    data = render_page(picture).encode()
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise KgpuError(f"--report {path}: cannot write: {exc.strerror or exc}") from None
    return len(data)


__all__ = [
    "DEFAULT_MAX_NODES",
    "Recorder",
    "check_target",
    "plan_picture",
    "record_run",
    "render_page",
    "write_report",
]
