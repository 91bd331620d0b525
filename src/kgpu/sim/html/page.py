"""The picture document -> one self-contained HTML page (inline CSS, JS and SVG; no network).

What does not change with the selected step is drawn here, in Python: the header, the step
list, the legend, the plots and a table of every step (all readable without JavaScript). The
cluster map changes with the step, so the page carries each step's nodes as compact JSON and a
small script draws the chosen one; the final state is drawn on load.

:mod:`~kgpu.sim.html.encode` packs those steps so the file stays small.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from html import escape
from importlib import resources
from typing import Any

from kgpu.sim.html.colors import assign
from kgpu.sim.html.encode import pack
from kgpu.sim.html.plots import format_duration, plots_html, series, workload_names

Obj = dict[str, Any]

SAMPLE_FILL = ' fill="#9ecae1"'
#: Workloads named in the legend at most (the cells' tooltips name every pod's workload).
LEGEND_MAX = 60


@cache
def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _json_for_script(data: Any) -> str:
    """JSON safe inside ``<script>``: no ``</script>`` or ``<!--`` can appear."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _symbols() -> str:
    """The key to the cell drawings, each drawn as in the map."""

    def item(svg: str, text: str) -> str:
        return (
            f'<li><svg width="30" height="20" viewBox="0 0 30 20" aria-hidden="true">{svg}'
            f"</svg>{escape(text)}</li>"
        )

    frame = '<rect class="gf" x="0.5" y="0.5" width="29" height="19"/>'
    return "".join(
        [
            item(frame, "free GPU or device"),
            item(
                '<rect class="gf off" x="0.5" y="0.5" width="29" height="19"/>',
                "not advertised (no device plugin)",
            ),
            item(
                frame
                + "".join(
                    f'<rect class="slot{" free" if i == 3 else ""}" x="{1 + i * 7}" y="1" '
                    f'width="7" height="18"{"" if i == 3 else SAMPLE_FILL}/>'
                    for i in range(4)
                ),
                "time-sliced / MPS: one column per replica (TS×4, MPS×8)",
            ),
            item(
                frame
                + '<rect class="mig" x="1" y="1" width="11" height="18"/>'
                + '<rect class="mig" x="12.5" y="1" width="5" height="18"/>'
                + '<rect class="mig" x="18" y="1" width="11" height="18"/>',
                "MIG devices at their memory-slice placements",
            ),
            item(frame + '<rect class="dra" x="2.5" y="2.5" width="25" height="15"/>', "DRA claim"),
            item(
                '<rect class="gf bad" x="1" y="1" width="28" height="18"/>'
                '<rect class="hatch" x="1" y="1" width="28" height="18"/>',
                "unhealthy (XID)",
            ),
        ]
    )


HATCH = (
    '<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>'
    '<pattern id="kgpu-hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
    'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fde0dc" fill-opacity=".55"/>'
    '<line x1="0" y1="0" x2="0" y2="6" stroke="#b3261e" stroke-width="2.5"/></pattern>'
    "</defs></svg>"
)


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _legend(data: Mapping[str, Any]) -> str:
    workloads = data["workloads"]
    is_sim = data.get("kind", "sim") == "sim"
    items = "".join(
        f'<li class="wl"><span class="sw" style="background:{color}"></span>{escape(name)}</li>'
        for name, color in workloads[:LEGEND_MAX]
    )
    more = (
        f'<li class="more">+{len(workloads) - LEGEND_MAX} more workloads (see tooltips)</li>'
        if len(workloads) > LEGEND_MAX
        else ""
    )
    none = (
        '<li class="note">no pod holds a GPU in any step</li>' if is_sim and not workloads else ""
    )
    return (
        '<h2 class="vh" id="legend-title">Legend</h2>'
        f'<ul class="legend" id="workloads" aria-label="workload colours">{items}{more}{none}</ul>'
        f'<ul class="legend" id="symbols" aria-label="cell symbols">{_symbols()}</ul>'
        '<p class="note">A cell is one GPU (number below it); hover a cell or a replica for its '
        "pod, device and UUID. Nodes are grouped by node group, then by NVLink clique.</p>"
    )


def _step_options(frames: Sequence[Mapping[str, Any]]) -> str:
    last = len(frames) - 1
    return "".join(
        f'<option value="{i}"{" selected" if i == last else ""}>'
        f"[{i}] t={format_duration(f['time'])} · {escape(str(f['title']))}</option>"
        for i, f in enumerate(frames)
    )


def _steps_table(frames: Sequence[Mapping[str, Any]]) -> str:
    rows = "".join(
        f"<tr><td>{i}</td><td>{format_duration(f['time'])}</td><td>{escape(str(f['title']))}"
        f"</td><td>{escape(', '.join(f'{k} {v}' for k, v in f['phases'].items()) or '-')}</td>"
        f"<td>{sum(g['nodes'] for g in f['groups'])}</td></tr>"
        for i, f in enumerate(frames)
    )
    return (
        f"<details><summary>Every step ({len(frames)})</summary>"
        '<table class="steps"><thead><tr><th>#</th><th>time</th><th>step</th><th>pods</th>'
        f"<th>nodes</th></tr></thead><tbody>{rows}</tbody></table></details>"
    )


def render_page(picture: Mapping[str, Any]) -> str:
    """The whole HTML document of a picture (see :mod:`kgpu.sim.html.capture`)."""
    frames = list(picture.get("frames", ()))
    if not frames:
        raise ValueError("a picture needs at least one frame")
    points = series(picture)
    names = workload_names(points)
    for frame in frames:
        names.update((frame.get("workloads") or {}).values())
    colors = assign(names)
    data = pack(picture, colors)
    final = frames[-1]
    gpus = sum(g["gpus"] for g in final["groups"])
    nodes = sum(g["nodes"] for g in final["groups"])
    is_sim = picture.get("kind", "sim") == "sim"
    title = str(picture.get("title") or "kgpu report")
    description = str(picture.get("description") or "")
    meta = f"{_plural(nodes, 'node')} · {_plural(gpus, 'GPU')}"
    if is_sim:
        phases = ", ".join(f"{v:,} {k}" for k, v in final["phases"].items()) or "no pods"
        steps = _plural(len(frames) - 1, "step")
        meta = (
            f"kgpu sim · {steps} · t={format_duration(final['time'])} at the end · {meta} · "
            f"pods: {phases}"
        )
    else:
        meta = f"kgpu plan · {meta}"
    stepbar = ""
    plots = ""
    if is_sim:
        stepbar = (
            '<nav class="stepbar" aria-label="steps"><label for="step">Step</label>'
            '<button type="button" id="prev" aria-label="previous step">◀</button>'
            f'<select id="step">{_step_options(frames)}</select>'
            '<button type="button" id="next" aria-label="next step">▶</button>'
            '<span class="now" id="now"></span></nav>'
        )
        plots = f'<h2 id="over-time">Over time</h2>{plots_html(points, colors)}'
    head_title = f"kgpu sim: {title}" if is_sim else title
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(head_title)}</title><style>{_asset('report.css')}</style></head>"
        f"<body>{HATCH}<main>"
        f"<header><h1>{escape(head_title)}</h1>"
        + (f'<p class="sub">{escape(description)}</p>' if description else "")
        + f'<p class="meta">{escape(meta)}</p></header>'
        + stepbar
        + _legend(data)
        + '<h2 id="map-title">Cluster map</h2>'
        '<noscript><p class="note">The cluster map is drawn by a script in this file; with '
        "scripts off, the plots and the table of steps still show the run.</p></noscript>"
        '<div id="map"></div>'
        '<section id="stepinfo" class="stepinfo" aria-live="polite"></section>'
        + plots
        + (_steps_table(frames) if is_sim else "")
        + "</main>"
        f'<script type="application/json" id="kgpu-data">{_json_for_script(data)}</script>'
        f"<script>{_asset('report.js')}</script></body></html>\n"
    )
