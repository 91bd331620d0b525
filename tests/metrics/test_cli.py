"""``kgpu metrics`` as a user runs it."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.hardware.profiles import load_machine
from kgpu.kubelet.podresources import ContainerResources, PodResources
from kgpu.testing.fake_podresources import FakePodResourcesServer

from .conftest import series

runner = CliRunner()


def test_once_prints_a_scrape_of_the_simulated_machine() -> None:
    result = runner.invoke(
        app,
        ["metrics", "--machine", "dgx-h100", "--kubelet-root", "", "--once", "--hostname", "n1"],
    )
    assert result.exit_code == 0, result.output
    util = series(result.stdout, "DCGM_FI_DEV_GPU_UTIL")
    assert len(util) == 8 and {lab["Hostname"] for lab, _ in util} == {"n1"}
    assert {lab["modelName"] for lab, _ in util} == {"NVIDIA H100 80GB HBM3"}


def test_hostname_label_option() -> None:
    result = runner.invoke(
        app,
        [
            "metrics",
            "--machine",
            "t4",
            "--kubelet-root",
            "",
            "--once",
            "--hostname",
            "n1",
            "--hostname-label",
            "hostname",
        ],
    )
    assert result.exit_code == 0, result.output
    ((lab, _),) = series(result.stdout, "DCGM_FI_DEV_GPU_UTIL")
    assert lab["hostname"] == "n1" and "Hostname" not in lab


def test_attribution_from_the_kubelet_root(tmp_path: Path) -> None:
    gpu = load_machine("t4", hostname="n1").gpus[0]
    pods = [
        PodResources("web", "api", (ContainerResources("app", (("nvidia.com/gpu", (gpu.uuid,)),)),))
    ]
    with FakePodResourcesServer(tmp_path, pods):
        result = runner.invoke(
            app,
            [
                "metrics",
                "--machine",
                "t4",
                "--kubelet-root",
                str(tmp_path),
                "--once",
                "--hostname",
                "n1",
            ],
        )
    assert result.exit_code == 0, result.output
    ((lab, value),) = series(result.stdout, "DCGM_FI_DEV_GPU_UTIL")
    assert (lab["namespace"], lab["pod"], lab["container"]) == ("web", "api", "app")
    assert value > 0


def test_bad_options_are_user_errors() -> None:
    for args, message in (
        (["--machine", "nope"], "unknown machine profile 'nope'"),
        (["--machine", "t4", "--address", "9400"], "--address: '9400' is not HOST:PORT"),
        (["--machine", "t4", "--hostname-label", "host"], "use one of Hostname, hostname"),
    ):
        result = runner.invoke(app, ["metrics", *args, "--once"])
        assert result.exit_code == 1
        assert message in result.output
        assert "Traceback" not in result.output
