"""The report's plots are the run's own values at the time they happened (issue 25): read back
from the page's SVG markers for ``examples/autoscaling/t4-keda.yaml``, and compared with what
the simulated exporter (``--serve-metrics``) serves at the same moments."""

from __future__ import annotations

import html
import re
from pathlib import Path

from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.sim.html.capture import Recorder
from kgpu.sim.metrics import SimMetrics
from kgpu.sim.scenario import load_scenario
from kgpu.sim.simulation import Simulation

REPO = Path(__file__).resolve().parents[2]
KEDA = REPO / "examples" / "autoscaling" / "t4-keda.yaml"
MARKER = re.compile(r"<circle [^>]*><title>(.*?) at ([0-9hms]+): ([0-9.]+)%?</title></circle>")
UTIL = "GPU utilization (mean DCGM_FI_DEV_GPU_UTIL)"


def plotted(page: str) -> dict[str, list[tuple[str, float]]]:
    """Every marker the charts draw: series label -> [(time as shown, value)]."""
    out: dict[str, list[tuple[str, float]]] = {}
    for label, at, value in MARKER.findall(page):
        out.setdefault(html.unescape(label), []).append((at, float(value)))
    return out


def seconds(shown: str) -> int:
    """``15m15s`` -> 915."""
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([hms])", shown))


def test_the_plots_show_each_change_when_it_happened(tmp_path: Path) -> None:
    target = tmp_path / "keda.html"
    result = CliRunner().invoke(app, ["sim", str(KEDA), "--report", str(target)])
    assert result.exit_code == 0, result.output
    series = plotted(target.read_text())
    util = dict(series[UTIL])
    assert util["0s"] == 100.0 and util["10m"] == 0.0  # the load stops at 10 min
    after = [v for at, v in series[UTIL] if seconds(at) > 600]
    assert len(after) >= 3 and set(after) == {0.0}  # and stays 0 to the end (30 min)
    assert {v for at, v in series[UTIL] if seconds(at) < 600} == {80.0, 100.0}
    desired = series["Deployment scaling-app desired"]
    assert ("15m15s", 1.0) in desired and ("10m", 2.0) in desired  # HPA scale-down at 15:15
    assert series["t4"][-2:] == [("25m20s", 1.0), ("30m", 1.0)]  # the node left at 25:20
    assert ("10s", 2.0) in series["t4"]
    pending = series["all Pending pods"]
    assert ("0s", 1.0) in pending and ("10s", 0.0) in pending  # one pod waited 10 s


def test_plotted_utilisation_is_what_serve_metrics_serves() -> None:
    sim = Simulation(load_scenario(KEDA))
    recorder = Recorder(sim)
    exporter = SimMetrics(sim)
    seen: list[tuple[float, float | None, float]] = []

    def compare() -> None:
        values = [
            float(line.rsplit(" ", 1)[1])
            for line in exporter.scrape().splitlines()
            if line.startswith("DCGM_FI_DEV_GPU_UTIL{")
        ]
        served = sum(values) / len(values)
        seen.append((sim.now, recorder.point("")["gpuUtilization"], served))

    sim.context.moment_observers.append(compare)  # between steps
    sim.observers.append(lambda _step: compare())  # after each step
    sim.run()
    assert len(seen) > 8
    for now, drawn, served in seen:
        assert drawn == round(served, 2), (now, drawn, served)
    assert {round(s) for _, _, s in seen} >= {0, 100}
