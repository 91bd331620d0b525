"""``kgpu agent`` end to end: a subprocess on a simulated machine, the fake kubelet on real
sockets. Each scenario checks that allocations made before it still hold afterwards.

The p4de runs the seed guide's layout: its GPUs are recorded as the MIG manager leaves them
(a snapshot the agent reads with ``--machine file.json``), since the agent's view advertises
the MIG devices that exist and applies no layout itself."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from kgpu.config import load_config_files
from kgpu.drivers.migpreview import machine_after_mig
from kgpu.hardware.model import Machine
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.serialize import dump_snapshot
from kgpu.node.view import build_node_view
from kgpu.testing.agent_process import AgentProcess
from kgpu.testing.fake_kubelet import FakeKubelet
from kgpu.testing.poll import eventually

NODE = "node-a"

pytestmark = pytest.mark.slow

P4DE_LABELS = {"nvidia.com/mig.config": "p4de-half-balanced"}
RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-2g.20gb",
    "nvidia.com/mig-3g.40gb",
]


def seed(acceptance: Path) -> list[Path]:
    guides = acceptance / "seed-guides"
    return [guides / "gpu-operator-values.yaml", guides / "time-slicing-config-t4-a100.yaml"]


def partitioned(acceptance: Path) -> Machine:
    """The p4de's GPUs once the MIG manager applied p4de-half-balanced."""
    machine = load_machine("p4de.24xlarge", hostname=NODE)
    return machine_after_mig(machine, load_config_files(seed(acceptance)), P4DE_LABELS)


def p4de_snapshot(acceptance: Path, root: Path) -> str:
    path = root / "p4de-half-balanced.json"
    if not path.exists():
        dump_snapshot(partitioned(acceptance), path)
    return str(path)


def p4de_args(acceptance: Path, root: Path, *extra: str) -> list[str]:
    args = ["--machine", p4de_snapshot(acceptance, root), "--config-name", "a100-40gb"]
    for path in seed(acceptance):
        args += ["--config", str(path)]
    for key, value in P4DE_LABELS.items():
        args += ["--label", f"{key}={value}"]
    return [*args, *extra]


def expected_ids(acceptance: Path) -> dict[str, set[str]]:
    view = build_node_view(
        partitioned(acceptance),
        load_config_files(seed(acceptance)),
        P4DE_LABELS,
        config_name="a100-40gb",
    )
    assert view.mig_pending == ""
    return {r.name: {d.id for d in r.devices} for r in view.resources}


def serving(kubelet: FakeKubelet, agent: AgentProcess, resources: list[str]) -> bool:
    ok = kubelet.wait_for(
        lambda: all(kubelet.devices(r) for r in resources) and kubelet.resources() == resources,
        timeout_s=20,
    )
    assert ok, f"kubelet saw {kubelet.resources()}; agent log:\n{agent.log()}"
    return ok


def replicas_of(kubelet: FakeKubelet, gpu_uuid: str) -> list[str]:
    return [i for i in kubelet.devices("nvidia.com/gpu") if i.startswith(gpu_uuid + "::")]


def test_p4de_seed_guides_serve_the_planned_devices(
    acceptance: Path,
    kubelet: FakeKubelet,
    start_agent: Callable[..., AgentProcess],
    root: Path,
) -> None:
    agent = start_agent(
        *p4de_args(acceptance, root, "--nfd-features-dir", str(root / "features.d"))
    )
    serving(kubelet, agent, RESOURCES)
    want = expected_ids(acceptance)
    assert sorted(want) == RESOURCES
    for name in RESOURCES:
        assert set(kubelet.devices(name)) == want[name], name
        assert set(kubelet.devices(name).values()) == {"Healthy"}
    assert len(want["nvidia.com/gpu"]) == 32  # 4 whole GPUs x 8 time-slicing replicas
    # Registration as the kubelet requires: bare endpoint names, preferred allocation offered.
    for resource, endpoint in kubelet.registrations:
        assert "/" not in endpoint and (root / "device-plugins" / endpoint).exists()
        assert kubelet.endpoints[resource].options.get_preferred_allocation_available

    # Replicas spread over GPUs; the container sees each GPU once.
    avail = sorted(kubelet.devices("nvidia.com/gpu"))
    picked = kubelet.preferred("nvidia.com/gpu", avail, [], 4)
    assert len({i.split("::")[0] for i in picked}) == 4
    alloc = kubelet.allocate("nvidia.com/gpu", picked[:2])
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"].split(",") == [i.split("::")[0] for i in picked[:2]]
    mig = sorted(kubelet.devices("nvidia.com/mig-3g.40gb"))[0]
    assert kubelet.allocate("nvidia.com/mig-3g.40gb", [mig]).envs["NVIDIA_VISIBLE_DEVICES"] == mig

    features_file = root / "features.d" / "kgpu-features"
    assert _wait(features_file.exists), agent.log()  # written just after the kubelet is told
    features = features_file.read_text().splitlines()
    labels = dict(line.split("=", 1) for line in features)
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/gpu.replicas"] == "8"
    status = agent.status()
    assert status["resources"]["nvidia.com/mig-1g.10gb"]["devices"] == 8  # type: ignore[index]
    assert agent.terminate() == 0


def test_kubelet_restart_reregisters_every_resource(
    acceptance: Path, kubelet: FakeKubelet, start_agent: Callable[..., AgentProcess], root: Path
) -> None:
    agent = start_agent(*p4de_args(acceptance, root))
    serving(kubelet, agent, RESOURCES)
    before = {r: kubelet.devices(r) for r in RESOURCES}
    made = kubelet.allocate("nvidia.com/mig-1g.10gb", sorted(before["nvidia.com/mig-1g.10gb"])[:1])
    registrations = len(kubelet.registrations)

    kubelet.restart()
    assert kubelet.wait_for(lambda: len(kubelet.registrations) >= registrations + 4, 5), agent.log()
    serving(kubelet, agent, RESOURCES)
    assert {r: kubelet.devices(r) for r in RESOURCES} == before
    # The allocation made before the restart is still served the same way.
    again = kubelet.allocate("nvidia.com/mig-1g.10gb", sorted(before["nvidia.com/mig-1g.10gb"])[:1])
    assert again.envs == made.envs
    assert agent.terminate() == 0


def test_sigterm_removes_sockets_and_exits_zero(
    acceptance: Path, kubelet: FakeKubelet, start_agent: Callable[..., AgentProcess], root: Path
) -> None:
    agent = start_agent(*p4de_args(acceptance, root))
    serving(kubelet, agent, RESOURCES)
    plugin_dir = root / "device-plugins"
    assert len(list(plugin_dir.glob("kgpu-*.sock"))) == 4
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(10) == 0
    assert list(plugin_dir.glob("kgpu-*.sock")) == []
    assert (plugin_dir / "kubelet.sock").exists()  # the kubelet's socket is not ours
    assert kubelet.wait_for(lambda: kubelet.resources() == [], 5)
    assert json.loads(agent.status_path.read_text())["state"] == "stopped"


def test_xid_marks_devices_and_recovers(
    acceptance: Path, kubelet: FakeKubelet, start_agent: Callable[..., AgentProcess], root: Path
) -> None:
    machine = partitioned(acceptance)
    gpu4, gpu5, gpu0 = (machine.gpu(i).uuid for i in (4, 5, 0))
    agent = start_agent(
        *p4de_args(
            acceptance, root, "--health-quiet-period", "1.5", "--health-probe-interval", "0.2"
        )
    )
    serving(kubelet, agent, RESOURCES)
    held = replicas_of(kubelet, gpu5)[:1]
    kubelet.allocate("nvidia.com/gpu", held)

    agent.inject({"xid": 13, "gpu": 5})  # application fault: nothing changes
    agent.inject({"xid": 79, "gpu": 4})
    assert kubelet.wait_for(
        lambda: (
            {kubelet.devices("nvidia.com/gpu")[i] for i in replicas_of(kubelet, gpu4)}
            == {"Unhealthy"}
        )
    ), agent.log()
    gpu_devices = kubelet.devices("nvidia.com/gpu")
    assert {gpu_devices[i] for i in replicas_of(kubelet, gpu5)} == {"Healthy"}
    assert kubelet.allocate("nvidia.com/gpu", held).envs["NVIDIA_VISIBLE_DEVICES"] == gpu5

    # An XID attributed to one MIG device of GPU 0 marks only that MIG device.
    migs = list(machine.gpu(0).mig_devices)
    target = migs[0]
    agent.inject({"xid": 94, "gpu": 0, "gi_id": target.gi_id, "ci_id": target.ci_id})
    resource = f"nvidia.com/mig-{target.profile}"
    assert kubelet.wait_for(lambda: kubelet.devices(resource).get(target.uuid) == "Unhealthy")
    others = {m.uuid for m in migs if m.uuid != target.uuid}
    all_mig = {i: h for r in RESOURCES[1:] for i, h in kubelet.devices(r).items() if i in others}
    assert set(all_mig.values()) == {"Healthy"} and len(all_mig) == len(others)
    assert gpu0 not in kubelet.devices("nvidia.com/gpu")

    # Recovery: the GPU answers and no new critical XID comes within the quiet period.
    assert kubelet.wait_for(
        lambda: (
            set(kubelet.devices("nvidia.com/gpu").values()) == {"Healthy"}
            and kubelet.devices(resource)[target.uuid] == "Healthy"
        ),
        timeout_s=10,
    ), agent.log()
    assert agent.terminate() == 0


def test_nvml_failure_on_one_gpu(
    acceptance: Path, kubelet: FakeKubelet, start_agent: Callable[..., AgentProcess], root: Path
) -> None:
    machine = load_machine("p4de.24xlarge", hostname=NODE)
    gpu6, gpu7 = machine.gpu(6).uuid, machine.gpu(7).uuid
    agent = start_agent(
        *p4de_args(
            acceptance, root, "--health-quiet-period", "0.5", "--health-probe-interval", "0.2"
        )
    )
    serving(kubelet, agent, RESOURCES)
    held = replicas_of(kubelet, gpu7)[:2]
    kubelet.allocate("nvidia.com/gpu", held)
    agent.inject({"nvml_failure": True, "gpu": 6})
    assert kubelet.wait_for(
        lambda: (
            {kubelet.devices("nvidia.com/gpu")[i] for i in replicas_of(kubelet, gpu6)}
            == {"Unhealthy"}
        )
    ), agent.log()
    # Still listed (Unhealthy), not vanished; the other GPUs keep serving.
    assert len(kubelet.devices("nvidia.com/gpu")) == 32
    assert kubelet.allocate("nvidia.com/gpu", held).envs["NVIDIA_VISIBLE_DEVICES"] == gpu7
    # the status file is rewritten just after the streams are told: wait for it, not race it
    assert _wait(
        lambda: any(p["gpu"] == gpu6 for p in agent.status()["unhealthy"])  # type: ignore[union-attr]
    ), agent.log()
    agent.inject({"nvml_failure": False, "gpu": 6})
    assert kubelet.wait_for(
        lambda: set(kubelet.devices("nvidia.com/gpu").values()) == {"Healthy"}, 10
    ), agent.log()
    assert agent.terminate() == 0


def test_invalid_config_keeps_last_good_and_label_switch_restarts_only_changed(
    acceptance: Path,
    kubelet: FakeKubelet,
    start_agent: Callable[..., AgentProcess],
    root: Path,
) -> None:
    config = root / "plugin-config.yaml"
    config.write_text((acceptance / "seed-guides" / "time-slicing-config-t4-a100.yaml").read_text())
    labels = root / "labels"
    labels.write_text("nvidia.com/mig.config=p4de-half-balanced\n")
    args = [
        "--machine", p4de_snapshot(acceptance, root), "--config-name", "a100-40gb",
        "--config", str(acceptance / "seed-guides" / "gpu-operator-values.yaml"),
        "--config", str(config), "--labels-file", str(labels),
    ]  # fmt: skip
    agent = start_agent(*args)
    serving(kubelet, agent, RESOURCES)
    before = {r: kubelet.devices(r) for r in RESOURCES}
    held = sorted(before["nvidia.com/gpu"])[:1]
    kubelet.allocate("nvidia.com/gpu", held)
    registrations = len(kubelet.registrations)

    config.write_text(config.read_text().replace("replicas: 8", "replicas: -3"))
    assert _wait(lambda: "replicas" in str(agent.status().get("lastError", ""))), agent.log()
    assert "keeping the last good config" in agent.log()
    assert {r: kubelet.devices(r) for r in RESOURCES} == before
    assert kubelet.allocate("nvidia.com/gpu", held).envs

    # Switch the node label to the T4 entry (4 replicas): only nvidia.com/gpu is re-served.
    config.write_text((acceptance / "seed-guides" / "time-slicing-config-t4-a100.yaml").read_text())
    labels.write_text(
        "nvidia.com/mig.config=p4de-half-balanced\nnvidia.com/device-plugin.config=tesla-t4\n"
    )
    assert kubelet.wait_for(lambda: len(kubelet.devices("nvidia.com/gpu")) == 16, 10), agent.log()
    assert kubelet.registrations[registrations:] == [("nvidia.com/gpu", "kgpu-nvidia.com-gpu.sock")]
    for name in RESOURCES[1:]:
        assert kubelet.devices(name) == before[name]
    # The replica held before still exists under the new config (replica 0 of its GPU).
    assert kubelet.allocate("nvidia.com/gpu", held).envs
    assert agent.terminate() == 0


def _wait(predicate: Callable[[], bool], timeout_s: float = 10) -> bool:
    """Poll; a status file caught mid-rewrite (or not written yet) is a "not yet"."""
    return bool(eventually(predicate, timeout_s, step_s=0.05, ignore=(OSError, ValueError)))


MPS_SPLIT = """
version: v1
flags:
  mpsRoot: {root}
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      rename: nvidia.com/gpu.ts
      devices: [0, 1]
      replicas: 4
  mps:
    resources:
    - name: nvidia.com/gpu
      rename: nvidia.com/gpu.mps
      devices: [4, 5]
      replicas: 2
"""


def test_one_mps_daemon_per_mps_gpu_with_its_limits_and_pipe(
    root: Path, kubelet: FakeKubelet, start_agent: Callable[..., AgentProcess]
) -> None:
    import subprocess
    import sys

    import grpc

    mps_root = root / "mps"
    config = root / "split.yaml"
    config.write_text(MPS_SPLIT.format(root=mps_root))
    agent = start_agent("--machine", "dgx-h100", "--config", str(config))
    serving(kubelet, agent, ["nvidia.com/gpu", "nvidia.com/gpu.mps", "nvidia.com/gpu.ts"])
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "kgpu",
            "agent",
            "--status",
            "--status-file",
            str(agent.status_path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    daemons = json.loads(shown.stdout)["mps"]
    # One daemon per MPS-shared GPU (4 and 5), none for the time-sliced or whole GPUs.
    assert [(d["resource"], d["gpu"]) for d in daemons] == [
        ("nvidia.com/gpu.mps", 4),
        ("nvidia.com/gpu.mps", 5),
    ]
    machine = load_machine("dgx-h100", hostname=NODE)
    share = machine.gpus[4].memory_mib // 2
    for daemon in daemons:
        uuid = machine.gpus[daemon["gpu"]].uuid
        assert daemon["gpuUuid"] == daemon["visibleDevices"] == uuid
        assert daemon["state"] == "modelled"
        assert daemon["pipeDirectory"] == f"{mps_root}/nvidia.com/gpu.mps/{daemon['gpu']}/pipe"
        assert daemon["maxClients"] == 2
        assert daemon["activeThreadPercentage"] == 50
        assert daemon["pinnedDeviceMemoryLimitMiB"] == share
        assert daemon["controlCommands"] == [
            f"set_default_device_pinned_mem_limit 0 {share}M",
            "set_default_active_thread_percentage 50",
        ]
    assert not mps_root.exists()  # modelled: nothing written to the host

    # Allocate mounts the allocated GPU's pipe at upstream's container path.
    gpu5 = machine.gpus[5].uuid
    alloc = kubelet.allocate("nvidia.com/gpu.mps", [f"{gpu5}::1"])
    assert alloc.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu.mps/pipe"
    assert alloc.envs["NVIDIA_VISIBLE_DEVICES"] == gpu5
    assert alloc.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == f"0={share}M"
    mounts = {m.container_path: m.host_path for m in alloc.mounts}
    assert mounts["/mps/nvidia.com/gpu.mps/pipe"] == daemons[1]["pipeDirectory"]
    # Time-slicing on other GPUs of the same node is untouched by MPS.
    ts = kubelet.allocate("nvidia.com/gpu.ts", [f"{machine.gpus[0].uuid}::3"])
    assert "CUDA_MPS_PIPE_DIRECTORY" not in ts.envs and not ts.mounts
    # Replicas of two GPUs cannot share one pipe: refused with upstream's wording.
    with pytest.raises(grpc.RpcError) as refused:
        kubelet.allocate("nvidia.com/gpu.mps", [f"{machine.gpus[4].uuid}::0", f"{gpu5}::0"])
    assert "maximum request size for shared resources is 1" in str(refused.value.details())

    agent.proc.send_signal(signal.SIGHUP)
    assert _wait(lambda: "SIGHUP: node view unchanged" in agent.log()), agent.log()
    assert agent.status()["mps"] == daemons
    assert kubelet.allocate("nvidia.com/gpu.mps", [f"{gpu5}::1"]).envs == alloc.envs
    assert agent.terminate() == 0


def test_row4_single_gpu_mps_daemon(
    acceptance: Path, kubelet: FakeKubelet, start_agent: Callable[..., AgentProcess]
) -> None:
    config = acceptance / "seed-guides" / "gpu-sharing-config-any-mps.yaml"
    agent = start_agent("--machine", "a100-80gb", "--config", str(config))
    serving(kubelet, agent, ["nvidia.com/gpu"])
    ids = sorted(kubelet.devices("nvidia.com/gpu"))
    assert len(ids) == 4
    alloc = kubelet.allocate("nvidia.com/gpu", ids[:1])
    assert alloc.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/mps/nvidia.com/gpu/pipe"
    assert alloc.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert alloc.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"
    mounts = {m.container_path: m.host_path for m in alloc.mounts}
    assert mounts == {
        "/mps/nvidia.com/gpu/pipe": "/run/nvidia/mps/nvidia.com/gpu/0/pipe",
        "/dev/shm": "/run/nvidia/mps/shm",
    }
    (daemon,) = agent.status()["mps"]
    assert (daemon["gpu"], daemon["state"], daemon["maxClients"]) == (0, "modelled", 4)
    assert daemon["pipeDirectory"] == "/run/nvidia/mps/nvidia.com/gpu/0/pipe"
    assert "set_default_active_thread_percentage 25" in daemon["controlCommands"]
    assert agent.terminate() == 0
