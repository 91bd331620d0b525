"""The page as a file: self-contained, escaped, small; colours, packing and plots."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.sim.html import render_page
from kgpu.sim.html.colors import PALETTE, assign, contrast, fill, fnv1a, stroke
from kgpu.sim.html.encode import pack
from kgpu.sim.html.plots import Line, chart, format_duration, plots_html, series

runner = CliRunner()


def gpu(index: int, slots: list[str | None], **extra: Any) -> dict[str, Any]:
    return {
        "index": index,
        "uuid": f"GPU-{index}",
        "product": "Tesla T4",
        "memoryMiB": 15360,
        "unhealthy": False,
        "mode": "whole" if len(slots) == 1 else "time-slicing",
        "slices": 0,
        "devices": [
            {
                "uuid": f"GPU-{index}",
                "profile": None,
                "start": 0,
                "size": 1,
                "resource": "nvidia.com/gpu",
                "sharing": "none" if len(slots) == 1 else "time-slicing",
                "unhealthy": False,
                "slots": slots,
            }
        ],
        **extra,
    }


def frame(title: str, time: float, nodes: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    held = {s for n in nodes for g in n["gpus"] for d in g["devices"] for s in d["slots"] if s}
    return {
        "title": title,
        "time": time,
        "phases": {"Running": len(held)},
        "events": [],
        "eventCount": 0,
        "groups": [
            {
                "name": "g",
                "machine": "t4",
                "nodes": len(nodes),
                "ready": len(nodes),
                "gpus": sum(len(n["gpus"]) for n in nodes),
                "inUse": len(held),
                "unhealthy": 0,
                "shown": len(nodes),
            }
        ],
        "nodes": nodes,
        "pending": [],
        "workloads": {k: "Deployment default/web" for k in held},
        "warnings": [],
        "stats": {"time": time, "title": title, "running": {"Deployment default/web": len(held)}},
        **extra,
    }


def node(name: str, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": name,
        "group": "g",
        "clique": "",
        "machine": "t4",
        "ready": True,
        "unschedulable": False,
        "config": None,
        "migConfig": None,
        "pods": 1,
        "gpus": gpus,
        "channels": [],
    }


def picture(*frames: dict[str, Any], title: str = "demo") -> dict[str, Any]:
    return {"kind": "sim", "title": title, "description": "", "frames": list(frames)}


def test_nodes_unchanged_between_steps_are_stored_once_and_free_gpus_as_zero() -> None:
    a = node("a", [gpu(0, ["default/web-5d9f-abcde"])])
    b = node("b", [gpu(0, [None]), gpu(1, [None, None, None, None])])
    b2 = node("b", [gpu(0, ["default/web-5d9f-fghij"]), gpu(1, [None, None, None, None])])
    packed = pack(picture(frame("one", 0, [a, b]), frame("two", 60, [a, b2])))
    assert [f["nodes"] for f in packed["frames"]] == [[0, 1], [0, 2]]  # node a once
    assert packed["states"][1][6] == [0, 0]  # every GPU of b free: nothing but zeros
    assert len(packed["layouts"]) == 2  # a and b differ (1 vs 2 GPUs); b2 shares b's layout
    assert packed["prefixes"] == ["default/web-5d9f-"]
    assert [p[1] for p in packed["pods"]] == ["abcde", "fghij"]
    assert packed["workloads"] == [["Deployment default/web", fill("Deployment default/web")]]


def test_the_page_needs_no_network_and_escapes_what_the_scenario_wrote() -> None:
    evil = "</script><script>alert(1)</script><!--"
    page = render_page(
        picture(frame(evil, 0, [node("n<1>", [gpu(0, [f"default/{evil}-x"])])]), title=evil)
    )
    assert "<script>alert(1)" not in page
    scripts = re.findall(r"<script\b([^>]*)>", page)
    assert scripts == [' type="application/json" id="kgpu-data"', ""]  # inline only, no src
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "url(http" not in page
    data = re.search(r'id="kgpu-data">(.*?)</script>', page, re.S)
    assert data is not None
    assert json.loads(data.group(1))["frames"][0]["title"] == evil  # intact once parsed


def test_page_for_a_run_whose_clock_moved_has_the_four_charts() -> None:
    page = render_page(
        picture(
            frame("start", 0, [node("a", [gpu(0, [None])])]),
            frame("later", 300, [node("a", [gpu(0, ["default/web-1-x"])])]),
        )
    )
    assert page.count('<svg class="chart"') == 4
    assert 'id="no-plots"' not in page
    assert '<option value="1" selected>[1] t=5m · later</option>' in page


def test_more_points_than_steps_merge_by_time_each_step_last_at_its_instant() -> None:
    pic = picture(
        frame("start", 0, [node("a", [gpu(0, [None])])]),
        frame("advance 10m", 600, [node("a", [gpu(0, [None])])]),
    )
    pic["timeline"] = [{"time": 600, "title": "scan"}, {"time": 300, "title": "scan"}]
    assert [(p["time"], p["title"]) for p in series(pic)] == [
        (0, "start"),
        (300, "scan"),
        (600, "scan"),
        (600, "advance 10m"),
    ]


def test_durations_read_as_kubernetes_prints_ages() -> None:
    assert [format_duration(s) for s in (0, 45, 60, 90, 300, 330, 3600, 5400, 90000, 200000)] == [
        "0s",
        "45s",
        "1m",
        "90s",
        "5m",
        "5m30s",
        "1h",
        "1h30m",
        "25h",
        "2d7h",
    ]


def test_charts_hold_a_value_until_the_next_point() -> None:
    svg = chart("c", [Line("x", "#000000", ((0.0, 1.0), (100.0, 3.0)))], 0.0, 200.0)
    path = re.search(r'<path class="series" d="([^"]+)"', svg)
    assert path is not None
    # from (0, 1) across to t=100, up to 3, across to the end: a step, never a slope
    assert re.fullmatch(r"M[\d.]+,[\d.]+H[\d.]+V[\d.]+H[\d.]+", path.group(1))
    assert "no advance" not in plots_html([{"time": 0}, {"time": 5}], {})
    assert 'id="no-plots"' in plots_html([{"time": 0}, {"time": 0}], {})


def test_workload_colours_are_stable_distinct_and_readable() -> None:
    assert fnv1a("") == 0x811C9DC5 and fnv1a("a") == 0xE40C292C  # the published FNV-1a values
    assert fill("Deployment default/web") == PALETTE[fnv1a("Deployment default/web") % 18]
    # two names that hash to the same colour still get different ones
    names = [f"Deployment default/w{i}" for i in range(40)]
    clash = next((a, b) for i, a in enumerate(names) for b in names[i + 1 :] if fill(a) == fill(b))
    colors = assign(clash)
    assert colors[clash[0]] != colors[clash[1]]
    assert colors[min(clash)] == fill(min(clash))  # the first in name order keeps its own
    # lines drawn in a workload's colour are at least 3:1 on white (WCAG non-text contrast)
    assert min(contrast(stroke(c), "#ffffff") for c in PALETTE) >= 3.0
    # the page's text colours on its backgrounds: at least 4.5:1
    assert contrast("#4d4d4d", "#f4f5f7") >= 4.5 and contrast("#b3261e", "#ffffff") >= 4.5


def test_cli_writes_the_report_and_refuses_a_path_it_cannot_write(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = runner.invoke(app, ["sim", "-o", "json", "--report", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["scenario"] == "quickstart"  # stdout is still the JSON
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert f"wrote {out}" in result.stderr

    missing = tmp_path / "nope" / "r.html"
    result = runner.invoke(app, ["sim", "--report", str(missing)])
    assert result.exit_code == 1
    assert f"--report {missing}: folder {missing.parent} does not exist" in result.output
    result = runner.invoke(app, ["plan", "-m", "t4", "--report", str(tmp_path)])
    assert result.exit_code == 1 and "is a directory" in result.output


@pytest.mark.parametrize(("machine", "gpus"), [("gb200", 4), ("rtx-4090", 1)])
def test_plan_report_draws_each_gpu_of_the_machine(tmp_path: Path, machine: str, gpus: int) -> None:
    out = tmp_path / "p.html"
    result = runner.invoke(app, ["plan", "-m", machine, "--report", str(out)])
    assert result.exit_code == 0, result.output
    found = re.search(r'id="kgpu-data">(.*?)</script>', out.read_text(), re.S)
    assert found is not None
    data = json.loads(found.group(1))
    assert [data["kind"], len(data["frames"]), len(data["layouts"][0])] == ["plan", 1, gpus]
