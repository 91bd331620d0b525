"""cluster-autoscaler's decisions: drain rules and least-waste from upstream's tables (as data),
and scans over small clusters with a resource-only ``fit`` standing in for the scheduler."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.autoscaling.ca_settings import (
    CASettings,
    go_duration,
    parse_go_duration,
    parse_settings,
)
from kgpu.autoscaling.cluster_autoscaler import (
    CANode,
    CAPod,
    CAState,
    Elsewhere,
    NodeGroup,
    NodeRef,
    Option,
    best_option,
    initial_state,
    provision,
    run_once,
)
from kgpu.autoscaling.drain import is_long_terminating, pods_to_move
from kgpu.errors import FieldError

DATA = yaml.safe_load((Path(__file__).parent / "data" / "ca_drain.yaml").read_text())
GPU = "nvidia.com/gpu"


def pod_obj(name: str = "bar", **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": spec.get("namespace", "default")}
    if spec.get("owner"):
        meta["ownerReferences"] = [{"kind": spec["owner"], "name": "o", "controller": True}]
    if spec.get("annotations"):
        meta["annotations"] = spec["annotations"]
    if "deleted" in spec:
        meta["deletionTimestamp"] = -spec["deleted"]
    body: dict[str, Any] = {"metadata": meta, "spec": {}, "status": {}}
    if "volumes" in spec:
        body["spec"]["volumes"] = spec["volumes"]
    if "restartPolicy" in spec:
        body["spec"]["restartPolicy"] = spec["restartPolicy"]
    if "grace" in spec:
        body["spec"]["terminationGracePeriodSeconds"] = spec["grace"]
    if "phase" in spec:
        body["status"]["phase"] = spec["phase"]
    return body


@pytest.mark.parametrize("case", DATA["drain"], ids=[c["name"] for c in DATA["drain"]])
def test_drain_rules(case: dict[str, Any]) -> None:
    move, daemonset, blocking = pods_to_move([pod_obj(**case["pod"])], now=0.0)
    if "blocking" in case:
        assert blocking is not None and blocking.reason == case["blocking"]
        assert move == [] and daemonset == []
    else:
        assert blocking is None
        assert (len(move), len(daemonset)) == (case["moved"], case["daemonset"])


def test_blocking_messages_are_cluster_autoscalers() -> None:
    cases = [
        (pod_obj(), "default/bar is not replicated"),
        (
            pod_obj(namespace="kube-system", owner="ReplicaSet"),
            "non-daemonset, non-mirrored, non-pdb-assigned kube-system pod present: bar",
        ),
        (
            pod_obj(owner="ReplicaSet", volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
            "pod with local storage present: bar",
        ),
        (
            pod_obj(
                owner="ReplicaSet",
                annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
            ),
            "pod annotated as not safe to evict present: bar",
        ),
    ]
    for obj, message in cases:
        _, _, blocking = pods_to_move([obj])
        assert blocking is not None and blocking.message == message
    memory = pod_obj(owner="ReplicaSet", volumes=[{"name": "m", "emptyDir": {"medium": "Memory"}}])
    listed = pod_obj(
        owner="ReplicaSet",
        volumes=[{"name": "s", "emptyDir": {}}],
        annotations={"cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes": "s"},
    )
    assert pods_to_move([memory, listed])[2] is None
    assert pods_to_move([pod_obj(owner="ReplicaSet", namespace="kube-system")], False)[2] is None


@pytest.mark.parametrize(
    "case", DATA["long_terminating"], ids=[c["name"] for c in DATA["long_terminating"]]
)
def test_long_terminating(case: dict[str, Any]) -> None:
    spec = {k: case[k] for k in ("deleted", "grace") if k in case}
    assert is_long_terminating(pod_obj(**spec), now=0.0) is case["want"]


@pytest.mark.parametrize(
    "case", DATA["least_waste"], ids=[str(c["groups"]) for c in DATA["least_waste"]]
)
def test_least_waste(case: dict[str, Any]) -> None:
    cpu, memory = 500, 1000 * 1024 * 1024
    pod = CAPod("default/p", pod_obj(), {"cpu": cpu, "memory": memory})
    groups = {
        name: NodeGroup(name, 0, 10, {"cpu": c * cpu, "memory": m * memory})
        for name, (c, m) in case["groups"].items()
    }
    options = [Option(name, 1, (pod,)) for name in groups]
    settings = CASettings(expander=("least-waste",))
    import random

    assert best_option(options, groups, settings, random.Random(0)).group == case["best"]


# -- scans ------------------------------------------------------------------------------------
def gpu_pod(name: str, gpus: int = 1, created: float = -60.0, **extra: Any) -> CAPod:
    return CAPod(
        f"default/{name}",
        pod_obj(name, owner="ReplicaSet", **extra),
        {GPU: gpus, "cpu": 150},
        created,
    )


class Cluster:
    """Nodes with allocatable resources; ``fit`` checks requests only, as NodeResourcesFit."""

    def __init__(self, groups: Sequence[NodeGroup], nodes: Sequence[CANode]) -> None:
        self.groups = {g.name: g for g in groups}
        self.nodes = {n.name: n for n in nodes}

    def fit(
        self, pod: CAPod, node: NodeRef, placed: Sequence[CAPod], elsewhere: Elsewhere
    ) -> list[str]:
        if node.template:
            allocatable: Mapping[str, int] = self.groups[node.group].allocatable
            used: list[CAPod] = list(placed)
        else:
            real = self.nodes[node.name]
            allocatable, used = real.allocatable, [*real.pods, *placed]
        short = [
            r
            for r, want in pod.requests.items()
            if want + sum(p.requests.get(r, 0) for p in used) > allocatable.get(r, 0)
        ]
        return [f"Insufficient {r}" for r in sorted(short)]


T4 = NodeGroup("t4", 1, 3, {GPU: 1, "cpu": 4000, "memory": 16 << 30})
CPU = NodeGroup("cpu", 0, 5, {"cpu": 8000, "memory": 32 << 30})


def t4_node(name: str, *pods: CAPod) -> CANode:
    return CANode(name, "t4", T4.allocatable, pods)


def test_scale_up_for_a_pending_gpu_pod() -> None:
    nodes = [t4_node("t4-0", gpu_pod("a"))]
    cluster = Cluster([T4, CPU], nodes)
    state = initial_state([T4, CPU], nodes)
    pending = [gpu_pod("b")]
    d = run_once(CASettings(), [T4, CPU], state, nodes, pending, 0.0, cluster.fit)
    assert d.scaled_up == (("t4", 1, 2),)
    messages = {(e.reason, e.object): e.message for e in d.events}
    assert messages[("TriggeredScaleUp", "Pod/default/b")] == (
        "pod triggered scale-up: [{t4 1->2 (max: 3)}]"
    )
    assert messages[("ScaledUpGroup", "ConfigMap/kube-system/cluster-autoscaler-status")] == (
        "Scale-up: setting group t4 size to 2 instead of 1 (max: 3)"
    )
    # the node is upcoming: the same pod does not trigger a second scale-up
    d2 = run_once(CASettings(), [T4, CPU], d.state, nodes, pending, 10.0, cluster.fit)
    assert d2.scaled_up == () and not [e for e in d2.events if e.reason == "NotTriggerScaleUp"]
    # the cloud delivers it at the next scan (no provisioning delay)
    ready, events, state = provision(CASettings(), [T4, CPU], d.state, 10.0)
    assert ready == ["t4"] and not events and state.provisioning == ()
    assert state.target_sizes["t4"] == 2


def test_pods_that_fit_no_group_say_why() -> None:
    full = [t4_node(f"t4-{i}", gpu_pod(f"r{i}")) for i in range(3)]
    cluster = Cluster([T4, CPU], full)
    state = initial_state([T4, CPU], full)
    d = run_once(CASettings(), [T4, CPU], state, full, [gpu_pod("x")], 0.0, cluster.fit)
    (event,) = d.events
    assert (event.reason, event.object) == ("NotTriggerScaleUp", "Pod/default/x")
    assert event.message == (
        "pod didn't trigger scale-up: 1 Insufficient nvidia.com/gpu, 1 max node group size reached"
    )
    big = gpu_pod("big", gpus=2)  # fits no T4 at all
    d = run_once(CASettings(), [T4], initial_state([T4], full[:1]), full[:1], [big], 0, cluster.fit)
    assert d.events[0].message == "pod didn't trigger scale-up: 1 Insufficient nvidia.com/gpu"


def test_binpacking_and_group_maximum() -> None:
    group = NodeGroup("dgx", 0, 2, {GPU: 8, "cpu": 100_000, "memory": 1 << 40})
    cluster = Cluster([group], [])
    pods = [gpu_pod(f"p{i}", gpus=3) for i in range(7)]  # 2 per node: 4 nodes wanted
    d = run_once(CASettings(), [group], initial_state([group], []), [], pods, 0.0, cluster.fit)
    assert d.scaled_up == (("dgx", 0, 2),)
    triggered = [e for e in d.events if e.reason == "TriggeredScaleUp"]
    assert len(triggered) == 4  # only the pods the two new nodes take
    assert triggered[0].message == "pod triggered scale-up: [{dgx 0->2 (max: 2)}]"


def test_very_new_pods_wait_one_loop() -> None:
    cluster = Cluster([T4], [])
    d = run_once(CASettings(), [T4], CAState(), [], [gpu_pod("a", created=9.0)], 10.0, cluster.fit)
    assert d.scaled_up == () and d.events == ()
    delayed = CASettings(new_pod_scale_up_delay=30)
    d = run_once(delayed, [T4], CAState(), [], [gpu_pod("a", created=0.0)], 10.0, cluster.fit)
    assert d.scaled_up == ()
    d = run_once(delayed, [T4], CAState(), [], [gpu_pod("a", created=0.0)], 30.0, cluster.fit)
    assert d.scaled_up == (("t4", 0, 1),)


def test_expanders() -> None:
    import random

    pod = gpu_pod("a")
    groups = {
        "gpu-a": NodeGroup("gpu-a", 0, 5, {GPU: 1}),
        "gpu-b": NodeGroup("gpu-b", 0, 5, {GPU: 1}),
        "spot-gpu": NodeGroup("spot-gpu", 0, 5, {GPU: 1}),
    }
    options = [
        Option("gpu-a", 1, (pod,)),
        Option("gpu-b", 2, (pod, pod)),
        Option("spot-gpu", 1, (pod,)),
    ]
    most = CASettings(expander=("most-pods",))
    assert best_option(options, groups, most, random.Random(0)).group == "gpu-b"
    priority = CASettings(
        expander=("priority",), expander_priorities={10: ["gpu-.*"], 50: ["^spot"]}
    )
    assert best_option(options, groups, priority, random.Random(0)).group == "spot-gpu"
    unmatched = CASettings(expander=("priority",), expander_priorities={10: ["cpu"]})
    picks = {best_option(options, groups, unmatched, random.Random(s)).group for s in range(20)}
    assert picks == set(groups)  # no priority matched: nothing filtered, random tie-break
    chained = CASettings(expander=("priority", "most-pods"), expander_priorities={10: ["gpu-.*"]})
    assert best_option(options, groups, chained, random.Random(0)).group == "gpu-b"


def test_an_empty_node_goes_after_the_unneeded_time() -> None:
    busy = t4_node("t4-0", gpu_pod("a"))
    idle = t4_node("t4-1")
    nodes = [busy, idle]
    cluster = Cluster([T4], nodes)
    state = initial_state([T4], nodes)
    settings = CASettings()
    for t in range(0, 600, 10):
        d = run_once(settings, [T4], state, nodes, [], float(t), cluster.fit)
        assert d.delete_nodes == (), t
        assert d.unneeded == ("t4-1",)
        state = d.state
    assert state.unneeded_since == {"t4-1": 0.0}
    assert "NotUnderutilized" in d.unremovable["t4-0"]
    d = run_once(settings, [T4], state, nodes, [], 600.0, cluster.fit)
    assert d.delete_nodes == ("t4-1",)
    assert [(e.reason, e.object, e.message) for e in d.events] == [
        ("ScaleDown", "Node/t4-1", "marked the node as toBeDeleted/unschedulable"),
        ("ScaleDown", "Node/t4-1", "node removed by cluster autoscaler"),
    ]
    assert d.state.target_sizes["t4"] == 1
    # the group's minimum stays: t4-0 would be unneeded once idle, but min is 1
    d = run_once(settings, [T4], d.state, [t4_node("t4-0")], [], 2000.0, cluster.fit)
    d = run_once(settings, [T4], d.state, [t4_node("t4-0")], [], 2700.0, cluster.fit)
    assert d.delete_nodes == ()
    assert d.unremovable["t4-0"].startswith("NodeGroupMinSizeReached")


def test_scale_down_waits_after_a_scale_up() -> None:
    nodes = [t4_node("t4-0"), t4_node("t4-1")]
    cluster = Cluster([T4], nodes)
    state = CAState(target_sizes={"t4": 2}, last_scale_up=500.0, unneeded_since={"t4-1": 0.0})
    d = run_once(CASettings(), [T4], state, nodes, [], 1000.0, cluster.fit)
    assert d.delete_nodes == ()  # unneeded long enough, but 500 + 600 > 1000
    d = run_once(CASettings(), [T4], d.state, nodes, [], 1100.0, cluster.fit)
    assert len(d.delete_nodes) == 1
    # right after a deletion: the scan interval must pass (delay-after-delete defaults to it)
    d = run_once(CASettings(), [T4], d.state, [nodes[0]], [], 1105.0, cluster.fit)
    assert d.state.last_scale_down_delete == 1100.0


def test_a_drained_node_moves_its_pods() -> None:
    half = NodeGroup("quad", 1, 4, {GPU: 4, "cpu": 16_000, "memory": 64 << 30})
    a = CANode("q-0", "quad", half.allocatable, (gpu_pod("a"),))
    b = CANode("q-1", "quad", half.allocatable, (gpu_pod("b"),))
    cluster = Cluster([half], [a, b])
    state = CAState(target_sizes={"quad": 2}, unneeded_since={"q-0": 0.0, "q-1": 0.0})
    d = run_once(CASettings(), [half], state, [a, b], [], 600.0, cluster.fit)
    assert d.delete_nodes == ("q-0",) and d.evict_pods == ("default/a",)
    assert [e.message for e in d.events] == [
        "marked the node as toBeDeleted/unschedulable",
        "deleting pod for node scale down",
        "node removed by cluster autoscaler",
    ]
    assert d.events[1].object == "Pod/default/a"
    # q-1 receives a's pod in the simulation, so it is no longer unneeded in this scan
    assert "q-1" not in d.state.unneeded_since


def test_what_keeps_a_node() -> None:
    naked = CAPod("default/n", pod_obj("n"), {GPU: 0})
    full = NodeGroup("g", 0, 3, {GPU: 2})
    blocked = CANode("blocked", "g", full.allocatable, (naked,))
    lonely = CANode("lonely", "g", full.allocatable, (gpu_pod("x"),))  # 50%: not below 0.5
    tight = CANode("tight", "g", {GPU: 4}, (gpu_pod("y"),))  # 25%, but nowhere to go
    other = CANode("other", None, {GPU: 1}, (gpu_pod("z"),))
    disabled = CANode(
        "disabled",
        "g",
        full.allocatable,
        (),
        annotations={"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"},
    )
    nodes = [blocked, lonely, tight, other, disabled]
    cluster = Cluster([full], nodes)
    d = run_once(CASettings(), [full], initial_state([full], nodes), nodes, [], 0.0, cluster.fit)
    reasons = {n: r.split(":")[0] for n, r in d.unremovable.items()}
    assert reasons == {
        "blocked": "BlockedByPod",
        "lonely": "NotUnderutilized",
        "tight": "NoPlaceToMovePods",
        "other": "NotAutoscaled",
        "disabled": "ScaleDownDisabledAnnotation",
    }
    assert d.unremovable["blocked"] == "BlockedByPod: default/n is not replicated"


def test_a_slow_cloud_times_out_and_backs_off() -> None:
    settings = CASettings(provisioning_delay=1200)  # longer than max-node-provision-time (15m)
    cluster = Cluster([T4], [])
    d = run_once(settings, [T4], CAState(), [], [gpu_pod("a")], 0.0, cluster.fit)
    assert d.scaled_up == (("t4", 0, 1),)
    ready, events, state = provision(settings, [T4], d.state, 900.0)
    assert ready == [] and events == []
    ready, events, state = provision(settings, [T4], state, 910.0)
    assert ready == [] and state.target_sizes["t4"] == 0
    assert events[0].reason == "ScaleUpTimedOut"
    assert events[0].message == "Nodes added to group t4 failed to register within 15m10s"
    d = run_once(settings, [T4], state, [], [gpu_pod("a")], 920.0, cluster.fit)
    assert d.events[0].message == "pod didn't trigger scale-up: 1 in backoff after failed scale-up"
    d = run_once(settings, [T4], state, [], [gpu_pod("a")], 1211.0, cluster.fit)
    assert d.scaled_up == (("t4", 0, 1),)  # backoff (5 min) over


def test_settings() -> None:
    assert parse_settings(None) == CASettings()
    settings = parse_settings(
        {
            "scale-down-unneeded-time": "1m30s",
            "provisioning-delay": "2m",
            "expander": "priority,least-waste",
            "expander-priorities": {10: ["t4"]},
            "scale-down-utilization-threshold": 0.3,
            "skip-nodes-with-local-storage": False,
        }
    )
    assert settings.scale_down_unneeded_time == 90 and settings.provisioning_delay == 120
    assert settings.expander == ("priority", "least-waste")
    assert settings.delay_after_delete == 10  # the scan interval
    with pytest.raises(FieldError) as caught:
        parse_settings({"scaleDownUnneededTime": "10m", "expander": "price", "scan-interval": "1x"})
    problems = {p.path: p.message for p in caught.value.problems}
    assert problems["clusterAutoscaler.scaleDownUnneededTime"].startswith("unknown setting")
    assert "price and grpc need a cloud" in problems["clusterAutoscaler.expander"]
    assert 'invalid duration "1x"' in problems["clusterAutoscaler.scan-interval"]
    assert [parse_go_duration(v) for v in ("10m", "1h2m3s", "500ms", "0", 45)] == [
        600,
        3723,
        0.5,
        0,
        45,
    ]
    assert [go_duration(s) for s in (900, 910, 3600, 30, 0)] == [
        "15m0s",
        "15m10s",
        "1h0m0s",
        "30s",
        "0s",
    ]
