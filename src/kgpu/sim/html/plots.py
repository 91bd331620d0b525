"""The autoscaling story over the simulated clock: inline SVG line charts, drawn in Python.

Input is a list of series points (:data:`kgpu.sim.html.capture` documents their keys), one per
step today and as many as a later source adds (an autoscaler's scans, a metrics history): each
chart takes whatever points carry its key, sorted by time. Values hold until the next point
(step lines), because the cluster's counts change at instants, not gradually; points at the same
instant draw as a vertical jump.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from kgpu.sim.html.colors import assign, fill, stroke

Obj = dict[str, Any]

WIDTH, HEIGHT = 560, 190
LEFT, RIGHT, TOP, BOTTOM = 46, 14, 10, 26
#: Lines per chart at most (the largest); the rest are named in a note.
MAX_LINES = 8
#: Markers (with tooltips) per line at most; beyond, only the line is drawn.
MAX_MARKERS = 240

PENDING_COLOR = "#a84300"
ALLOCATED_COLOR = "#00695c"
UTIL_COLOR = "#1a4fa0"


@dataclass(frozen=True)
class Line:
    label: str
    color: str
    points: tuple[tuple[float, float], ...]
    dashed: bool = False


def series(picture: Mapping[str, Any]) -> list[Obj]:
    """Every series point of a picture: the ``timeline`` and each frame's ``stats``, by time,
    then in the order they were taken (``seq``; without it a stable sort keeps a step's own
    point after points recorded at the same instant during it)."""
    points = list(picture.get("timeline") or ())
    points.extend(f["stats"] for f in picture.get("frames", ()) if f.get("stats"))
    return sorted(
        (p for p in points if isinstance(p.get("time"), int | float)),
        key=lambda p: (_time(p), p.get("seq", 0)),
    )


def _time(point: Mapping[str, Any]) -> float:
    return float(point["time"])


def clock_moved(points: Sequence[Mapping[str, Any]]) -> bool:
    return len({_time(p) for p in points}) > 1


def format_duration(seconds: float) -> str:
    """``0s``, ``45s``, ``5m``, ``1h30m``, ``2d``: as Kubernetes prints ages."""
    s = round(seconds)
    if s < 60 or (s < 120 and s % 60):
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60}s" if s % 60 else "")
    if s < 86400 * 2:
        return f"{s // 3600}h" + (f"{s % 3600 // 60}m" if s % 3600 // 60 else "")
    return f"{s // 86400}d" + (f"{s % 86400 // 3600}h" if s % 86400 // 3600 else "")


def _nice_step(span: float, most: int, whole: bool = False) -> float:
    """The smallest 1/2/5 x 10^k step that cuts ``span`` into at most ``most`` parts (at
    least 1 when ``whole``: counts of pods and nodes have no halves)."""
    if span <= 0:
        return 1.0
    raw = span / most
    if whole and raw <= 1:
        return 1.0
    base = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * base >= raw:
            return float(m * base)
    return float(10 * base)


_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600)


def _time_step(span: float, most: int = 6) -> float:
    for step in _TIME_STEPS:
        if span / step <= most:
            return float(step)
    return _nice_step(span / 86400, most) * 86400


def _fmt(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e6 else f"{v:.3g}"


def _path(points: Sequence[tuple[float, float]], x: Any, y: Any, end: float) -> str:
    """A step line: hold each value until the next point, the last until ``end``."""
    parts = [f"M{x(points[0][0]):.1f},{y(points[0][1]):.1f}"]
    for i, (_, v) in enumerate(points):
        if i:
            parts.append(f"V{y(v):.1f}")
        following = points[i + 1][0] if i + 1 < len(points) else end
        parts.append(f"H{x(following):.1f}")
    return "".join(parts)


def chart(
    title: str,
    lines: Sequence[Line],
    t0: float,
    t1: float,
    *,
    unit: str = "",
    y_max: float | None = None,
    note: str = "",
    whole: bool = True,
) -> str:
    """One ``<figure>``: the SVG (``data-t0``/``data-t1``/``data-x0``/``data-x1`` let the page
    move its step cursor) and an HTML legend."""
    top = max((v for line in lines for _, v in line.points), default=0.0)
    ceiling = y_max if y_max is not None else max(1.0, top)
    step = _nice_step(ceiling, 4, whole)
    ceiling = math.ceil(ceiling / step) * step
    x0, x1 = LEFT, WIDTH - RIGHT
    y0, y1 = HEIGHT - BOTTOM, TOP
    span = (t1 - t0) or 1.0

    def x(t: float) -> float:
        return x0 + (t - t0) / span * (x1 - x0)

    def y(v: float) -> float:
        return y0 - v / ceiling * (y0 - y1)

    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" data-t0="{t0:g}" data-t1="{t1:g}" '
        f'data-x0="{x0}" data-x1="{x1}" preserveAspectRatio="xMinYMin meet">'
    ]
    v = 0.0
    while v <= ceiling + 1e-9:
        yy = y(v)
        out.append(f'<line class="grid" x1="{x0}" x2="{x1}" y1="{yy:.1f}" y2="{yy:.1f}"/>')
        out.append(
            f'<text class="tick" x="{x0 - 6}" y="{yy + 4:.1f}" text-anchor="end">'
            f"{_fmt(v)}{escape(unit)}</text>"
        )
        v += step
    tstep = _time_step(span)
    t = math.ceil(t0 / tstep) * tstep
    while t <= t1 + 1e-9:
        xx = x(t)
        out.append(f'<line class="tickmark" x1="{xx:.1f}" x2="{xx:.1f}" y1="{y0}" y2="{y0 + 4}"/>')
        out.append(
            f'<text class="tick" x="{xx:.1f}" y="{y0 + 17}" text-anchor="middle">'
            f"{format_duration(t)}</text>"
        )
        t += tstep
    out.append(f'<line class="axis" x1="{x0}" x2="{x1}" y1="{y0}" y2="{y0}"/>')
    for line in lines:
        if not line.points:
            continue
        dash = ' stroke-dasharray="6 4"' if line.dashed else ""
        out.append(
            f'<path class="series" d="{_path(line.points, x, y, t1)}" '
            f'stroke="{line.color}"{dash}><title>{escape(line.label)}</title></path>'
        )
        if len(line.points) <= MAX_MARKERS:
            for tt, vv in line.points:
                out.append(
                    f'<circle cx="{x(tt):.1f}" cy="{y(vv):.1f}" r="3" fill="{line.color}">'
                    f"<title>{escape(line.label)} at {format_duration(tt)}: "
                    f"{_fmt(round(vv, 2))}{escape(unit)}</title></circle>"
                )
    out.append(f'<line class="cursor" x1="{x1}" x2="{x1}" y1="{y1}" y2="{y0}"/>')
    out.append("</svg>")
    legend = "".join(
        f'<li><span class="key{" dashed" if line.dashed else ""}" '
        f'style="border-color:{line.color}"></span>{escape(line.label)}</li>'
        for line in lines
    )
    note_html = f'<p class="note">{escape(note)}</p>' if note else ""
    return (
        f'<figure class="plot"><figcaption>{escape(title)}</figcaption>{"".join(out)}'
        f'<ul class="plot-legend">{legend}</ul>{note_html}</figure>'
    )


Points = tuple[tuple[float, float], ...]


def _keyed(points: Iterable[Mapping[str, Any]], key: str, name: str) -> Points:
    """(time, value) of ``point[key][name]`` where a point carries ``key``; a point that carries
    ``key`` without ``name`` counts 0 (the workload had no pods then)."""
    out = []
    for p in points:
        values = p.get(key)
        if isinstance(values, Mapping):
            raw = values.get(name, 0)
            if isinstance(raw, int | float):
                out.append((_time(p), float(raw)))
    return tuple(out)


def _scalar(points: Iterable[Mapping[str, Any]], key: str) -> Points:
    return tuple((_time(p), float(p[key])) for p in points if isinstance(p.get(key), int | float))


def _largest(points: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> tuple[list[str], int]:
    """The names under ``keys`` with the highest peaks (at most MAX_LINES), and how many more."""
    peak: dict[str, float] = {}
    for p in points:
        for key in keys:
            for name, v in (p.get(key) or {}).items():
                if isinstance(v, int | float):
                    peak[name] = max(peak.get(name, 0.0), float(v))
    ranked = sorted(peak, key=lambda n: (-peak[n], n))
    return sorted(ranked[:MAX_LINES]), max(0, len(ranked) - MAX_LINES)


def _short(workload: str) -> str:
    """``Deployment default/web`` -> ``web`` in legends would lose the kind; keep all but
    the ``default/`` namespace, which most scenarios use."""
    return workload.replace(" default/", " ")


def workload_names(points: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every workload a series point names (to give each its colour)."""
    return {
        name
        for p in points
        for key in ("running", "pending", "desired")
        for name in (p.get(key) or {})
    }


def plots_html(points: Sequence[Mapping[str, Any]], colors: Mapping[str, str]) -> str:
    """The charts for a run whose clock moved, else a sentence saying why there are none.
    ``colors`` gives each workload's fill (its lines are that colour, darkened)."""

    def line_color(name: str) -> str:
        return stroke(colors.get(name) or fill(name))

    if not clock_moved(points):
        return (
            '<p class="note" id="no-plots">The simulated clock never moved in this scenario '
            "(no <code>advance</code> step), so there is nothing to plot over time: the step "
            "selector above shows each state.</p>"
        )
    t0, t1 = _time(points[0]), _time(points[-1])
    figures = []

    names, more = _largest(points, ("running", "desired"))
    lines = []
    for name in names:
        lines.append(
            Line(f"{_short(name)} Running", line_color(name), _keyed(points, "running", name))
        )
        desired = _keyed([p for p in points if name in (p.get("desired") or {})], "desired", name)
        if desired:
            lines.append(Line(f"{_short(name)} desired", line_color(name), desired, dashed=True))
    figures.append(
        chart(
            "Replicas per workload (Running pods; dashed: spec.replicas)",
            lines,
            t0,
            t1,
            note=f"{more} more workloads not drawn" if more else "",
        )
    )

    groups, more = _largest(points, ("nodes",))
    group_colors = assign(groups)
    node_lines = [Line(g, stroke(group_colors[g]), _keyed(points, "nodes", g)) for g in groups]
    figures.append(
        chart(
            "Ready nodes per node group",
            node_lines,
            t0,
            t1,
            note=f"{more} more groups not drawn" if more else "",
        )
    )

    names, more = _largest(points, ("pending",))
    pending = [Line("all Pending pods", PENDING_COLOR, _scalar(points, "pendingPods"))]
    pending += [
        Line(_short(n), line_color(n), _keyed(points, "pending", n), dashed=True) for n in names
    ]
    figures.append(chart("Pending pods", pending, t0, t1))

    use = [
        Line(
            "GPUs in use (share of all GPUs)",
            ALLOCATED_COLOR,
            tuple(
                (_time(p), 100.0 * p["gpusInUse"] / p["gpus"])
                for p in points
                if isinstance(p.get("gpusInUse"), int | float) and p.get("gpus")
            ),
        ),
        Line(
            "GPU utilization (mean DCGM_FI_DEV_GPU_UTIL)",
            UTIL_COLOR,
            _scalar(points, "gpuUtilization"),
            dashed=True,
        ),
    ]
    figures.append(chart("GPU use", use, t0, t1, unit="%", y_max=100.0, whole=False))
    return f'<div class="plots">{"".join(figures)}</div>'
