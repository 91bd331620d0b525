"""scripts/gpu-check.sh, the acceptance run for a lent GPU: without NVML it refuses cleanly;
over the fake NVML its non-GPU parts (agent, fake kubelet, specs, labels, slices, a claim,
metrics, scrape ratio, RSS) run and the table says what held."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pynvml
import pytest

from kgpu.cli import gpu_check
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.testing.fake_nvml import FakeNvml

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu-check.sh"


def _nvml_here() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_nvml_here(), reason="this machine has NVML: the script would really run")
def test_without_nvml_the_script_refuses_and_checks_nothing() -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "gpu-check: refused, nothing was checked: NVML" in done.stderr
    assert "Traceback" not in done.stderr


def test_over_the_fake_nvml_every_check_runs_and_reports(tmp_path: Path) -> None:
    host = tmp_path / "host"  # the GPU's sysfs entry, as on the H200: a 3D controller
    (host / "sys/bus/pci/devices/0000:18:00.0").mkdir(parents=True)
    (host / "sys/bus/pci/devices/0000:18:00.0/class").write_text("0x030200\n")

    def backend() -> NvmlBackend:
        sim = SimulatedBackend(load_machine("h200", hostname="gpu-check"))
        return NvmlBackend(FakeNvml(sim), host_root=host)

    # a short directory: the kubelet's sockets must fit a unix socket path
    with tempfile.TemporaryDirectory(prefix="gc") as work:
        rows = {r.check: r for r in gpu_check.run(backend, workdir=Path(work))}
    assert rows["NVML"].ok and "NVIDIA H200" in rows["NVML"].figure
    assert rows["device plugin registers every GPU"].ok, rows["device plugin registers every GPU"]
    labels = rows["GFD labels"]
    assert labels.ok and "machine=unknown" in labels.figure and "mode=compute" in labels.figure
    assert rows["metrics under load"].ok is None  # no --load given
    assert " ms vs " in rows["agent scrape within 2x kgpu metrics alone"].figure
    assert rows["DRA ResourceSlice"].ok
    # this machine has no /dev/nvidia0: the checks say so instead of passing
    for check in ("every CDI host path exists", "a claim prepared"):
        assert rows[check].ok is False and "/dev/nvidia0" in rows[check].figure
    assert "MiB" in rows["RSS under 80 MiB"].figure
    table = gpu_check.render(list(rows.values()))
    assert "FAIL" in table and "PASS" in table and "skip" in table


def test_memory_share_step_is_skipped_unless_the_compute_mode_may_change() -> None:
    from kgpu.cli.gpu_check_shares import ALLOW_ENV, CHECK, run_memory_shares

    class NoTouching:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"the skipped step used the backend ({name})")

    (row,) = run_memory_shares(NoTouching(), environ={})
    assert row.check == CHECK and row.ok is None
    assert "compute mode" in row.figure and f"{ALLOW_ENV}=1" in row.figure
    (row,) = run_memory_shares(NoTouching(), environ={ALLOW_ENV: "0"})
    assert row.ok is None


def test_memory_share_clients_are_judged_by_what_they_saw() -> None:
    from kgpu.cli.gpu_check_shares import judge

    seen = {"init": 0, "ctx": 0, "info": 0, "free_mib": 20400, "total_mib": 81079}
    assert judge(20480, {**seen, "under": 0, "over": 2})[0]
    # the whole GPU free: the limit did not reach the client
    assert not judge(20480, {**seen, "free_mib": 80000, "under": 0, "over": 0})[0]
    assert not judge(20480, {**seen, "under": 0, "over": 0})[0]  # allocated beyond its limit
    ok, figure = judge(20480, {**seen, "ctx": 805})  # CUDA_ERROR_MPS_CONNECTION_FAILED
    assert not ok and "ctx failed (CUresult 805)" in figure
