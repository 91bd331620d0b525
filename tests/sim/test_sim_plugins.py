"""The simulator calls SchedulerPlugins, KubeletPlugins and Controllers where kube-scheduler,
the kubelet and the controller manager would."""

from __future__ import annotations

from typing import Any

from kgpu.hardware.model import Machine
from kgpu.sim.plugins import ContainerDevices, Event, NodeInfo
from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.store import ObjectStore

Obj = dict[str, Any]


class Recorder:
    """A plugin that rejects nodes labelled ``reject`` and records every call."""

    name = "Recorder"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def prefilter(self, pod: Obj, store: ObjectStore) -> str | None:
        stored = store.get("v1", "Pod", pod["metadata"]["name"], "default")
        stored.setdefault("status", {})["resourceClaimStatuses"] = [
            {"name": "gpu", "resourceClaimName": "made-by-plugin"}
        ]
        stored["metadata"].pop("resourceVersion")
        store.update(stored)
        return "pod is on hold" if pod["metadata"].get("labels", {}).get("hold") else None

    def filter(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> str | None:
        return "node(s) rejected by recorder" if "reject" in node.labels else None

    def reserve(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> None:
        self.calls.append(("reserve", node.name))

    def unreserve(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> None:
        self.calls.append(("unreserve", node.name))

    def release(self, pod: Obj, store: ObjectStore) -> None:
        self.calls.append(("release", pod["metadata"]["name"]))

    # KubeletPlugin
    def register_node(self, node_name: str, machine: Machine | None, store: ObjectStore) -> None:
        self.calls.append(("register", node_name))

    def prepare(self, pod: Obj, node_name: str, store: ObjectStore) -> dict[str, ContainerDevices]:
        self.calls.append(("prepare", node_name))
        return {"c": ContainerDevices(devices=["vendor.com/dev=x"], env={"EXTRA": "1"})}

    def unprepare(self, pod: Obj, node_name: str, store: ObjectStore) -> None:
        self.calls.append(("unprepare", node_name))

    # Controller
    def reconcile(self, store: ObjectStore, now: float) -> list[Event]:
        for node in store.list("v1", "Node"):
            if node["metadata"]["name"] == "b" and "seen" not in node["metadata"]["labels"]:
                node["metadata"]["labels"]["seen"] = "yes"
                store.update(node)
                return [Event("Normal", "Seen", "Node/b", "labelled")]
        return []


def pod(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }


def test_plugins_are_called_and_their_writes_kept() -> None:
    rec = Recorder()
    sim = Simulation(
        scenario_from_dict(
            {
                "nodes": [
                    {"name": "a", "machine": "t4", "labels": {"reject": "1"}},
                    {"name": "b", "machine": "t4"},
                ]
            }
        ),
        plugins=False,
        extra_scheduler_plugins=[rec],
        extra_kubelet_plugins=[rec],
        extra_controllers=[rec],
    )
    sim.start()
    assert ("register", "a") in rec.calls and ("register", "b") in rec.calls
    assert sim.node("b").labels["seen"] == "yes"  # a controller's label write is noticed
    assert any(e.reason == "Seen" for e in sim.events)
    sim.apply(pod("p"))
    sim.apply(pod("q"))
    sim.apply(pod("held", {"hold": "yes"}))
    sim.settle()
    p = sim.pods["default/p"]
    assert p.node == "b" and p.devices["c"][-1] == "vendor.com/dev=x" and p.env["c"]["EXTRA"] == "1"
    assert sim.pods["default/q"].last_message == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) rejected by recorder. "
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, "
        "1 Preemption is not helpful for scheduling."
    )
    assert sim.pods["default/held"].last_message == (
        "0/2 nodes are available: pod is on hold. "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    stored = sim.store.get("v1", "Pod", "p", "default")
    assert stored["status"]["phase"] == "Running"
    assert stored["status"]["resourceClaimStatuses"][0]["resourceClaimName"] == "made-by-plugin"
    sim.delete_pod("default/p")
    sim.settle()
    assert ("unprepare", "b") in rec.calls and ("release", "p") in rec.calls
    assert sim.pods["default/q"].node == "b"
