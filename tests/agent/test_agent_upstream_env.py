"""Upstream settings carry over: the environment variables the device plugin and dcgm-exporter
read (as their charts and the GPU Operator's ClusterPolicy set them) mean the same to
``kgpu agent``, with upstream's precedence: flag > environment > config file > default.

Every set-but-invalid variable is an error naming it; variables kgpu has no use for are said
out loud."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.agent.upstream import UNUSED, VARIABLES, parse_bool, read_environment
from kgpu.errors import FieldError, KgpuError
from kgpu.hardware.backend import BackendError
from kgpu.hardware.model import Machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet.deviceplugin.servicer import DevicePluginServicer
from kgpu.kubelet.proto.deviceplugin.v1beta1 import api_pb2
from kgpu.testing.views import make_machine

#: A value upstream refuses, per variable whose values are constrained.
BAD = {
    "MIG_STRATEGY": "mix",
    "FAIL_ON_INIT_ERROR": "nope",
    "NVIDIA_DRIVER_ROOT": "run/nvidia/driver",
    "NVIDIA_DEV_ROOT": "dev",
    "DRIVER_ROOT_CTR_PATH": "driver-root",
    "CONTAINER_DRIVER_ROOT": "driver-root",
    "PASS_DEVICE_SPECS": "yes",
    "DEVICE_LIST_STRATEGY": "envvar,cdi",
    "DEVICE_ID_STRATEGY": "serial",
    "NVIDIA_CDI_HOOK_PATH": "nvidia-cdi-hook",
    "NVIDIA_CTK_PATH": "nvidia-ctk",
    "CDI_DISABLE_HOOKS": "update-ldcache,frobnicate",
    "SHARED_DEVICES_ALLOCATION_POLICY": "spread",
    "MPS_ROOT": "mps",
    "GDRCOPY_ENABLED": "on",
    "GDS_ENABLED": "on",
    "MOFED_ENABLED": "on",
    "DEVICE_DISCOVERY_STRATEGY": "tegra",
    "DCGM_EXPORTER_LISTEN": "9400",
    "DCGM_EXPORTER_KUBERNETES": "maybe",
    "CONSUMABLE_SHARES": "half",
}
#: Taken as given (a file that cannot be read fails the start when it is loaded).
FREE_TEXT = {"NODE_NAME", "CDI_ANNOTATION_PREFIX", "CONFIG_FILE", "DCGM_EXPORTER_COLLECTORS"}


def test_the_table_covers_every_variable_and_bad_values_name_it() -> None:
    assert {v.name for v in VARIABLES} == set(BAD) | FREE_TEXT
    settings, problems = read_environment(BAD, {})
    assert sorted(p.path for p in problems) == sorted(BAD)
    assert all("(set in the environment)" in p.message for p in problems)
    assert settings.options == {} and settings.flags == ()
    (tegra,) = [p for p in problems if p.path == "DEVICE_DISCOVERY_STRATEGY"]
    assert "NVML only" in tegra.message


def test_booleans_parse_as_gos_strconv_and_empty_counts_as_unset() -> None:
    for text in ("1", "t", "T", "true", "TRUE", "True"):
        assert parse_bool(text) is True
    for text in ("0", "f", "F", "false", "FALSE", "False"):
        assert parse_bool(text) is False
    settings, problems = read_environment({"MIG_STRATEGY": "", "PASS_DEVICE_SPECS": ""}, {})
    assert problems == [] and settings.options == {} and settings.flags == ()


def test_values_land_where_upstream_puts_them() -> None:
    env = {
        "NVIDIA_CDI_HOOK_PATH": "/usr/bin/nvidia-cdi-hook",
        "NVIDIA_CTK_PATH": "/usr/bin/nvidia-ctk",  # the first name of the pair wins
        "DEVICE_LIST_STRATEGY": "envvar, cdi-annotations",
        "MPS_ROOT": "/run/nvidia/mps",
        "GDS_ENABLED": "1",
        "CONFIG_FILE": "/config/config.yaml",
        "MIG_STRATEGY": "mixed",
        "DCGM_EXPORTER_KUBERNETES": "false",
        "RESTART_ON_DEVICE_UNHEALTHY": "true",
    }
    settings, problems = read_environment(env, {"mig_strategy": "single"})
    assert problems == []
    assert dict(settings.flags) == {
        "plugin.nvidiaCTKPath": "/usr/bin/nvidia-cdi-hook",
        "plugin.deviceListStrategy": ("envvar", "cdi-annotations"),
        "mpsRoot": "/run/nvidia/mps",
        "gdsEnabled": True,
    }
    # the command line's --mig-strategy wins over MIG_STRATEGY
    assert settings.options == {
        "config_files": (Path("/config/config.yaml"),),
        "metrics_pods": False,
    }
    (note,) = settings.notes
    assert note.startswith("RESTART_ON_DEVICE_UNHEALTHY=true is set but kgpu does not use it")
    assert set(UNUSED) >= {"NVIDIA_MIG_MONITOR_DEVICES", "DCGM_EXPORTER_INTERVAL"}


def start(root: Path, machine: Machine, env: dict[str, str], **given: Any) -> Agent:
    opts = AgentOptions.parse(
        env=env,
        machine="test",
        kubelet_root=root,
        node_name="n",
        dra=False,
        device_plugin=False,
        status_file=root / "status.json",
        **given,
    )
    agent = Agent(opts, backend=SimulatedBackend(machine))
    agent.start()
    return agent


def test_flag_beats_environment_beats_config_file_beats_default(root: Path) -> None:
    machine = make_machine(2, mig={0: ["1g.10gb", "3g.40gb"], 1: ["1g.10gb"]})
    config = root / "plugin.yaml"
    config.write_text(
        "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n    deviceListStrategy: envvar\n"
        "    deviceIDStrategy: index\n"
    )
    cases = [
        ({}, {}, "mixed", ("envvar",)),  # the config file
        ({"MIG_STRATEGY": "none", "DEVICE_LIST_STRATEGY": "cdi-cri"}, {}, "none", ("cdi-cri",)),
        ({"MIG_STRATEGY": "none"}, {"mig_strategy": "single"}, "single", ("envvar",)),
    ]
    for env, flags, strategy, lists in cases:
        agent = start(root, machine, env, config_files=(config,), **flags)
        try:
            view = agent.view()
            assert (view.mig_strategy, view.device_list_strategy) == (strategy, lists), env
            assert view.device_id_strategy == "index"  # no variable: the file's value stays
        finally:
            agent.stop()
    agent = start(root, machine, {})  # no file either: upstream's defaults
    try:
        assert (agent.view().mig_strategy, agent.view().device_list_strategy) == (
            "none",
            ("envvar",),
        )
    finally:
        agent.stop()
    status = start(root, machine, {"MIG_STRATEGY": "mixed"})
    try:
        assert status.status()["environment"] == {"mig_strategy": "MIG_STRATEGY"}
        assert status.view().refused == ()
    finally:
        status.stop()


def test_pass_device_specs_puts_the_device_nodes_in_allocate(root: Path) -> None:
    machine = make_machine(2)
    for env, expected in (
        ({}, False),
        ({"PASS_DEVICE_SPECS": "true"}, True),
        ({"PASS_DEVICE_SPECS": "true", "DEVICE_LIST_STRATEGY": "cdi-cri"}, False),  # CDI only
    ):
        agent = start(root, machine, env)
        try:
            servicer = DevicePluginServicer("nvidia.com/gpu", agent.view)
            gpu = machine.gpus[1]
            request = api_pb2.AllocateRequest(
                container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[gpu.uuid])]
            )
            (answer,) = servicer.Allocate(request, None).container_responses
            paths = [d.container_path for d in answer.devices]
            assert (f"/dev/nvidia{gpu.minor}" in paths) is expected, (env, paths)
            assert all(d.permissions == "rw" for d in answer.devices)
        finally:
            agent.stop()


class NoNvml(SimulatedBackend):
    def snapshot(self) -> Machine:
        raise BackendError("NVML not found: is the NVIDIA driver installed?")


def test_fail_on_init_error_false_in_the_config_file_serves_nothing(root: Path) -> None:
    config = root / "plugin.yaml"
    config.write_text("version: v1\nflags:\n  failOnInitError: false\n")
    opts = AgentOptions(
        machine="nvml",
        config_files=(config,),
        kubelet_root=root,
        node_name="n",
        dra=False,
        status_file=root / "status.json",
    )
    agent = Agent(opts, backend=NoNvml(make_machine(1)))
    agent.start()
    try:
        assert agent.view().resources == ()
        status = agent.status()
        assert "NVML not found" in status["initError"] and status["lastError"]
        assert agent.health_check() == (True, f"ok, serving no devices: {agent.init_error}")
    finally:
        agent.stop()
    # the flag wins over the file (and over FAIL_ON_INIT_ERROR)
    opts = AgentOptions.parse(
        env={"FAIL_ON_INIT_ERROR": "false"},
        fail_on_init_error=True,
        machine="nvml",
        config_files=(config,),
        kubelet_root=root,
        dra=False,
    )
    agent = Agent(opts, backend=NoNvml(make_machine(1)))
    with pytest.raises(KgpuError, match="NVML not found"):
        agent.start()
    agent.stop()


def _run(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kgpu", "agent", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )


def test_invalid_variables_fail_the_start_naming_each(root: Path) -> None:
    bad_csv = root / "counters.csv"
    bad_csv.write_text("DCGM_FI_DEV_GPU_UTIL, gauge\n")
    done = _run(
        {"MIG_STRATEGY": "mix", "DCGM_EXPORTER_COLLECTORS": str(bad_csv), "GDS_ENABLED": "on"},
        "--machine", "t4", "--no-dra", "--kubelet-root", str(root),
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "MIG_STRATEGY: 'mix': allowed none, single, mixed (set in the environment)" in (
        done.stderr
    )
    assert "GDS_ENABLED: 'on' is not a boolean" in done.stderr
    assert f"{bad_csv}: line 1: expected 3 fields" in done.stderr
    assert not list((root / "device-plugins").glob("*.sock"))


def test_no_nvml_and_fail_on_init_error_false_keeps_running(root: Path) -> None:
    """FAIL_ON_INIT_ERROR=false as the device plugin's chart sets it, on a machine without
    the driver: the agent stays up, serves nothing, says why; SIGTERM exits 0."""
    env = {
        "FAIL_ON_INIT_ERROR": "false",
        "LD_LIBRARY_PATH": str(root),
        "RESTART_ON_DEVICE_UNHEALTHY": "true",
    }
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = root / "agent.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kgpu", "agent", "--machine", "nvml", "--no-dra",
             "--kubelet-root", str(root), "--health-address", f"127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env},
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            status = root / "kgpu" / "agent-status.json"
            while not status.exists():
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                body = r.read().decode()
            if "serving no devices" not in body:  # pragma: no cover - a machine with NVML
                pytest.skip("this machine has NVML")
            assert "NVML not found" in body
            text = log.read_text()
            assert "failOnInitError is false: serving no devices" in text
            assert "RESTART_ON_DEVICE_UNHEALTHY=true is set but kgpu does not use it" in text
            assert not list((root / "device-plugins").glob("*.sock"))
            proc.terminate()
            assert proc.wait(10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_dcgm_exporter_variables_select_address_and_counters(root: Path) -> None:
    csv = root / "dcgm-metrics.csv"
    csv.write_text(
        "# the two counters a dashboard needs\n"
        "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
        "DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n"
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, counter, Total number of single-bit volatile ECC errors.\n"
    )
    env = {"DCGM_EXPORTER_LISTEN": "127.0.0.1:0", "DCGM_EXPORTER_COLLECTORS": str(csv)}
    agent = start(root, make_machine(1), env)
    try:
        assert agent.options.metrics_address == "127.0.0.1:0"
        (metrics,) = [c for c in agent.components if type(c).__name__ == "MetricsComponent"]
        text = metrics.scrape()  # type: ignore[attr-defined]
        families = {
            line.split()[2] for line in text.splitlines() if line.startswith("# TYPE DCGM_")
        }
        assert families == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"}
        assert agent.status()["environment"] == {
            "metrics_address": "DCGM_EXPORTER_LISTEN",
            "collectors": "DCGM_EXPORTER_COLLECTORS",
        }
    finally:
        agent.stop()
    with pytest.raises(FieldError, match="line 2"):
        csv.write_text("# x\nDCGM_FI_DEV_GPU_UTIL, gauge\n")
        AgentOptions.parse(env=env, machine="test")


def test_docs_list_every_variable_with_what_kgpu_does() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "agent.md").read_text()
    for var in VARIABLES:
        assert f"| `{var.name}` | {var.origin} | {var.meaning} | {var.kgpu} |" in doc, var.name
    for name in UNUSED:
        assert f"`{name}` (" in doc, name
