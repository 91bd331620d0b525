"""End to end over real unix sockets: the agent's DRA component against a fake kubelet that
registers it through plugins_registry/ and calls NodePrepareResources / NodeUnprepareResources
(v1 and v1beta1), and an agent process killed with SIGKILL at every step."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from dra_kubelet_helpers import NODE, gpu_config, make_claim, ref_of

from kgpu import releases
from kgpu.drivers.dra import DraComponent
from kgpu.drivers.gpu import GpuHandler
from kgpu.hardware.model import Machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.kubelet import cdi
from kgpu.kubelet.dra.handler import ClaimInfo, PreparedClaim, PreparedDevice
from kgpu.kubelet.dra.plugin import CRASH_POINTS, DraPlugin
from kgpu.kubelet.dra.server import SUPPORTED_SERVICES, DriverServer, plugin_dir
from kgpu.store import MemoryStore
from kgpu.testing.fake_kubelet_dra import FakeDraKubelet

pytestmark = pytest.mark.slow

KIND = "k8s.gpu.nvidia.com/claim"
DRIVER = "gpu.nvidia.com"


@pytest.fixture
def agent(short_tmp: Path, machine: Machine, store: MemoryStore) -> Iterator[DraComponent]:
    component = DraComponent(
        short_tmp / "kubelet", short_tmp / "cdi", NODE, SimulatedBackend(machine), store
    )
    component.start()
    yield component
    component.stop()


def _kubelets() -> list[Any]:
    """One kubelet per distinct list of DRA services the modelled releases call."""
    by_services: dict[tuple[str, ...], list[str]] = {}
    for rel in releases.RELEASES.values():
        by_services.setdefault(rel.kubelet_services, []).append(rel.name)
    return [pytest.param(s, id="kubelet-" + "-".join(n)) for s, n in by_services.items()]


@pytest.mark.parametrize("services", _kubelets())
def test_kubelet_registers_and_prepares_over_sockets(
    short_tmp: Path, agent: DraComponent, store: MemoryStore, services: tuple[str, ...]
) -> None:
    with FakeDraKubelet(short_tmp / "kubelet", services=services) as kubelet:
        plugin = kubelet.wait_registered(DRIVER)
        # the kubelet's newest service that kgpu serves (1.32/1.33: v1beta1; 1.34+: v1)
        assert plugin.service == next(s for s in services if s in SUPPORTED_SERVICES)
        assert plugin.endpoint == str(short_tmp / "kubelet" / "plugins" / DRIVER / "dra.sock")
        assert agent.servers[DRIVER].registration.registered.wait(5)

        # The agent published its pool into the API server.
        slices = store.list("resource.k8s.io/v1", "ResourceSlice")
        assert {s["spec"]["pool"]["name"] for s in slices} == {NODE}
        published = {d["name"] for s in slices for d in s["spec"]["devices"]}
        assert {"gpu-1", "gpu-7", "gpu-0-mig-1g10gb-19-6"} <= published

        good = make_claim(
            store,
            "train",
            [("gpus", "gpu-1"), ("gpus", "gpu-2")],
            [
                (
                    ["gpus"],
                    gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 30}),
                )
            ],
        )
        bad = make_claim(
            store,
            "typo",
            [("gpu", "gpu-3")],
            [([], gpu_config(strategy="TimeSlicing", timeSlicingConfig={"intervall": "Long"}))],
        )
        out = kubelet.prepare(DRIVER, [ref_of(good), ref_of(bad)])
        uid = good["metadata"]["uid"]
        assert out[uid]["error"] == ""
        assert [d["cdiDeviceIDs"] for d in out[uid]["devices"]] == [
            [f"{KIND}={uid}-gpu-1"],
            [f"{KIND}={uid}-gpu-2"],
        ]
        assert out[uid]["devices"][0]["requestNames"] == ["gpus"]
        assert out[uid]["devices"][0]["poolName"] == NODE
        bad_error = out[bad["metadata"]["uid"]]["error"]
        assert (
            "status.allocation.devices.config[0].opaque.parameters.sharing.timeSlicingConfig.intervall"
            in bad_error
        )

        spec_files = cdi.transient_specs(short_tmp / "cdi", KIND)
        assert set(spec_files) == {uid}
        spec = cdi.read_spec(spec_files[uid])
        assert cdi.validate_spec(spec) == []
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30" in spec["devices"][0]["containerEdits"]["env"]

        assert kubelet.unprepare(DRIVER, [ref_of(good), ref_of(bad)]) == {
            uid: "",
            bad["metadata"]["uid"]: "",
        }
        assert cdi.transient_specs(short_tmp / "cdi", KIND) == {}


def test_kubelet_refuses_a_plugin_it_cannot_speak_to(short_tmp: Path, agent: DraComponent) -> None:
    kubelet = FakeDraKubelet(short_tmp / "kubelet", services=("v2.DRAPlugin",))
    kubelet.scan()
    assert DRIVER not in kubelet.plugins
    assert "none of services supported by the plugin" in kubelet.refusals[0].error
    assert not agent.servers[DRIVER].registration.registered.is_set()
    assert "v1.DRAPlugin" in agent.servers[DRIVER].registration.error


def test_registration_follows_the_agent_lifecycle(short_tmp: Path, agent: DraComponent) -> None:
    with FakeDraKubelet(short_tmp / "kubelet") as kubelet:
        kubelet.wait_registered(DRIVER)
        reg = agent.servers[DRIVER].registration_socket
        reg.unlink()  # someone wiped plugins_registry/: the agent must register again
        kubelet.wait_deregistered(DRIVER)
        kubelet.wait_registered(DRIVER)
        assert reg.exists()
        agent.stop()
        kubelet.wait_deregistered(DRIVER)
        assert not reg.exists()


def test_a_restarted_kubelet_finds_the_plugin_and_its_prepared_claims(
    short_tmp: Path, agent: DraComponent, store: MemoryStore
) -> None:
    claim = make_claim(store, "keep", [("gpu", "gpu-6")])
    with FakeDraKubelet(short_tmp / "kubelet") as kubelet:
        kubelet.wait_registered(DRIVER)
        before = kubelet.prepare(DRIVER, [ref_of(claim)])
    # The kubelet restarts: it rescans plugins_registry/ and registers the running plugin again.
    with FakeDraKubelet(short_tmp / "kubelet") as kubelet:
        kubelet.wait_registered(DRIVER)
        assert kubelet.prepare(DRIVER, [ref_of(claim)]) == before
        assert len(cdi.transient_specs(short_tmp / "cdi", KIND)) == 1


class ChannelHandler:
    """A minimal second driver, as the ComputeDomain helper plugs one in."""

    driver = "compute-domain.nvidia.com"
    cdi_kind = "k8s.compute-domain.nvidia.com/claim"

    def __init__(self) -> None:
        self.restored: dict[str, Any] = {}

    def prepare(self, claim: ClaimInfo) -> PreparedClaim:
        devices = tuple(
            PreparedDevice(
                (str(r["request"]),),
                str(r["pool"]),
                str(r["device"]),
                f"{claim.uid}-{r['device']}",
                # a CDI device without edits is refused by runtimes ("empty device edits")
                cdi.ContainerEdits(env=(f"CHANNEL={r['device']}",)),
            )
            for r in claim.results
        )
        return PreparedClaim(devices, state={"channel": 0})

    def unprepare(self, claim_uid: str, state: Any) -> None:
        pass

    def restore(self, states: Any) -> None:
        self.restored = dict(states)

    def resource_slices(self, node_name: str) -> list[dict[str, Any]]:
        return [
            {
                "metadata": {"name": f"{node_name}-{self.driver}-0"},
                "spec": {
                    "devices": [
                        {"name": "channel-0", "attributes": {"type": {"string": "channel"}}}
                    ]
                },
            }
        ]


def test_a_second_driver_is_served_by_the_same_agent(
    short_tmp: Path, agent: DraComponent, store: MemoryStore
) -> None:
    extra = ChannelHandler()
    agent.add_driver(extra)
    with FakeDraKubelet(short_tmp / "kubelet") as kubelet:
        kubelet.wait_registered(DRIVER)
        kubelet.wait_registered(extra.driver)
        claim = make_claim(store, "ch", [("channel", "channel-0")], driver=extra.driver)
        gpu = make_claim(store, "g", [("gpu", "gpu-4")])
        uid = claim["metadata"]["uid"]
        out = kubelet.prepare(extra.driver, [ref_of(claim)])
        assert out[uid]["devices"][0]["cdiDeviceIDs"] == [
            f"k8s.compute-domain.nvidia.com/claim={uid}-channel-0"
        ]
        assert kubelet.prepare(DRIVER, [ref_of(gpu)])[gpu["metadata"]["uid"]]["error"] == ""
        drivers = {s["spec"]["driver"] for s in store.list("resource.k8s.io/v1", "ResourceSlice")}
        assert drivers == {DRIVER, extra.driver}
        # Each driver owns its own spec kind and checkpoint.
        assert set(cdi.transient_specs(short_tmp / "cdi", extra.cdi_kind)) == {uid}
        assert set(cdi.transient_specs(short_tmp / "cdi", KIND)) == {gpu["metadata"]["uid"]}
        assert agent.plugins[extra.driver].checkpoint.path != agent.plugins[DRIVER].checkpoint.path


# -- SIGKILL -------------------------------------------------------------------------------

SCRIPT = Path(__file__).with_name("dra_crash_agent.py")


class AgentProcess:
    """The plugin in its own process; returns once the kubelet has registered this instance."""

    def __init__(
        self, root: Path, claims: Path, kubelet: FakeDraKubelet, crash_at: str = ""
    ) -> None:
        seen = kubelet.registrations
        args = [sys.executable, str(SCRIPT), str(root), str(claims)] + (
            [crash_at] if crash_at else []
        )
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", line
        kubelet.wait_registered(DRIVER, after=seen)

    def killed(self) -> bool:
        return self.proc.wait(timeout=10) == -signal.SIGKILL

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


def test_agent_killed_at_every_step_loses_and_duplicates_nothing(
    short_tmp: Path, store: MemoryStore
) -> None:
    claims_file = short_tmp / "claims.json"
    claims: list[dict[str, Any]] = []
    live: set[str] = set()  # claims the kubelet was told are prepared and has not unprepared
    answers: dict[str, Any] = {}

    def add_claim(name: str, device: str) -> dict[str, Any]:
        claim = make_claim(store, name, [("gpu", device)], [((), gpu_config(strategy="MPS"))])
        claims.append(claim)
        claims_file.write_text(json.dumps(claims))
        return claim

    def check(root: Path) -> None:
        specs = cdi.transient_specs(root / "cdi", KIND)
        assert set(specs) == live
        for path in specs.values():
            assert cdi.validate_spec(cdi.read_spec(path)) == []
        mps = root / "kubelet" / "plugins" / DRIVER / "mps"
        owners = sorted(p.name[:36] for p in mps.glob("*"))
        assert owners == sorted(live)  # one MPS directory per live claim, none left over

    claims_file.write_text("[]")
    prepare_points = CRASH_POINTS[:4]
    unprepare_points = CRASH_POINTS[4:]
    with FakeDraKubelet(short_tmp / "kubelet") as kubelet:
        steady = add_claim("steady", "gpu-7")
        proc = AgentProcess(short_tmp, claims_file, kubelet)
        answers["steady"] = kubelet.prepare_until_done(DRIVER, [ref_of(steady)])
        live.add(steady["metadata"]["uid"])
        proc.close()

        for i, point in enumerate(prepare_points):
            claim = add_claim(f"c{i}", f"gpu-{i + 1}")
            proc = AgentProcess(short_tmp, claims_file, kubelet, crash_at=point)
            with pytest.raises(grpc.RpcError):
                kubelet.prepare(DRIVER, [ref_of(claim)])
            assert proc.killed()
            proc = AgentProcess(short_tmp, claims_file, kubelet)  # restart: reconcile runs first
            live_before = set(live)
            check_live = cdi.transient_specs(short_tmp / "cdi", KIND)
            assert set(check_live) in (live_before, live_before | {claim["metadata"]["uid"]})
            out = kubelet.prepare_until_done(DRIVER, [ref_of(claim)])
            uid = claim["metadata"]["uid"]
            assert out[uid]["devices"][0]["cdiDeviceIDs"] == [f"{KIND}={uid}-gpu-{i + 1}"]
            live.add(uid)
            check(short_tmp)
            # The steady claim, prepared before any crash, still answers the same.
            assert kubelet.prepare(DRIVER, [ref_of(steady)]) == answers["steady"]
            proc.close()

        for i, point in enumerate(unprepare_points):
            claim = claims[1 + i]
            proc = AgentProcess(short_tmp, claims_file, kubelet, crash_at=point)
            with pytest.raises(grpc.RpcError):
                kubelet.unprepare(DRIVER, [ref_of(claim)])
            assert proc.killed()
            proc = AgentProcess(short_tmp, claims_file, kubelet)
            kubelet.unprepare_until_done(DRIVER, [ref_of(claim)])
            live.discard(claim["metadata"]["uid"])
            check(short_tmp)
            proc.close()

        proc = AgentProcess(short_tmp, claims_file, kubelet)
        kubelet.unprepare_until_done(DRIVER, [ref_of(c) for c in claims])
        live.clear()
        check(short_tmp)
        proc.close()


def test_a_damaged_checkpoint_stops_the_start_without_leaving_sockets(
    short_tmp: Path, machine: Machine
) -> None:
    from kgpu.kubelet.checkpoint import CheckpointError

    extra = ChannelHandler()
    ckpt = short_tmp / "kubelet" / "plugins" / extra.driver / "checkpoint.json"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_text('{"version": "kgpu.dra.checkpoint/v1", "checksum": "0", "claims": {}}')
    component = DraComponent(
        short_tmp / "kubelet", short_tmp / "cdi", NODE, SimulatedBackend(machine)
    )
    component.add_driver(extra)
    with pytest.raises(CheckpointError, match="checksum"):
        component.start()
    assert list((short_tmp / "kubelet" / "plugins_registry").glob("*.sock")) == []
    assert not (short_tmp / "kubelet" / "plugins" / DRIVER / "dra.sock").exists()


@pytest.mark.parametrize(("enabled", "clique"), [(True, True), (False, True), (True, False)])
def test_fabric_nodes_serve_the_compute_domain_driver_too(
    short_tmp: Path, store: MemoryStore, enabled: bool, clique: bool
) -> None:
    """The agent's DRA component adds compute-domain.nvidia.com on a node whose GPUs are in an
    NVLink clique (through the factory the agent passes), and only there."""
    from kgpu.drivers.computedomain import compute_domain_driver
    from kgpu.hardware.profiles import load_machine

    gb200 = load_machine(
        "gb200", hostname=NODE, clique="5a3c1a2e-0000-4000-8000-000000000001.3" if clique else None
    )
    component = DraComponent(
        short_tmp / "kubelet",
        short_tmp / "cdi",
        NODE,
        SimulatedBackend(gb200),
        store,
        driver_factories=(compute_domain_driver,) if enabled else (),
    )
    component.start()
    try:
        served = enabled and clique
        expected = {DRIVER, "compute-domain.nvidia.com"} if served else {DRIVER}
        assert set(component.servers) == expected
        with FakeDraKubelet(short_tmp / "kubelet") as kubelet:
            for driver in expected:
                kubelet.wait_registered(driver)
        drivers = {s["spec"]["driver"] for s in store.list("resource.k8s.io/v1", "ResourceSlice")}
        assert drivers == expected
    finally:
        component.stop()


def test_a_relative_kubelet_root_serves_and_names_an_absolute_endpoint(
    short_tmp: Path, machine: Machine, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `kgpu agent --kubelet-root ./root`: gRPC would read unix://root/... as a host name.
    monkeypatch.chdir(short_tmp)
    component = DraComponent(Path("kubelet"), Path("cdi"), NODE, SimulatedBackend(machine), store)
    component.start()
    try:
        with FakeDraKubelet(short_tmp / "kubelet") as kubelet:
            plugin = kubelet.wait_registered(DRIVER)
            assert plugin.endpoint == str(short_tmp / "kubelet" / "plugins" / DRIVER / "dra.sock")
            assert kubelet.unprepare(DRIVER, [("default", "no-such-uid", "gone")]) == {
                "no-such-uid": ""
            }
    finally:
        component.stop()


def test_a_registration_socket_that_cannot_be_made_leaves_no_dra_socket(
    short_tmp: Path, machine: Machine, store: MemoryStore
) -> None:
    root = short_tmp / "kubelet"
    directory = plugin_dir(root, DRIVER)
    plugin = DraPlugin(GpuHandler(machine, NODE, directory), directory, short_tmp / "cdi", store)
    server = DriverServer(plugin, root)
    server.registration_socket.mkdir(parents=True)  # not a socket we may replace
    with pytest.raises(OSError):
        server.start()
    assert not server.socket.exists()


def test_a_removed_dra_socket_is_served_again(
    short_tmp: Path, agent: DraComponent, store: MemoryStore
) -> None:
    claim = make_claim(store, "after", [("gpu", "gpu-6")])
    with FakeDraKubelet(short_tmp / "kubelet") as kubelet:
        kubelet.wait_registered(DRIVER)
        seen = kubelet.registrations
        socket = agent.servers[DRIVER].socket
        socket.unlink()  # the registration socket stays: only a re-registration tells
        kubelet.wait_registered(DRIVER, after=seen)
        assert socket.is_socket()
        out = kubelet.prepare_until_done(DRIVER, [ref_of(claim)])
        assert out[claim["metadata"]["uid"]]["error"] == ""


def test_the_agent_publishes_its_slices_once_from_the_served_mig_layout(
    short_tmp: Path, store: MemoryStore
) -> None:
    from kgpu.agent.daemon import Agent, AgentOptions
    from kgpu.config import load_config_files
    from kgpu.drivers.migpreview import machine_after_mig
    from kgpu.hardware.profiles import load_machine
    from kgpu.hardware.simulated import SimulatedBackend

    repo = Path(__file__).resolve().parents[3]
    opts = AgentOptions(
        machine="p4de.24xlarge",
        config_files=(repo / "examples" / "manifests" / "gpu-operator-values.yaml",),
        labels={"nvidia.com/mig.config": "p4de-half-balanced"},
        node_name=NODE,
        kubelet_root=short_tmp / "kubelet",
        cdi_root=short_tmp / "cdi",
        dra=True,
    )
    # the GPUs as the MIG manager left them before the agent started
    gpus = machine_after_mig(
        load_machine("p4de.24xlarge", hostname=NODE),
        load_config_files(list(opts.config_files)),
        opts.labels,
    )
    agent = Agent(opts, store=store, backend=SimulatedBackend(gpus))
    agent.start()
    try:
        slices = store.list("resource.k8s.io/v1", "ResourceSlice")
        # generation 1: the first publication was the MIG layout, nothing replaced it
        assert {s["spec"]["pool"]["generation"] for s in slices} == {1}
        names = {d["name"] for s in slices for d in s["spec"]["devices"]}
        served = agent.view().machine
        # a MIG-enabled GPU is published as its MIG devices, a whole one as itself
        assert len(names) == sum(len(g.mig_devices) or 1 for g in served.gpus) == 20
        assert sum(1 for n in names if "-mig-" in n) == 16
    finally:
        agent.stop()
