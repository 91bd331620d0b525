"""The agent writes the device plugin's CDI spec before Allocate hands out CDI names, from
every new view; on ``--machine nvml`` the spec carries the driver found where
``NVIDIA_DRIVER_ROOT`` / ``DRIVER_ROOT_CTR_PATH`` say, with the hooks ``NVIDIA_CDI_HOOK_PATH``
and ``CDI_DISABLE_HOOKS`` choose, as upstream's plugin does (NVML here is the fake one over a
simulated node; the driver root is laid out as a real install)."""

from __future__ import annotations

from pathlib import Path

from fake_driver_root import lay_out_driver
from test_nvidia_cdi import assert_valid

from kgpu.agent.daemon import Agent, AgentOptions
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet import cdi
from kgpu.kubelet.nvidia_cdi import DEVICE_PLUGIN_SPEC
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.fake_nvml import FakeNvml

LIB = "/usr/lib/x86_64-linux-gnu"


def defined_names(path: Path) -> set[str]:
    spec = cdi.read_spec(path)
    assert_valid(spec)
    return {f"{spec['kind']}={d['name']}" for d in spec["devices"]}


def test_every_cdi_name_allocate_gives_is_in_the_spec_across_reloads(root: Path) -> None:
    config = root / "plugin.yaml"
    config.write_text("version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-cri\n")
    opts = AgentOptions(
        machine="dgx-h100",
        config_files=(config,),
        kubelet_root=root,
        cdi_root=root / "cdi",
        node_name="n",
        dra=False,
    )
    agent = Agent(opts, backend=SimulatedBackend(load_machine("dgx-h100", hostname="n")))
    spec = root / "cdi" / DEVICE_PLUGIN_SPEC
    with FakeKubelet(root) as kubelet:
        agent.start()
        try:
            assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 8)
            gpu = sorted(kubelet.devices("nvidia.com/gpu"))[3]
            answer = kubelet.allocate("nvidia.com/gpu", [gpu])
            names = [d.name for d in answer.cdi_devices]
            assert names == [f"k8s.device-plugin.nvidia.com/gpu={gpu}"]
            assert set(names) <= defined_names(spec)
            assert agent.status()["cdiSpec"] == str(spec)
            # the config switches the ids to indices: the spec follows before Allocate does
            config.write_text(
                "version: v1\nflags:\n  plugin:\n    deviceListStrategy: [envvar, "
                "cdi-annotations]\n    deviceIDStrategy: index\n"
            )
            registered = len(kubelet.register_calls)
            agent.request_reload()
            # the ids changed: the resource's server is replaced and registers again
            assert kubelet.wait_for(
                lambda: (
                    len(kubelet.register_calls) > registered
                    and agent.status()["resources"]["nvidia.com/gpu"]["registered"]
                )
            )
            assert agent.view().device_id_strategy == "index"
            answer = kubelet.allocate("nvidia.com/gpu", [gpu])
            (annotation,) = answer.annotations.values()
            assert annotation.startswith("k8s.device-plugin.nvidia.com/gpu=")
            assert set(annotation.split(",")) <= defined_names(spec)
            assert answer.envs["NVIDIA_VISIBLE_DEVICES"].isdigit()
            # a simulated node's spec carries no driver: there is none
            assert "mounts" not in cdi.read_spec(spec)["containerEdits"]
        finally:
            agent.stop()


def test_a_real_node_spec_carries_the_driver_from_upstreams_variables(root: Path) -> None:
    sim = SimulatedBackend(load_machine("dgx-h100", hostname="n"))
    backend = NvmlBackend(FakeNvml(sim))
    version = backend.snapshot().driver_version
    host = lay_out_driver(root / "host", version=version, gpus=8)
    opts = AgentOptions.parse(
        env={
            "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",  # where the host has it
            "DRIVER_ROOT_CTR_PATH": str(host),  # where the agent's container sees it
            "NVIDIA_CDI_HOOK_PATH": "/usr/local/nvidia/toolkit/nvidia-cdi-hook",
            "CDI_DISABLE_HOOKS": "enable-cuda-compat",
            "DEVICE_LIST_STRATEGY": "cdi-annotations,envvar",
            "PASS_DEVICE_SPECS": "true",
        },
        machine="nvml",
        kubelet_root=root,
        cdi_root=root / "cdi",
        node_name="n",
        dra=False,
    )
    agent = Agent(opts, backend=backend)
    with FakeKubelet(root) as kubelet:
        agent.start()
        try:
            assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 8)
            spec = cdi.read_spec(root / "cdi" / DEVICE_PLUGIN_SPEC)
            assert_valid(spec)
            edits = spec["containerEdits"]
            mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
            lib = f"{LIB}/libcuda.so.{version}"
            assert mounts[lib] == f"/run/nvidia/driver{lib}"  # the host's path, not ours
            hooks = edits["hooks"]
            assert {h["path"] for h in hooks} == {"/usr/local/nvidia/toolkit/nvidia-cdi-hook"}
            assert "enable-cuda-compat" not in [h["args"][1] for h in hooks]
            gpu = agent.view().machine.gpus[5]
            answer = kubelet.allocate("nvidia.com/gpu", [gpu.uuid])
            assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == gpu.uuid
            (annotation,) = answer.annotations.values()
            assert annotation == f"k8s.device-plugin.nvidia.com/gpu={gpu.uuid}"
            # passDeviceSpecs with a non-CDI strategy: the device nodes, host paths under the
            # driver root (NVIDIA_DEV_ROOT unset: upstream's default)
            nodes = {d.container_path: d.host_path for d in answer.devices}
            assert nodes[f"/dev/nvidia{gpu.minor}"] == f"/run/nvidia/driver/dev/nvidia{gpu.minor}"
            assert nodes["/dev/nvidiactl"] == "/run/nvidia/driver/dev/nvidiactl"
        finally:
            agent.stop()
