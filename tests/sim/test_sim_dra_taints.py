"""Device taints in ``kgpu sim``: DeviceTaintRules applied with ``kubectl apply``, the device
taint eviction controller for NoExecute, and the DRA driver tainting an unhealthy GPU as NVIDIA's
``NVMLDeviceHealthCheck`` does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kgpu.dra.slices import resource_slices
from kgpu.drivers.gpu import GpuHandler
from kgpu.hardware.profiles import load_machine
from kgpu.sim.dra_taints import eviction_delay
from kgpu.sim.scenario import load_scenario
from kgpu.sim.simulation import Simulation

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dra" / "device-taints.yaml"
API = "resource.k8s.io/v1"
XID = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}


def devices_by_pod(sim: Simulation) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for claim in sim.store.list(API, "ResourceClaim"):
        status = claim.get("status") or {}
        for ref in status.get("reservedFor") or []:
            out[ref["name"]] = [r["device"] for r in status["allocation"]["devices"]["results"]]
    return out


def events(sim: Simulation, reason: str) -> list[Any]:
    return [e for e in sim.events if e.reason == reason]


def test_no_execute_rule_evicts_and_xid_taints_the_gpu(tmp_path: Path) -> None:
    scenario = load_scenario(EXAMPLE)
    sim = Simulation(scenario, work_dir=tmp_path)
    sim.start()
    before = devices_by_pod(sim)
    assert sorted(before.values()) == [["gpu-0"], ["gpu-1"]]
    on_gpu0 = next(p for p, d in before.items() if d == ["gpu-0"])

    sim.step(scenario.steps[0])  # the NoExecute DeviceTaintRule
    (evicted,) = events(sim, "DeviceTaintManagerEviction")
    assert (evicted.type, evicted.object, evicted.message) == (
        "Normal",
        f"Pod/default/{on_gpu0}",
        "Marking for deletion",
    )
    assert f"default/{on_gpu0}" not in sim.pods
    assert sorted(devices_by_pod(sim).values()) == [["gpu-1"], ["gpu-2"]]

    sim.step(scenario.steps[1])  # XID 79 on GPU 1
    devices = {
        d["name"]: d
        for s in sim.store.list(API, "ResourceSlice")
        for d in s["spec"].get("devices") or []
    }
    assert devices["gpu-1"]["taints"] == [XID]
    assert "taints" not in devices["gpu-2"]
    assert sorted(devices_by_pod(sim).values()) == [["gpu-1"], ["gpu-2"]]  # NoSchedule: stays

    sim.step(scenario.steps[2])  # four replicas: only gpu-3 is free and untainted
    assert sorted(devices_by_pod(sim).values()) == [["gpu-1"], ["gpu-2"], ["gpu-3"]]
    pending = [r for r in sim.pods.values() if r.phase == "Pending"]
    assert [r.last_message for r in pending] == [
        "0/1 nodes are available: 1 cannot allocate all claims. still not schedulable, "
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    ]


def test_unhealthy_devices_are_published_tainted() -> None:
    machine = load_machine("gb200", hostname="n1")
    gpu = machine.gpus[1]
    plain = resource_slices(machine, "n1")
    tainted = resource_slices(machine, "n1", unhealthy={gpu.uuid: "xid 79"})
    by_name = {d["name"]: d for s in tainted for d in s["spec"]["devices"]}
    assert [n for n, d in by_name.items() if "taints" in d] == ["gpu-1"]
    assert by_name["gpu-1"]["taints"] == [XID]
    assert plain != tainted and "taints" not in plain[0]["spec"]["devices"][1]
    lost = resource_slices(machine, "n1", unhealthy={gpu.uuid: "nvml: GPU does not answer"})
    lost_dev = next(d for s in lost for d in s["spec"]["devices"] if d["name"] == "gpu-1")
    assert lost_dev["taints"] == [{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}]


def test_dynamic_mig_placements_of_an_unhealthy_gpu_are_tainted() -> None:
    machine = load_machine("gb200", hostname="n1")
    gpu = machine.gpus[0]
    slices = resource_slices(machine, "n1", partitionable=True, unhealthy={gpu.uuid: "xid 48"})
    tainted = {d["name"] for s in slices for d in s["spec"].get("devices") or [] if d.get("taints")}
    assert "gpu-0" in tainted and any(n.startswith("gpu-0-mig-") for n in tainted)
    assert not any(n.startswith("gpu-1") for n in tainted)


def test_handler_republishes_only_when_health_changes(tmp_path: Path) -> None:
    machine = load_machine("gb200", hostname="n1")
    handler = GpuHandler(machine, "n1", tmp_path)
    assert not handler.set_health({})
    assert handler.set_health({machine.gpus[2].uuid: "xid 79"})
    assert not handler.set_health({machine.gpus[2].uuid: "xid 79"})
    devs = {d["name"]: d for s in handler.resource_slices("n1") for d in s["spec"]["devices"]}
    assert devs["gpu-2"]["taints"] == [XID]
    assert handler.set_health({})  # healthy again: the taint goes
    devs = {d["name"]: d for s in handler.resource_slices("n1") for d in s["spec"]["devices"]}
    assert "taints" not in devs["gpu-2"]


def test_eviction_delay_follows_tolerations() -> None:
    taint = {"key": "example.com/maintenance", "value": "x", "effect": "NoExecute"}
    assert eviction_delay({}, [taint]) == 0.0
    forever = {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute"}
    assert eviction_delay({"tolerations": [forever]}, [taint]) is None
    bounded = {**forever, "tolerationSeconds": 300}
    assert eviction_delay({"tolerations": [bounded]}, [taint]) == 300.0
    other = {"key": "other", "operator": "Exists"}
    assert eviction_delay({"tolerations": [other]}, [taint]) == 0.0
