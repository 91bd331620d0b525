"""``kgpu agent --consumable-shares``: NVIDIA's DRA driver flag (and its ``CONSUMABLE_SHARES``
variable) reaches the GPU driver, bad values fail before anything starts naming their flag, the
combination with dynamic MIG is refused, and a release without ``DRAConsumableCapacity`` on by
default is said out loud (issue 27)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.agent import components as comps
from kgpu.agent.daemon import Agent
from kgpu.agent.options import AgentOptions
from kgpu.cli import app
from kgpu.dra.shares import MEMORY, SHARES
from kgpu.drivers.gpu import GpuHandler, gate_notes
from kgpu.drivers.shares import GpuRef
from kgpu.errors import FieldError
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.store import MemoryStore
from kgpu.testing.views import make_machine

runner = CliRunner()


def test_flags_and_the_variable_make_the_policy_and_the_flag_wins() -> None:
    opts = AgentOptions.parse(
        consumable_shares="memory", share_memory_minimum_mib=2048, share_memory_step_mib=512
    )
    policy = opts.share_policy
    assert (policy.mode, policy.memory_minimum_mib, policy.memory_step_mib) == (MEMORY, 2048, 512)
    assert not AgentOptions().share_policy.enabled  # the default: GPUs stay exclusive
    from_env = AgentOptions.parse(env={"CONSUMABLE_SHARES": "4"})
    assert (from_env.share_policy.mode, from_env.share_policy.count) == (SHARES, 4)
    assert from_env.environment == {"consumable_shares": "CONSUMABLE_SHARES"}
    flag = AgentOptions.parse(env={"CONSUMABLE_SHARES": "4"}, consumable_shares="memory")
    assert flag.share_policy.mode == MEMORY


def test_bad_values_name_their_flag_all_at_once() -> None:
    with pytest.raises(FieldError) as caught:
        AgentOptions.parse(
            consumable_shares="half", share_memory_minimum_mib=0, share_memory_step_mib=-1
        )
    paths = sorted(p.path for p in caught.value.problems)
    assert paths == ["--consumable-shares", "--share-memory-minimum-mib", "--share-memory-step-mib"]
    assert "use disabled, memory, unlimited" in str(caught.value)
    with pytest.raises(FieldError, match="CONSUMABLE_SHARES"):
        AgentOptions.parse(env={"CONSUMABLE_SHARES": "half"})
    with pytest.raises(FieldError, match="--no-dra"):
        AgentOptions.parse(consumable_shares="memory", dra=False)


def test_the_cli_refuses_a_bad_mode_in_one_line_without_a_traceback(root: Path) -> None:
    result = runner.invoke(
        app,
        ["agent", "--machine", "test", "--kubelet-root", str(root), "--consumable-shares", "half"],
    )
    assert result.exit_code != 0
    assert "--consumable-shares" in result.output and "'half'" in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_the_agents_dra_component_publishes_shared_gpus(root: Path) -> None:
    store = MemoryStore()
    opts = AgentOptions(
        machine="test", node_name="node-a", kubelet_root=root / "k", cdi_root=root / "cdi",
        consumable_shares="memory", device_plugin=False,
    )  # fmt: skip
    backend = SimulatedBackend(make_machine(2, memory_mib=81559))
    ctx = comps.AgentContext(
        options=opts, backend=backend, store=lambda: store, on_change=lambda: None
    )
    component = comps.dra(ctx)
    assert component is not None
    component.start()
    try:
        devices = {
            d["name"]: d
            for s in store.list("resource.k8s.io/v1", "ResourceSlice")
            if s["spec"]["driver"] == "gpu.nvidia.com"
            for d in s["spec"]["devices"]
        }
        # the agent's status shows each shared GPU's MPS server and its ceiling
        agent = Agent(opts)
        agent.components = [component]
        assert agent.status()["memoryShares"] == []
        assert component.gpu is not None
        daemons = component.gpu.share_daemons
        gpu0 = GpuRef(backend.snapshot().gpus[0].uuid, 0, 81559)
        daemons.serve(gpu0, "u1", "default/a", "default/a-pod", 1000, 20480, 100)
        daemons.serve(gpu0, "u2", "default/b", "default/b-pod", 1000, 40960, 100)
        (shared,) = agent.status()["memoryShares"]
        assert shared["gpu"] == 0 and shared["ceilingMiB"] == 40960
        assert [(s["claim"], s["pinnedDeviceMemoryLimitMiB"]) for s in shared["shares"]] == [
            ("default/a", 20480),
            ("default/b", 40960),
        ]
        daemons.release("u1")
        daemons.release("u2")
    finally:
        component.stop()
    gpu = devices["gpu-0"]
    assert gpu["allowMultipleAllocations"] is True
    memory = gpu["capacity"]["memory"]
    # 81559 MiB on a 1 GiB grid from 1 GiB: 79 GiB
    assert memory["value"] == "79Gi"
    assert memory["requestPolicy"]["validRange"] == {"min": "1Gi", "max": "79Gi", "step": "1Gi"}


def test_dynamic_mig_with_shares_is_refused(root: Path) -> None:
    opts = AgentOptions.parse(consumable_shares="memory")
    with pytest.raises(FieldError, match="cannot be combined with dynamic MIG") as caught:
        GpuHandler(make_machine(1), "n", root, partitionable=True, shares=opts.share_policy)
    assert caught.value.problems[0].path == "--consumable-shares"
    GpuHandler(make_machine(1), "n", root, partitionable=True)  # without shares: fine


def test_release_notes_follow_the_gate_table(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    policy = AgentOptions.parse(consumable_shares="memory").share_policy
    (alpha,) = [n for n in gate_notes("v1.35.2", False, policy) if "DRAConsumableCapacity" in n]
    assert "alpha and off by default in Kubernetes 1.35" in alpha
    assert "drops allowMultipleAllocations" in alpha and "stays exclusive" in alpha
    assert "unless the gate is on for kube-apiserver and kube-scheduler" in alpha
    assert any("1.34" in n for n in gate_notes("1.34", False, policy))
    (missing,) = [n for n in gate_notes("1.33", False, policy) if "DRAConsumableCapacity" in n]
    assert "Kubernetes 1.33 does not have DRAConsumableCapacity (1.34 adds it)" in missing
    assert "unless" not in missing  # no gate to turn on there
    assert "kgpu publishes every GPU exclusive there" in missing
    old = GpuHandler(make_machine(1), "n", root, kubernetes_version="1.33", shares=policy)
    devices = [d for s in old.resource_slices("n") for d in s["spec"]["devices"]]
    assert devices and not any("allowMultipleAllocations" in d for d in devices)
    assert not [n for n in gate_notes("1.36", False, policy) if "DRAConsumableCapacity" in n]
    assert not [n for n in gate_notes("1.35", False) if "DRAConsumableCapacity" in n]
    with caplog.at_level(logging.WARNING, logger="kgpu.drivers.gpu"):
        GpuHandler(make_machine(1), "n", root, kubernetes_version="1.35", shares=policy)
    assert "DRAConsumableCapacity is alpha" in caplog.text


def _publish_to(release: str, tmp_path: Path, **gates: bool) -> list[dict[str, object]]:
    """Shared GPUs published to an API-server stand-in of ``release``; the stored devices."""
    from kgpu.cluster.kube import KubeStore
    from kgpu.drivers.publish import publish_slices
    from kgpu.testing.apiserver import FakeApiServer, write_kubeconfig

    policy = AgentOptions.parse(consumable_shares="memory").share_policy
    tmp_path.mkdir()
    handler = GpuHandler(make_machine(1), "node-a", tmp_path, kubernetes_version=release,
                         shares=policy)  # fmt: skip
    server = FakeApiServer(release=release, feature_gates=dict(gates)).start()
    store = KubeStore.from_config(
        str(write_kubeconfig(tmp_path / "kubeconfig", server.url)), user_agent="test-client/1.0"
    )
    try:
        publish_slices(store, handler.driver, "node-a", handler.resource_slices("node-a"), None)
        return [
            d
            for s in store.list("resource.k8s.io/v1", "ResourceSlice")
            for d in s["spec"]["devices"]
        ]
    finally:
        store.close()
        server.stop()


def test_an_api_server_without_the_gate_drops_the_shared_fields(tmp_path: Path) -> None:
    # kube-apiserver's dropDisabledDRAConsumableCapacityFields: 1.35 has the fields in its
    # schema but its gate is off, so the stored GPU is an ordinary exclusive device
    (off,) = _publish_to("1.35", tmp_path / "off")
    assert "allowMultipleAllocations" not in off
    assert off["capacity"]["memory"] == {"value": "80Gi"}
    (on,) = _publish_to("1.35", tmp_path / "on", DRAConsumableCapacity=True)
    assert on["allowMultipleAllocations"] is True
    assert on["capacity"]["memory"]["requestPolicy"]["default"] == "80Gi"
    (beta,) = _publish_to("1.36", tmp_path / "beta")  # beta, on by default
    assert beta["allowMultipleAllocations"] is True
