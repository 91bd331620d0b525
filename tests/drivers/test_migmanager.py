"""The MIG manager, driven through the backend interface: on the simulated backend and on the
NVML backend over a fake NVML that refuses what real GPUs refuse.

The node is a p4de.24xlarge (8 x A100 80GB). The manager's inputs are a config set and a label
dict the test changes; its label writer writes into that dict, as the API server would, and
its clock is the test's, so draining and backoff need no sleeping.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from kgpu.config import load_config_files
from kgpu.config.loader import ConfigSet, load_config_strings
from kgpu.drivers.migmanager import (
    MIG_STATE_LABEL,
    MigManager,
    MigManagerOptions,
    MigNode,
    store_event_sink,
    store_evictor,
    store_label_writer,
    withhold,
)
from kgpu.drivers.migpreview import preview_mig
from kgpu.hardware.nvml import NvmlBackend
from kgpu.hardware.profiles import load_machine
from kgpu.hardware.simulated import SimulatedBackend
from kgpu.node.view import build_node_view
from kgpu.store import MemoryStore
from kgpu.testing.fake_nvml import FakeNvml

CONFIG = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  half:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
  quarter:
    - devices: [0, 1, 2]
      mig-enabled: true
      mig-devices: {"2g.20gb": 2, "1g.10gb": 2}
  too-many:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 3}
"""


@dataclass
class Node:
    """One node: its hardware, what the manager reads and what it did."""

    sim: SimulatedBackend
    backend: MigNode
    fake: FakeNvml | None
    configs: ConfigSet
    labels: dict[str, str] = field(default_factory=dict)
    writes: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    held: dict[str, list[str]] = field(default_factory=dict)  # UUID -> pods
    evicted: list[str] = field(default_factory=list)
    withheld_seen: list[frozenset[str]] = field(default_factory=lambda: [frozenset()])
    now: float = 1000.0

    def inputs(self) -> tuple[ConfigSet, Mapping[str, str]]:
        return self.configs, dict(self.labels)

    def write(self, labels: Mapping[str, str]) -> None:
        self.labels.update(labels)
        self.writes.append(labels[MIG_STATE_LABEL])

    def holders(self) -> Mapping[str, Sequence[str]]:
        return {uuid: list(pods) for uuid, pods in self.held.items() if pods}

    def evict(self, pod: str) -> None:
        self.evicted.append(pod)
        for pods in self.held.values():
            if pod in pods:
                pods.remove(pod)

    def manager(self, **options: object) -> MigManager:
        base = MigManagerOptions(drain_timeout_s=30, poll_interval_s=1, retry_initial_s=5)
        mgr: MigManager

        def changed() -> None:
            withheld = mgr.withheld()
            if self.withheld_seen[-1] != withheld:
                self.withheld_seen.append(withheld)

        mgr = MigManager(
            self.backend,
            self.inputs,
            write_labels=self.write,
            holders=self.holders,
            evict=self.evict,
            reboot=lambda: self.sim.reset_gpus(),
            on_event=lambda *e: self.events.append(e),
            on_change=changed,
            options=replace(base, **options),  # type: ignore[arg-type]
            clock=lambda: self.now,
        )
        return mgr

    def gpu(self, index: int) -> list[str]:
        return sorted(m.profile for m in self.sim.snapshot().gpus[index].mig_devices)

    def mutations(self) -> int:
        return len(self.fake.mutating_calls()) if self.fake else 0


@pytest.fixture(params=["simulated", "nvml"])
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    sim = SimulatedBackend(load_machine("p4de.24xlarge", hostname="mig-node"))
    configs = load_config_strings({"mig.yaml": CONFIG})
    if request.param == "simulated":
        yield Node(sim, sim, None, configs)
        return
    fake = FakeNvml(sim)
    backend = NvmlBackend(fake)
    yield Node(sim, backend, fake, configs)
    backend.close()


def test_a_layout_change_on_idle_gpus_goes_pending_then_success(node: Node) -> None:
    node.labels["nvidia.com/mig.config"] = "half"
    mgr = node.manager()
    attempt = mgr.reconcile()
    assert attempt.state == "success", attempt.reason
    assert node.writes == ["pending", "success"]
    assert node.labels[MIG_STATE_LABEL] == "success"
    assert node.gpu(0) == node.gpu(1) == ["3g.40gb", "3g.40gb"] and node.gpu(2) == []
    uuids = {g.uuid for g in node.sim.snapshot().gpus[:2]}
    assert node.withheld_seen == [frozenset(), frozenset(uuids), frozenset()]  # while applying
    assert [e[1] for e in node.events] == ["MigConfigPending", "MigConfigApplied"]
    assert "GPU 0 (MIG disabled -> 2 x 3g.40gb)" in node.events[0][2]


def test_nothing_to_do_writes_nothing(node: Node) -> None:
    node.labels["nvidia.com/mig.config"] = "half"
    mgr = node.manager()
    mgr.reconcile()
    writes, events, mutations = list(node.writes), list(node.events), node.mutations()
    before = node.sim.snapshot()
    for _ in range(3):
        assert mgr.reconcile().state == "success"
    assert node.writes == writes and node.events == events
    assert node.mutations() == mutations and node.sim.snapshot() == before
    # a manager started on a node that already has the layout writes nothing either
    fresh = node.manager()
    assert fresh.reconcile().state == "success"
    assert node.writes == writes and node.events == events


def test_a_node_without_a_desired_layout_is_left_as_it_is(node: Node) -> None:
    mgr = node.manager()
    attempt = mgr.reconcile()
    assert attempt.state == "" and node.writes == [] and node.mutations() == 0


def test_a_held_gpu_waits_then_fails_with_the_pod_named_while_the_others_apply(
    node: Node,
) -> None:
    node.labels["nvidia.com/mig.config"] = "half"
    mgr = node.manager()
    mgr.reconcile()  # both GPUs split in two
    held = node.sim.snapshot().gpus[1].mig_devices[0]
    node.held[held.uuid] = ["team-a/train-0"]
    node.labels["nvidia.com/mig.config"] = "quarter"
    node.writes.clear()
    draining = mgr.reconcile()
    assert (draining.state, draining.stage) == ("pending", "draining")
    assert "GPU 1 is held by pod team-a/train-0" in draining.reason
    gpu1 = node.sim.snapshot().gpus[1].uuid
    assert gpu1 in mgr.withheld() and node.labels[MIG_STATE_LABEL] == "pending"
    assert node.gpu(0) == ["3g.40gb", "3g.40gb"]  # nothing touched while draining
    node.now += 10
    assert mgr.reconcile().stage == "draining"
    node.now += 25  # past the 30 s drain timeout
    failed = mgr.reconcile()
    assert failed.state == "failed" and failed.retry
    assert "GPU 1: is held by pod team-a/train-0 after 30s" in failed.reason
    assert "evictPods" in failed.reason
    assert node.gpu(0) == node.gpu(2) == ["1g.10gb", "1g.10gb", "2g.20gb", "2g.20gb"]
    assert node.gpu(1) == ["3g.40gb", "3g.40gb"]  # the held GPU kept its devices
    assert {r.index: r.outcome for r in failed.gpus} == {0: "applied", 1: "failed", 2: "applied"}
    assert node.writes == ["pending", "failed"] and mgr.withheld() == frozenset()
    assert node.events[-1][:2] == ("Warning", "MigConfigFailed")
    # before the backoff ends nothing is tried again (no label churn)
    node.now += 1
    assert mgr.reconcile().state == "failed" and node.writes == ["pending", "failed"]
    # the pod finished; after the backoff the retry applies
    node.held.clear()
    node.now += 10
    assert mgr.reconcile().state == "success"
    assert node.writes == ["pending", "failed", "pending", "success"]
    assert node.gpu(1) == ["1g.10gb", "1g.10gb", "2g.20gb", "2g.20gb"]
    status = mgr.status()
    assert status["state"] == "success" and status["withheld"] == []


def test_with_eviction_the_holding_pods_are_evicted_then_the_layout_applies(
    node: Node,
) -> None:
    node.labels["nvidia.com/mig.config"] = "half"
    mgr = node.manager(evict_pods=True)
    mgr.reconcile()
    node.held[node.sim.snapshot().gpus[0].mig_devices[1].uuid] = ["team-b/infer-7"]
    node.labels["nvidia.com/mig.config"] = "quarter"
    first = mgr.reconcile()
    assert node.evicted == ["team-b/infer-7"]
    assert ("Normal", "MigEvictingPod") in {e[:2] for e in node.events}
    # the eviction took effect: the next look finds the GPU free
    assert first.stage == "draining" or first.state == "success"
    if first.state != "success":
        node.now += 1
        assert mgr.reconcile().state == "success"
    assert node.gpu(0) == ["1g.10gb", "1g.10gb", "2g.20gb", "2g.20gb"]


def test_processes_no_pod_accounts_for_also_hold_a_gpu(node: Node) -> None:
    node.sim.set_processes(0, [31337])
    node.labels["nvidia.com/mig.config"] = "half"
    mgr = node.manager(drain_timeout_s=5)
    draining = mgr.reconcile().reason
    assert "GPU 0 runs 1 process(es) no pod accounts for (PID 31337)" in draining
    node.now += 6
    failed = mgr.reconcile()
    assert failed.state == "failed" and node.gpu(0) == [] and node.gpu(1) == ["3g.40gb"] * 2
    assert "belong to no pod" in failed.reason


def test_a_mode_change_needing_a_reset_fails_without_reboot_and_is_not_retried(
    node: Node,
) -> None:
    node.sim.set_needs_reset(1)
    node.labels["nvidia.com/mig.config"] = "half"
    mgr = node.manager()
    failed = mgr.reconcile()
    assert failed.state == "failed" and not failed.retry
    assert "GPU 1: enable MIG mode: the change is pending a GPU reset (reset-required)" in (
        failed.reason
    )
    assert "nvidia-smi -r -i 1" in failed.reason
    assert node.gpu(0) == ["3g.40gb", "3g.40gb"]  # the other GPU was applied
    writes = list(node.writes)
    node.now += 1000
    assert mgr.reconcile().state == "failed" and node.writes == writes  # waits for a change
    # an operator resets the GPU: the manager notices and finishes
    node.sim.reset_gpus([1])
    assert mgr.reconcile().state == "success"
    assert node.gpu(1) == ["3g.40gb", "3g.40gb"]


def test_with_reboot_the_node_reboots_and_the_layout_is_finished_after(node: Node) -> None:
    node.sim.set_needs_reset(1)
    node.labels["nvidia.com/mig.config"] = "half"
    rebooted: list[bool] = []
    mgr = node.manager(with_reboot=True)
    mgr._reboot = lambda: rebooted.append(True)  # the reboot happens later, as a real one does
    attempt = mgr.reconcile()
    assert attempt.state == "rebooting" and rebooted == [True]
    assert node.writes == ["pending", "rebooting"]
    assert node.gpu(0) == [] and mgr.withheld()  # nothing built before the reboot
    assert mgr.reconcile().state == "rebooting"  # waiting for the reboot, not failing
    node.sim.reset_gpus()  # the node reboots; the agent starts again
    after = node.manager(with_reboot=True)
    assert after.reconcile().state == "success"
    assert node.writes == ["pending", "rebooting", "pending", "success"]
    assert node.gpu(0) == node.gpu(1) == ["3g.40gb", "3g.40gb"]


def test_a_mode_change_that_a_reboot_did_not_apply_fails(node: Node) -> None:
    node.sim.set_mig_mode(0, True)  # the reboot applied GPU 0's mode, not GPU 1's
    node.sim.set_needs_reset(1)
    node.sim.set_mig_mode(1, True)
    node.labels.update({"nvidia.com/mig.config": "half", MIG_STATE_LABEL: "rebooting"})
    failed = node.manager(with_reboot=True).reconcile()
    assert failed.state == "failed"
    assert "MIG mode change did not take effect after rebooting (GPU 1)" in failed.reason
    assert node.writes == ["failed"] and node.mutations() == 0


def test_a_placement_someone_else_took_is_refused_and_the_retry_clears_it(node: Node) -> None:
    node.labels["nvidia.com/mig.config"] = "half"
    mgr = node.manager()
    taken: list[bool] = []

    def racing_holders() -> Mapping[str, Sequence[str]]:
        # between the plan and the apply, someone (nvidia-smi mig -cgi) creates an instance
        if not taken:
            taken.append(True)
            node.sim.set_mig_mode(1, True)
            node.sim.create_gpu_instance(1, "4g.40gb", 0)
        return {}

    mgr._holders = racing_holders
    failed = mgr.reconcile()
    assert failed.state == "failed" and failed.retry
    assert "GPU 1: create 3g.40gb at memory slice 0: " in failed.reason
    assert "overlaps" in failed.reason
    assert node.gpu(0) == ["3g.40gb", "3g.40gb"]
    assert node.sim.gpu_instances(1) == ()  # the half-built GPU was cleared
    node.now += 5
    assert mgr.reconcile().state == "success" and node.gpu(1) == ["3g.40gb", "3g.40gb"]


def test_a_layout_that_cannot_exist_fails_naming_the_file_and_touches_nothing(
    node: Node,
) -> None:
    node.labels["nvidia.com/mig.config"] = "too-many"
    mgr = node.manager()
    failed = mgr.reconcile()
    assert failed.state == "failed" and not failed.retry
    assert failed.reason.startswith("mig.yaml: mig-configs.too-many: cannot apply mig config")
    assert "GPU 0: 3g.40gb x 3 asks for too many" in failed.reason
    assert node.mutations() == 0 and node.gpu(0) == []
    node.labels["nvidia.com/mig.config"] = "no-such-config"
    unknown = mgr.reconcile()
    assert "node label nvidia.com/mig.config=no-such-config names no mig-parted config" in (
        unknown.reason
    )
    assert node.writes == ["failed"]  # one failed write for both: no churn
    node.labels["nvidia.com/mig.config"] = "half"
    assert mgr.reconcile().state == "success"


def test_a_changed_label_while_draining_starts_over(node: Node) -> None:
    node.labels["nvidia.com/mig.config"] = "half"
    node.sim.set_processes(0, [1])
    mgr = node.manager()
    assert mgr.reconcile().stage == "draining"
    node.labels["nvidia.com/mig.config"] = "all-disabled"
    attempt = mgr.reconcile()
    assert attempt.state == "success" and mgr.withheld() == frozenset()
    assert node.gpu(0) == [] and not node.sim.snapshot().gpus[0].mig_enabled


def test_the_thread_retries_with_backoff_until_the_gpu_is_free() -> None:
    sim = SimulatedBackend(load_machine("a100-80gb", hostname="t"))
    configs = load_config_strings({"mig.yaml": CONFIG})
    n = Node(sim, sim, None, configs, labels={"nvidia.com/mig.config": "half"})
    sim.set_processes(0, [9])
    opts = MigManagerOptions(
        drain_timeout_s=0.05, poll_interval_s=0.01, retry_initial_s=0.05, resync_s=0.2
    )
    mgr = MigManager(sim, n.inputs, write_labels=n.write, options=opts)
    mgr.start()
    try:
        import time

        deadline = time.monotonic() + 5
        while "failed" not in n.writes and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "failed" in n.writes
        sim.set_processes(0, [])
        mgr.on_view(None)  # type: ignore[arg-type]  # any new view wakes it
        while n.labels.get(MIG_STATE_LABEL) != "success" and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        mgr.stop()
    assert n.labels[MIG_STATE_LABEL] == "success"
    assert [m.profile for m in sim.snapshot().gpus[0].mig_devices] == ["3g.40gb", "3g.40gb"]
    assert mgr.attempts >= 2


def test_withheld_gpus_advertise_no_devices_but_keep_their_resources() -> None:
    sim = SimulatedBackend(load_machine("p4de.24xlarge", hostname="v"))
    configs = load_config_strings({"mig.yaml": CONFIG})
    view = build_node_view(sim.snapshot(), configs, {})
    gpus = view.machine.gpus
    withheld = withhold(view, {gpus[0].uuid, gpus[3].uuid})
    assert withheld.counts() == {"nvidia.com/gpu": 6}
    assert {d.gpu_index for d in withheld.resource("nvidia.com/gpu").devices} == {1, 2, 4, 5, 6, 7}
    only = withhold(view, {g.uuid for g in gpus})
    assert only.counts() == {"nvidia.com/gpu": 0}  # the resource stays, with no devices
    assert withhold(view, ()) is view


def test_labels_events_and_evictions_through_the_store() -> None:
    store = MemoryStore()
    store.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {}}})
    store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}})
    store_label_writer(store, "n1")({MIG_STATE_LABEL: "pending"})
    assert store.get("v1", "Node", "n1")["metadata"]["labels"] == {MIG_STATE_LABEL: "pending"}
    sink = store_event_sink(store, "n1")
    sink("Warning", "MigConfigFailed", "mig config half: GPU 1 is held")
    sink("Normal", "MigConfigApplied", "mig config half is applied")
    events = store.list("v1", "Event", "default")
    assert [(e["type"], e["reason"]) for e in events] == [
        ("Warning", "MigConfigFailed"),
        ("Normal", "MigConfigApplied"),
    ]
    assert events[0]["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    store_evictor(store)("ns/p")
    assert store.list("v1", "Pod", "ns") == []


def test_acceptance_row_7_the_manager_applies_p4de_half_balanced(acceptance: Path) -> None:
    """Row 7: Helm values with the p4de configs, node labelled p4de-half-balanced: the MIG
    manager splits GPUs 0-3 on the simulated backend, and the node view built from what the
    hardware then has (the view applies no layout) advertises the row's resources -- the same
    devices ``kgpu plan`` promises from its dry run before the GPUs were touched."""
    values = acceptance / "seed-guides" / "gpu-operator-values.yaml"
    configs = load_config_files([values])
    sim = SimulatedBackend(load_machine("p4de.24xlarge", hostname="p4de"))
    node = Node(sim, sim, None, configs, labels={"nvidia.com/mig.config": "p4de-half-balanced"})
    promised = preview_mig(sim.snapshot(), configs.mig_configs["p4de-half-balanced"])
    attempt = node.manager().reconcile()
    assert attempt.state == "success", attempt.reason
    assert node.writes == ["pending", "success"]
    view = build_node_view(sim.snapshot(), configs, node.labels)
    assert view.mig_pending == ""  # the GPUs have the layout now
    assert view.counts() == {
        "nvidia.com/mig-1g.10gb": 8,
        "nvidia.com/mig-2g.20gb": 4,
        "nvidia.com/mig-3g.40gb": 4,
        "nvidia.com/gpu": 4,
    }
    # the same GPUs, MIG UUIDs and placements included, as the dry run on a copy gave
    assert sim.snapshot() == promised.after
    assert [c.index for c in promised.plan.changes] == [0, 1, 2, 3]


def test_podresources_tells_which_pods_hold_which_gpu(tmp_path: Path) -> None:
    """The agent's holders: the kubelet's PodResources, device ids resolved through the view
    (a MIG device id, and a time-sliced replica of a whole GPU)."""
    from kgpu.drivers.migmanager import podresources_holders
    from kgpu.hardware.mig import apply_layout
    from kgpu.kubelet.podresources import ContainerResources, PodResources
    from kgpu.testing.fake_podresources import FakePodResourcesServer

    machine = apply_layout(load_machine("p4de.24xlarge", hostname="pr"), {0: {"3g.40gb": 2}})
    configs = load_config_strings({"mig.yaml": CONFIG})
    view = build_node_view(machine, configs, {}, mig_strategy="mixed")
    mig = machine.gpus[0].mig_devices[1]
    whole = machine.gpus[5]
    pods = [
        PodResources(
            "team-a",
            "train-0",
            (ContainerResources("c", (("nvidia.com/mig-3g.40gb", (mig.uuid,)),)),),
        ),
        PodResources(
            "team-b", "infer", (ContainerResources("c", (("nvidia.com/gpu", (whole.uuid,)),)),)
        ),
    ]
    with FakePodResourcesServer(tmp_path, pods):
        held = podresources_holders(tmp_path, lambda: view)()
    assert held == {mig.uuid: ["team-a/train-0"], whole.uuid: ["team-b/infer"]}


def test_unreadable_inputs_or_gpus_fail_only_where_mig_is_managed(node: Node) -> None:
    broken = {"ok": True}

    def inputs() -> tuple[ConfigSet, Mapping[str, str]]:
        if not broken["ok"]:
            load_config_strings({"bad.yaml": "version: v1\nmig-configs: 7\n"})
        return node.inputs()

    mgr = node.manager()
    mgr._inputs = inputs
    broken["ok"] = False
    quiet = mgr.reconcile()  # MIG never managed here: no label for a broken file
    assert quiet.state == "" and "bad.yaml" in quiet.reason and node.writes == []
    broken["ok"] = True
    node.labels["nvidia.com/mig.config"] = "half"
    assert mgr.reconcile().state == "success"
    broken["ok"] = False
    failed = mgr.reconcile()
    assert failed.state == "failed" and "bad.yaml" in failed.reason
    broken["ok"] = True
    node.sim.close()  # the GPUs stop answering
    lost = mgr.reconcile()
    assert lost.state == "failed" and lost.retry and "cannot read the GPUs" in lost.reason
