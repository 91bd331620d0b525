"""DRA memory shares enforced at NodePrepareResources (issue 27, deliverable 2): the GPU's MPS
daemon from its first share to its last, one MPS server (one pod user per GPU) limited to the
GPU's largest share, each claim's env its own share, the GPU in EXCLUSIVE_PROCESS while it
serves, all of it rebuilt from the checkpoint.

The kubelet side is the DRA plugin core with its real checkpoint and CDI specs (claims and pods
in a memory store, as the kubelet would have the API server); the daemon is the fake
``nvidia-cuda-mps-control`` of the device plugin's tests, taught MPS servers; the GPUs are a
simulated machine behind the fake ``pynvml``. Lent GPUs are read-only, so none of this was run
on hardware.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from test_mps_enforcement import FakeDaemon

from kgpu.dra.shares import MEMORY, UNLIMITED, SharePolicy
from kgpu.drivers.gpu import GpuHandler
from kgpu.drivers.ownership import GpuOwnership
from kgpu.drivers.shares import GpuRef, ShareDaemons, pod_lookup
from kgpu.hardware.backend import BackendError, ComputeMode
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet import cdi
from kgpu.kubelet.dra.handler import ClaimError, ClaimRef
from kgpu.kubelet.dra.plugin import DraPlugin
from kgpu.kubelet.dra.server import DriverServer
from kgpu.store import MemoryStore
from kgpu.testing.fake_kubelet_dra import FakeDraKubelet
from kgpu.testing.fake_nvml import FakeNvml

NODE = "node-a"
KIND = "k8s.gpu.nvidia.com/claim"
BINARY = "/usr/bin/nvidia-cuda-mps-control"
MEMORY_SHARES = SharePolicy(MEMORY)


class FakeShareDaemon(FakeDaemon):
    """The device plugin's fake daemon, with MPS servers: ``start_server -uid`` starts one
    (pids from 5000), ``get_server_list`` lists them, ``shutdown_server`` ends one; a command
    to a GPU whose daemon is not running fails as the real control client does."""

    def __init__(self, sim: SimulatedBackend, nvml: FakeNvml) -> None:
        super().__init__(sim, nvml)
        self.servers: dict[str, dict[int, int]] = {}  # GPU UUID -> server pid -> user
        self.running: set[str] = set()
        self.next_pid = 5000
        self.fail = ""  # a command that fails (its first word)

    def __call__(self, args: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        if args[0] == "mount":
            return super().__call__(args, **kw)
        env = kw["env"]
        assert isinstance(env, dict)
        uuid = env["CUDA_VISIBLE_DEVICES"]
        command = "-d" if args[1:] == ["-d"] else str(kw.get("input") or "")
        if command != "-d" and uuid not in self.running:
            raise subprocess.CalledProcessError(1, args, "", "Cannot find MPS control daemon")
        super().__call__(args, **kw)
        servers = self.servers.setdefault(uuid, {})
        words = command.split()
        if self.fail and words[:1] == [self.fail]:
            raise subprocess.CalledProcessError(1, args, "", "refused")
        out = ""
        if command == "-d":
            self.running.add(uuid)
        elif command == "quit":
            self.running.discard(uuid)
            servers.clear()
        elif command == "get_server_list":
            out = "\n".join(str(pid) for pid in servers)
        elif words[:2] == ["start_server", "-uid"]:
            servers[self.next_pid] = int(words[2])
            self.next_pid += 1
        elif words[0] in ("shutdown_server", "set_device_pinned_mem_limit"):
            if int(words[1]) not in servers:
                raise subprocess.CalledProcessError(1, args, "", "no such server")
            if words[0] == "shutdown_server":
                del servers[int(words[1])]
        return subprocess.CompletedProcess(args, 0, out, "")

    def commands(self, uuid: str) -> list[str]:
        """What the GPU's daemon was sent, queries left out, with the NVML mode calls."""
        return [w for who, w in self.log if who in (uuid, "nvml") and w != "get_server_list"]

    def crash(self, uuid: str) -> None:
        """The daemon died (with the node's agent, say): its servers with it."""
        self.running.discard(uuid)
        self.servers.pop(uuid, None)
        self.sim.set_mps_server(uuid, None)


class Rig:
    """A node with the DRA plugin."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp_path
        self.machine = load_machine("dgx-h100", hostname=NODE)
        self.sim = SimulatedBackend(self.machine)
        self.nvml = FakeNvml(self.sim)
        self.daemon = FakeShareDaemon(self.sim, self.nvml)
        monkeypatch.setattr(subprocess, "run", self.daemon)  # as mps.py's tests do
        self.store = MemoryStore()
        self.ownership = GpuOwnership()
        self.events: list[tuple[str, str, str]] = []
        self.plugin_dir = tmp_path / "plugins" / "gpu.nvidia.com"
        self.gpu1 = self.machine.gpus[1].uuid
        self.plugin = self.start()

    def start(self, policy: SharePolicy = MEMORY_SHARES) -> DraPlugin:
        """The agent (re)starting: a new handler and daemons over the same directories."""
        daemons = ShareDaemons(
            self.plugin_dir / "mps" / "shares",
            policy,
            backend=NvmlBackend(self.nvml),
            on_event=lambda *event: self.events.append(event),
            use_binary=True,
        )
        daemons.binary = BINARY
        self.handler = GpuHandler(
            self.machine,
            NODE,
            self.plugin_dir,
            ownership=self.ownership,
            shares=policy,
            pod_lookup=pod_lookup(self.store),
            share_daemons=daemons,
        )
        return DraPlugin(self.handler, self.plugin_dir, self.tmp / "cdi", self.store)

    def claim(
        self,
        name: str,
        memory: str | None,
        run_as: int | None,
        *,
        device: str = "gpu-1",
        compute: int | None = None,
        config: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A pod running as ``run_as`` (pod securityContext) and its allocated share claim."""
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{name}-pod", "namespace": "default"},
            "spec": {
                "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                "containers": [
                    {"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}},
                    {"name": "sidecar", "image": "y"},  # uses no GPU: its user is not asked
                ],
            },
        }
        if run_as is not None:
            pod["spec"]["securityContext"] = {"runAsUser": run_as}
        created = self.store.create(pod)
        consumed: dict[str, str] = {} if memory is None else {"memory": memory}
        if compute is not None:
            consumed["computeShares"] = str(compute)
        result = {
            "request": "gpu",
            "driver": "gpu.nvidia.com",
            "pool": NODE,
            "device": device,
            "shareID": f"share-{name}",
            "consumedCapacity": consumed,
        }
        devices: dict[str, Any] = {"results": [result]}
        if config is not None:
            devices["config"] = [
                {
                    "source": "FromClaim",
                    "requests": [],
                    "opaque": {"driver": "gpu.nvidia.com", "parameters": config},
                }
            ]
        return self.store.create(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"devices": {"requests": []}},
                "status": {
                    "allocation": {"devices": devices},
                    "reservedFor": [
                        {
                            "resource": "pods",
                            "name": f"{name}-pod",
                            "uid": created["metadata"]["uid"],
                        }
                    ],
                },
            }
        )

    def prepare(self, *claims: dict[str, Any]) -> dict[str, str]:
        out = self.plugin.prepare([ref(c) for c in claims])
        return {c["metadata"]["name"]: out[c["metadata"]["uid"]].error for c in claims}

    def unprepare(self, *claims: dict[str, Any]) -> None:
        out = self.plugin.unprepare([ref(c) for c in claims])
        assert set(out.values()) == {""}

    def spec(self, claim: dict[str, Any]) -> dict[str, Any]:
        return cdi.read_spec(cdi.transient_specs(self.tmp / "cdi", KIND)[claim["metadata"]["uid"]])


def ref(claim: dict[str, Any]) -> ClaimRef:
    meta = claim["metadata"]
    return ClaimRef(meta["namespace"], meta["uid"], meta["name"])


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Rig:
    return Rig(tmp_path, monkeypatch)


def test_a_share_for_a_second_user_of_a_gpu_is_refused_before_mps_would_queue_it(
    rig: Rig,
) -> None:
    """A Legacy MPS daemon runs one user's server at a time: the second user's pod would wait
    for the first's processes to end, so its claim is refused at prepare, saying why."""
    a, b = rig.claim("a", "20Gi", 1000), rig.claim("b", "40Gi", 1001)
    elsewhere = rig.claim("c", "40Gi", 1001, device="gpu-2")
    errors = rig.prepare(a, b, elsewhere)
    assert errors["a"] == errors["c"] == ""
    assert errors["b"] == (
        "claim default/b: pod default/b-pod runs as user 1001, but the MPS daemon of GPU 1 "
        "serves user 1000 (claim default/a), and an MPS control daemon runs one user's server "
        "at a time: this pod's CUDA calls would wait until every process of that user on the "
        "GPU has exited. Run the pods that share a GPU as one securityContext.runAsUser, or "
        "keep them on different GPUs"
    )
    assert rig.daemon.servers[rig.gpu1] == {5000: 1000}
    assert rig.daemon.servers[rig.machine.gpus[2].uuid] == {5001: 1001}
    assert len(rig.ownership.ledger().holdings(rig.gpu1)) == 1


def state(rig: Rig, claim: dict[str, Any]) -> dict[str, Any]:
    (share,) = rig.plugin.prepared()[claim["metadata"]["uid"]].handler_state["shares"]
    return dict(share)


def test_shares_of_one_user_and_other_sizes_share_a_server_at_the_largest(rig: Rig) -> None:
    """One user's 20 GiB and 40 GiB shares of one GPU: one server, limited to 40 GiB (the
    ceiling), each claim's env its own share (which only lowers the server's limit)."""
    a = rig.claim("a", "20Gi", 1000)
    b = rig.claim("b", "40Gi", 1000, compute=30)
    c = rig.claim("c", "10Gi", 1000)
    assert rig.prepare(a, b, c) == {"a": "", "b": "", "c": ""}

    assert rig.daemon.commands(rig.gpu1) == [
        "nvmlDeviceGetComputeMode",
        "nvmlDeviceSetComputeMode",  # EXCLUSIVE_PROCESS before the daemon starts
        "-d",
        "set_default_device_pinned_mem_limit 0 1024M",  # the policy's smallest share
        "set_default_active_thread_percentage 2",
        "start_server -uid 1000",
        "set_device_pinned_mem_limit 5000 0 20480M",
        "set_active_thread_percentage 5000 100",  # asked no compute share: no cap
        "set_device_pinned_mem_limit 5000 0 40960M",  # b is larger: the ceiling goes up
        "set_active_thread_percentage 5000 100",  # (the largest asked: a's 100, not b's 30)
    ]  # c is smaller: nothing sent
    assert rig.daemon.servers[rig.gpu1] == {5000: 1000}
    assert rig.sim.compute_mode(1) == ComputeMode.EXCLUSIVE_PROCESS

    pipe = rig.plugin_dir / "mps" / "shares" / rig.gpu1 / "pipe"
    edits = rig.spec(a)["devices"][0]["containerEdits"]
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/nvidia1"]
    assert {m["containerPath"]: m["hostPath"] for m in edits["mounts"]} == {
        "/tmp/nvidia-mps": str(pipe),
        "/dev/shm": str(pipe.parent / "shm"),
    }
    assert edits["env"] == [  # a's exact share, whatever the server's ceiling
        "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100",
    ]
    env_b = rig.spec(b)["devices"][0]["containerEdits"]["env"]
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40960M" in env_b
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30" in env_b
    # The state says what a client that drops the env gets: the ceiling when it was prepared.
    assert [state(rig, x)["ceilingMiB"] for x in (a, b, c)] == [20480, 40960, 40960]
    (status,) = rig.handler.share_daemons.status()
    assert status["serverPid"] == 5000 and status["ceilingMiB"] == 40960
    shares = status["shares"]
    assert isinstance(shares, list)
    assert [(s["pinnedDeviceMemoryLimitMiB"], s["ceilingMiB"]) for s in shares] == [
        (20480, 40960),
        (40960, 40960),
        (10240, 40960),
    ]

    # A process that drops CUDA_MPS_PIPE_DIRECTORY is refused by the driver; clients work.
    with pytest.raises(BackendError, match="busy or unavailable"):
        rig.sim.open_context(1, through_mps=False)
    rig.sim.open_context(1, through_mps=True)
    rig.sim.open_context(2, through_mps=False)  # an unshared GPU is left alone

    # The ledger: three shares of one DRA-held GPU, which the device plugin is not offered.
    held = rig.ownership.ledger().holdings(rig.gpu1)
    assert sorted(str(h.share) for h in held) == ["10240/81559", "20480/81559", "40960/81559"]
    assert rig.ownership.problems() == []

    # The largest goes: the server comes down to the largest left (for clients from now on).
    sent = len(rig.daemon.log)
    rig.unprepare(b)
    assert [w for _, w in rig.daemon.log[sent:] if w != "get_server_list"] == [
        "set_device_pinned_mem_limit 5000 0 20480M",
        "set_active_thread_percentage 5000 100",
    ]
    sent = len(rig.daemon.log)
    rig.unprepare(c)  # not the largest: nothing changes
    assert [w for _, w in rig.daemon.log[sent:] if w != "get_server_list"] == []
    rig.unprepare(a)
    assert rig.daemon.commands(rig.gpu1)[-2:] == ["shutdown_server 5000", "quit"]


def test_a_pod_without_run_as_user_is_refused_and_starts_nothing(rig: Rig) -> None:
    claim = rig.claim("anon", "20Gi", None)
    assert rig.prepare(claim) == {
        "anon": "claim default/anon: pod default/anon-pod, container 'main' has no runAsUser: "
        "set securityContext.runAsUser in the pod (or each container that uses the claim): an "
        "MPS server serves one Linux user, and kgpu enforces a GPU memory share through the "
        "server of the user the pod runs as"
    }
    assert rig.daemon.log == []  # no daemon, no compute mode touched
    assert rig.sim.compute_mode(1) == ComputeMode.DEFAULT
    assert rig.ownership.ledger().holdings() == ()
    # The container's own runAsUser counts over the pod's (here: the pod has none).
    pod = rig.store.get("v1", "Pod", "anon-pod", "default")
    pod["spec"]["containers"][0]["securityContext"] = {"runAsUser": 4242}
    rig.store.update(pod)
    assert rig.prepare(claim) == {"anon": ""}
    assert rig.daemon.servers[rig.gpu1] == {5000: 4242}


def test_the_last_share_stops_the_daemon_and_restores_the_compute_mode(rig: Rig) -> None:
    rig.sim.set_compute_mode(1, ComputeMode.PROHIBITED)  # what the node's provisioning left
    a, b = rig.claim("a", "20Gi", 1000), rig.claim("b", "20Gi", 1000)
    assert rig.prepare(a, b) == {"a": "", "b": ""}
    assert rig.daemon.servers[rig.gpu1] == {5000: 1000}  # one user, one share size: one server
    sent = len(rig.daemon.log)
    rig.unprepare(a)
    assert rig.daemon.log[sent:] == []  # b still uses the server
    rig.unprepare(b)
    assert rig.daemon.commands(rig.gpu1)[-2:] == ["shutdown_server 5000", "quit"]
    assert [c for c in rig.nvml.calls if "ComputeMode" in c] == ["nvmlDeviceSetComputeMode"]
    assert rig.sim.compute_mode(1) == ComputeMode.PROHIBITED
    assert rig.handler.share_daemons.status() == []
    assert rig.ownership.ledger().holdings() == ()


@pytest.mark.parametrize("daemon_survives", [True, False])
def test_an_agent_restart_restores_daemons_servers_and_ledger(
    rig: Rig, daemon_survives: bool
) -> None:
    a, b = rig.claim("a", "20Gi", 1000), rig.claim("b", "40Gi", 1000)
    assert rig.prepare(a, b) == {"a": "", "b": ""}
    if not daemon_survives:
        rig.daemon.crash(rig.gpu1)
    rig.ownership = GpuOwnership()  # the ledger lives in the agent
    sent = len(rig.daemon.log)
    rig.plugin = rig.start()

    after = [w for _, w in rig.daemon.log[sent:] if w != "get_server_list"]
    if daemon_survives:  # adopted: asked for its servers, nothing restarted
        assert [w for w in after if not w.startswith("nvml")] == []
        assert rig.daemon.servers[rig.gpu1] == {5000: 1000}
    else:  # started again, the server and its ceiling set again
        assert "-d" in after and "start_server -uid 1000" in after
        assert "set_device_pinned_mem_limit 5001 0 40960M" in after
        assert "set_device_pinned_mem_limit 5001 0 20480M" not in after
    (status,) = rig.handler.share_daemons.status()
    assert status["previousComputeMode"] == "Default"
    shares = status["shares"]
    assert isinstance(shares, list)
    assert [(s["claim"], s["uid"]) for s in shares] == [("default/a", 1000), ("default/b", 1000)]
    assert status["ceilingMiB"] == 40960
    assert len(rig.ownership.ledger().holdings(rig.gpu1)) == 2
    assert rig.prepare(a) == {"a": ""}  # known from the checkpoint
    rig.unprepare(a, b)
    assert rig.gpu1 not in rig.daemon.running
    assert rig.sim.compute_mode(1) == ComputeMode.DEFAULT


def test_a_gpu_whose_mode_cannot_be_set_fails_the_claim_with_nothing_left_running(
    rig: Rig,
) -> None:
    rig.sim.refuse_compute_mode = "not root"
    claim = rig.claim("a", "20Gi", 1000)
    error = rig.prepare(claim)["a"]
    assert error.startswith(f"GPU 1 ({rig.gpu1}) cannot enforce memory shares: could not set")
    assert "Exclusive_Process" in error and "run the agent as root" in error
    assert rig.daemon.running == set()
    assert [reason for _, reason, _ in rig.events] == ["MpsNotEnforced"]
    assert rig.ownership.ledger().holdings() == ()
    assert cdi.transient_specs(rig.tmp / "cdi", KIND) == {}


def test_an_opaque_sharing_config_on_a_memory_share_is_refused(rig: Rig) -> None:
    config = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS"},
    }
    error = rig.prepare(rig.claim("a", "20Gi", 1000, config=config))["a"]
    assert "status.allocation.devices.config[0].opaque.parameters.sharing.strategy" in error
    assert "already enforced through that GPU's MPS daemon" in error
    assert rig.daemon.log == []


def test_a_claim_with_a_share_and_another_device_is_refused(rig: Rig) -> None:
    claim = rig.claim("a", "20Gi", 1000)
    claim["status"]["allocation"]["devices"]["results"].append(
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-2"}
    )
    rig.store.update(claim)
    error = rig.prepare(claim)["a"]
    assert "an MPS client talks to one daemon" in error and "gpu-2" in error


def test_unlimited_shares_are_time_sliced_whole_gpus_without_mps(rig: Rig) -> None:
    rig.plugin = rig.start(SharePolicy(UNLIMITED))
    a, b = rig.claim("a", "20Gi", None), rig.claim("b", None, None)
    assert rig.prepare(a, b) == {"a": "", "b": ""}
    assert rig.daemon.log == []
    edits = rig.spec(a)["devices"][0]["containerEdits"]
    assert "mounts" not in edits and "env" not in edits
    state = rig.plugin.prepared()[a["metadata"]["uid"]].handler_state
    assert state["shares"] == [{"device": "gpu-1", "shareID": "share-a", "enforced": False}]
    assert rig.ownership.problems() == []
    # MPS is refused on such a share, as upstream refuses it with consumable shares.
    config = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "MPS"},
    }
    error = rig.prepare(rig.claim("c", None, None, config=config))["c"]
    assert "MPS sharing is not supported on a consumable share" in error


def test_modelled_daemons_record_the_same_commands_and_write_nothing(tmp_path: Path) -> None:
    sim = SimulatedBackend(load_machine("dgx-h100", hostname=NODE))
    daemons = ShareDaemons(
        tmp_path / "shares",
        SharePolicy(MEMORY),
        backend=sim,
        use_binary=False,
    )
    gpu = GpuRef(sim.snapshot().gpus[3].uuid, 3, 81559)
    daemons.serve(gpu, "u1", "ns/a", "ns/a-pod", 1000, 20480, 100)
    daemons.serve(gpu, "u2", "ns/b", "ns/b-pod", 1000, 40960, 50)
    (status,) = daemons.status()
    assert status["mode"] == "modelled"
    assert status["controlCommands"] == [
        "set_default_device_pinned_mem_limit 0 1024M",
        "set_default_active_thread_percentage 2",
        "start_server -uid 1000",
        "set_device_pinned_mem_limit 1 0 20480M",
        "set_active_thread_percentage 1 100",
        "set_device_pinned_mem_limit 1 0 40960M",
        "set_active_thread_percentage 1 100",
    ]
    assert sim.compute_mode(3) == ComputeMode.EXCLUSIVE_PROCESS
    assert not (tmp_path / "shares").exists()
    daemons.release("u1")
    daemons.release("u2")
    assert daemons.status() == [] and sim.compute_mode(3) == ComputeMode.DEFAULT
    # modelled as a Legacy daemon: a second user is refused, as on a node
    daemons.serve(gpu, "u1", "ns/a", "ns/a-pod", 1000, 20480, 100)
    with pytest.raises(ClaimError, match=r"serves user 1000 \(claim ns/a\)"):
        daemons.serve(gpu, "u2", "ns/b", "ns/b-pod", 1001, 40960, 50)


def test_shares_through_the_kubelets_dra_grpc_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same through NodePrepareResources/NodeUnprepareResources over the plugin's socket,
    as the kubelet calls them (a short root: socket paths stay under 108 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="ks", dir="/tmp"))
    try:
        rig = Rig(root, monkeypatch)
        server = DriverServer(rig.plugin, root)
        server.start()
        try:
            with FakeDraKubelet(root) as kubelet:
                kubelet.wait_registered("gpu.nvidia.com")
                a = rig.claim("a", "20Gi", 1000)
                b = rig.claim("b", "40Gi", 1001, device="gpu-2")
                anon = rig.claim("anon", "20Gi", None)
                out = kubelet.prepare("gpu.nvidia.com", [ref(a), ref(b), ref(anon)])
                uid_a = a["metadata"]["uid"]
                assert out[uid_a] == {
                    "error": "",
                    "devices": [
                        {
                            "requestNames": ["gpu"],
                            "poolName": NODE,
                            "deviceName": "gpu-1",
                            "cdiDeviceIDs": [f"{KIND}={uid_a}-gpu-1"],
                        }
                    ],
                }
                assert "has no runAsUser" in out[anon["metadata"]["uid"]]["error"]
                assert rig.daemon.servers[rig.gpu1] == {5000: 1000}
                assert rig.daemon.servers[rig.machine.gpus[2].uuid] == {5001: 1001}
                assert set(kubelet.unprepare("gpu.nvidia.com", [ref(a), ref(b)]).values()) == {""}
                assert rig.daemon.running == set()
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_server_whose_limits_cannot_be_set_is_shut_down_and_the_claim_fails(
    rig: Rig,
) -> None:
    rig.daemon.fail = "set_active_thread_percentage"
    error = rig.prepare(rig.claim("a", "20Gi", 1000))["a"]
    assert (
        error.startswith("claim default/a: the MPS daemon of GPU 1 (")
        and "could not serve user 1000 with its limits" in error
    )
    assert rig.daemon.commands(rig.gpu1)[-3:] == [
        "set_active_thread_percentage 5000 100",
        "shutdown_server 5000",
        "quit",
    ]
    assert rig.gpu1 not in rig.daemon.running
    assert rig.sim.compute_mode(1) == ComputeMode.DEFAULT


def test_a_damaged_share_record_does_not_stop_a_restart(tmp_path: Path) -> None:
    daemons = ShareDaemons(tmp_path, SharePolicy(MEMORY), use_binary=False)
    daemons.restore([{"gpu": "GPU-x"}, {"gpu": "GPU-y", "gpuIndex": 1, "gpuMemoryMiB": "?"}])
    assert daemons.status() == []


def test_a_larger_share_whose_limits_cannot_be_set_leaves_the_ceiling_where_it_was(
    rig: Rig,
) -> None:
    a, b = rig.claim("a", "20Gi", 1000), rig.claim("b", "40Gi", 1000)
    assert rig.prepare(a) == {"a": ""}
    rig.daemon.fail = "set_active_thread_percentage"
    error = rig.prepare(b)["b"]
    assert "could not serve user 1000 with its limits" in error
    assert rig.daemon.commands(rig.gpu1)[-4:] == [
        "set_device_pinned_mem_limit 5000 0 40960M",
        "set_active_thread_percentage 5000 100",  # refused: back to a's 20 GiB
        "set_device_pinned_mem_limit 5000 0 20480M",
        "set_active_thread_percentage 5000 100",  # refused again (as far as it lets us)
    ]
    assert rig.daemon.servers[rig.gpu1] == {5000: 1000}  # a's server keeps serving
    assert [h.holder for h in rig.ownership.ledger().holdings(rig.gpu1)] == [a["metadata"]["uid"]]
