"""The report in a real browser: it renders without script errors and draws what the run had."""

from __future__ import annotations

from pathlib import Path

from headless_browser import Browser, Page
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.sim.html import record_run, render_page
from kgpu.sim.scenario import load_scenario
from kgpu.sim.simulation import Simulation

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def rendered_cleanly(page: Page) -> None:
    assert page.console == [], page.console  # an uncaught exception is logged there too
    body = page.select("body")[0]
    assert body.attrs.get("data-render-ms", "").isdigit()  # the script ran to its end


def test_quickstart_report_draws_every_gpu_mig_slice_replica_and_the_xid(
    tmp_path: Path, browser: Browser
) -> None:
    out = tmp_path / "quickstart.html"
    result = runner.invoke(app, ["sim", "--report", str(out)])
    assert result.exit_code == 0, result.output
    page = browser.load(out)
    rendered_cleanly(page)

    groups = [s.attrs["data-group"] for s in page.select("section", "group")]
    assert groups == ["cpu-node", "node-2080ti", "node-4090", "node-a100"]
    assert [len(page.select("option")), page.select("div", id="map")[0].attrs["data-step"]] == [
        11,
        "10",
    ]
    # one cell per GPU: 2080 Ti, 4090, 8 x A100 (the CPU node has none)
    cells = page.select("g", "gpu")
    assert len(cells) == 10
    assert [c.attrs["class"] for c in cells[:2]] == ["gpu mode-time-slicing", "gpu mode-mps"]
    # the 2080 Ti's four time-sliced replicas and the 4090's eight MPS replicas, all held
    held = [r for r in page.select("rect", "slot", inside="map") if "free" not in r.classes]
    assert len(held) == 4 + 8 + 1  # + the pod on a 3g.40gb MIG device
    # p4de-half-balanced: GPUs 0-3 carry 2g.20gb + 2 x 1g.10gb + 3g.40gb at their placements
    profiles = [r.attrs["data-profile"] for r in page.select("rect", "mig", inside="map")]
    assert profiles == ["2g.20gb", "1g.10gb", "1g.10gb", "3g.40gb"] * 4
    bad = page.select("g", "unhealthy")
    assert len(bad) == 1 and "XID 79" in bad[0].text and "GPU 5" in bad[0].text
    legend = [li.text for li in page.select("li", "wl")]
    assert legend == [
        "Deployment default/time-slicing-verification",
        "Pod default/gpu-operator-test",
        "Pod default/mig-3g-40gb",
    ]
    assert page.select("p", id="no-plots")  # the quickstart's clock never moves

    first = browser.load(out, "step=0")  # a link to the first step opens it
    rendered_cleanly(first)
    assert [c.attrs["class"] for c in first.select("g", "gpu")] == ["gpu mode-none"]
    assert "Insufficient nvidia.com/gpu" in first.select("ul", "pending")[0].text


def test_a_capped_map_of_nvlink_cliques_with_imex_channels_and_plots(
    tmp_path: Path, browser: Browser
) -> None:
    scenario = load_scenario(REPO / "examples" / "computedomain" / "heal-four-node-domain.yaml")
    sim = Simulation(scenario)
    try:
        picture = record_run(sim, max_nodes=8)
    finally:
        sim.close()
    # a step over time, so the plots are drawn too
    last = picture["frames"][-1]["stats"]
    picture["timeline"] = [{**last, "time": 300.0, "title": "later"}]
    out = tmp_path / "cliques.html"
    out.write_text(render_page(picture))
    page = browser.load(out)
    rendered_cleanly(page)

    assert [n.attrs["data-node"] for n in page.select("div", "node")] == [
        "rack-a-0",  # NotReady: drawn first when the map is capped
        "rack-a-1",
        "rack-a-2",
        "rack-a-3",
        "rack-b-0",
        "rack-b-1",
        "rack-b-2",
        "rack-b-3",
    ]
    assert len(page.select("div", "notready")) == 1
    assert [len(page.select("div", "clique")), len(page.select("g", "gpu"))] == [2, 8 * 4]
    assert [p.text for p in page.select("p", "more")] == [
        "Showing 4 of 6 nodes (NotReady, cordoned and unhealthy ones first); the counts above "
        "cover all."
    ] * 2
    channels = [li.text for li in page.select("li") if "IMEX channel" in li.text]
    assert channels and all(c.endswith("default/train-4") for c in channels)
    charts = page.select("svg", "chart")
    assert [c.attrs["aria-label"] for c in charts] == [
        "Replicas per workload (Running pods; dashed: spec.replicas)",
        "Ready nodes per node group",
        "Pending pods",
        "GPU use",
    ]


def test_plan_report_draws_the_one_node(tmp_path: Path, browser: Browser) -> None:
    out = tmp_path / "plan.html"
    result = runner.invoke(
        app,
        [
            "plan",
            *("-m", "p4de.24xlarge", "--mig-config", "all-balanced", "--mig-strategy", "mixed"),
            *("--report", str(out)),
        ],
    )
    assert result.exit_code == 0, result.output
    page = browser.load(out)
    rendered_cleanly(page)
    assert [n.attrs["data-node"] for n in page.select("div", "node")] == ["p4de.24xlarge"]
    assert len(page.select("g", "gpu")) == 8
    # all-balanced on an A100 80GB, in placement order: 2g.20gb, 2 x 1g.10gb, 3g.40gb
    labels = [t.text for t in page.select("text", "prof")]
    assert labels[:4] == ["2g.20gb", "1g", "1g", "3g.40gb"]  # "1g.10gb" is too wide for a slice
    assert not page.select("select")  # one state: no step selector
