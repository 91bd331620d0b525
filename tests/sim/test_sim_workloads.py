"""Controllers expand workloads the way the real ones do; kubelets, clocks and failures."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation

SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]"


def template(gpus: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "x"}},
        "spec": {
            "containers": [
                {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
            ],
            **spec,
        },
    }


def sim_for(nodes: list[dict[str, Any]], *objs: dict[str, Any], **extra: Any) -> Simulation:
    sim = Simulation(scenario_from_dict({"nodes": nodes, **extra}), plugins=False)
    sim.start()
    for obj in objs:
        sim.apply(obj)
    sim.settle()
    return sim


def test_deployment_names_replicaset_and_pods(acceptance: Path) -> None:
    sim = Simulation(
        scenario_from_dict(
            {
                "nodes": [{"name": "g", "machine": "dgx-h100"}],
                "apply": [str(acceptance / "vks-samples/scaling-app.yaml")],
            }
        ),
        plugins=False,
    ).run()
    (rs,) = sim.store.list("apps/v1", "ReplicaSet")
    assert re.fullmatch(rf"scaling-app-{SUFFIX}+", rs["metadata"]["name"])
    (rec,) = sim.pods.values()
    assert re.fullmatch(rf"{rs['metadata']['name']}-{SUFFIX}{{5}}", rec.name)
    assert rec.obj["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
    deploy = sim.store.get("apps/v1", "Deployment", "scaling-app")
    assert deploy["status"]["readyReplicas"] == 1


def test_job_completions_parallelism_and_runtime(acceptance: Path) -> None:
    sim = Simulation(
        scenario_from_dict(
            {
                "nodes": [{"name": "g", "machine": "t4"}],
                "apply": [str(acceptance / "vks-samples/mps-verification.yaml")],
                "runtimes": {"nbody-sample": "30s"},
                "steps": [{"advance": "29s"}, {"advance": 1}, {"advance": "2m"}],
            }
        ),
        plugins=False,
    )
    sim.start()
    assert [r.phase for r in sim.pods.values()] == ["Running"] + ["Pending"] * 4
    assert all(re.fullmatch(rf"nbody-sample-{SUFFIX}{{5}}", r.name) for r in sim.pods.values())
    sim.step(sim.scenario.steps[0])
    assert sum(r.phase == "Succeeded" for r in sim.pods.values()) == 0
    sim.step(sim.scenario.steps[1])
    assert sum(r.phase == "Succeeded" for r in sim.pods.values()) == 1
    sim.step(sim.scenario.steps[2])
    assert sorted(r.phase for r in sim.pods.values()) == ["Succeeded"] * 5
    job = sim.store.get("batch/v1", "Job", "nbody-sample")
    assert job["status"]["succeeded"] == 5 and job["status"]["conditions"][0]["type"] == "Complete"
    assert sim.now == 150  # one GPU: five 30 s pods one after the other


def test_statefulset_ordered_ready() -> None:
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "x"}}, "template": template()},
    }
    sim = sim_for([{"name": "g", "machine": "rtx-2080ti"}], sts)
    # one GPU: db-0 runs, db-1 waits, db-2 is not created until db-1 runs (OrderedReady)
    assert {r.name: r.phase for r in sim.pods.values()} == {"db-0": "Running", "db-1": "Pending"}


def test_daemonset_follows_node_labels() -> None:
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "imex"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": template(0, nodeSelector={"domain": "a"}),
        },
    }
    sim = sim_for([{"name": "n", "count": 3, "machine": "t4"}], ds)
    assert sim.pods == {}
    sim.label_node("n-1", {"domain": "a"})
    sim.settle()
    (rec,) = sim.pods.values()
    assert rec.node == "n-1" and re.fullmatch(rf"imex-{SUFFIX}{{5}}", rec.name)
    # a label written by another controller straight into the store counts too
    node = sim.store.get("v1", "Node", "n-2")
    node["metadata"]["labels"]["domain"] = "a"
    sim.store.update(node)
    sim.settle()
    assert sorted(r.node for r in sim.pods.values()) == ["n-1", "n-2"]
    sim.label_node("n-1", {"domain": None})
    sim.settle()
    assert [r.node for r in sim.pods.values()] == ["n-2"]


def test_mpijob_workers_are_a_gang(acceptance: Path) -> None:
    job = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": "nb"},
        "spec": {
            "slotsPerWorker": 4,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template(0)},
                "Worker": {"replicas": 3, "template": template(4)},
            },
        },
    }
    sim = sim_for([{"name": "g", "count": 2, "machine": "gb200"}], job)
    # 2 nodes x 4 GPUs cannot hold 3 workers x 4 GPUs: none placed, nothing held
    assert sorted(sim.pods) == ["default/nb-worker-0", "default/nb-worker-1", "default/nb-worker-2"]
    assert all(r.phase == "Pending" and not r.node for r in sim.pods.values())
    assert all(n.requested.get("nvidia.com/gpu", 0) == 0 for n in sim.nodes)
    sim.step(
        scenario_from_dict(
            {"nodes": [], "steps": [{"addNodes": [{"name": "h", "machine": "gb200"}]}]}
        ).steps[0]
    )
    workers = [r for r in sim.pods.values() if "worker" in r.name]
    assert all(r.phase == "Running" for r in workers) and len({r.node for r in workers}) == 3
    launcher = [r for r in sim.pods.values() if r.name.startswith("nb-launcher-")]
    assert len(launcher) == 1 and launcher[0].phase == "Running"


def test_failed_node_evicts_and_reschedules() -> None:
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "x"}}, "template": template(8)},
    }
    sim = sim_for([{"name": "n", "count": 3, "machine": "dgx-h100"}], deploy)
    used = {r.node for r in sim.pods.values()}
    victim = sorted(used)[0]
    sim.fail_node(victim)
    sim.settle()
    nodes = sorted(r.node for r in sim.pods.values())
    assert victim not in nodes and len(set(nodes)) == 2
    assert any(e.reason == "TaintManagerEviction" for e in sim.events)
    spare = {"n-0", "n-1", "n-2"} - set(nodes)
    assert spare == {victim}


def test_xid_marks_device_unhealthy_and_lowers_allocatable() -> None:
    sim = sim_for([{"name": "n", "machine": "dgx-h100"}])
    sim.inject_xid("n", 3, 79)
    node = sim.node("n")
    assert node.capacity["nvidia.com/gpu"] == 8 and node.allocatable["nvidia.com/gpu"] == 7
    assert node.obj["status"]["allocatable"]["nvidia.com/gpu"] == "7"
    sim.inject_xid("n", 4, 13)  # an application error: nothing changes
    assert node.allocatable["nvidia.com/gpu"] == 7
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"replicas": 8, "selector": {"matchLabels": {"app": "x"}}, "template": template(1)},
    }
    sim.apply(deploy)
    sim.settle()
    assert sum(r.phase == "Running" for r in sim.pods.values()) == 7
    bad = node.machine.gpu(3).uuid if node.machine else ""
    assert all(bad not in ids for r in sim.pods.values() for ids in r.devices.values())


def test_mps_refuses_multi_gpu_requests_at_admission(acceptance: Path) -> None:
    # Upstream's MPS sharing refuses Allocate for more than one replica: the kubelet fails the
    # pod (UnexpectedAdmissionError); the Job retries once the clock moves, up to backoffLimit.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"backoffLimit": 1, "template": template(2, restartPolicy="Never")},
    }
    sim = Simulation(
        scenario_from_dict(
            {
                "nodes": [{"name": "g", "machine": "rtx-4090"}],
                "configs": [str(acceptance / "seed-guides/gpu-sharing-config-any-mps.yaml")],
                "steps": [{"advance": 10}, {"advance": 10}, {"advance": 10}],
            }
        ),
        plugins=False,
    )
    sim.start()
    sim.apply(job)
    sim.settle()
    (first,) = sim.pods.values()
    assert first.phase == "Failed"
    assert first.obj["status"]["reason"] == "UnexpectedAdmissionError"
    assert sim.node("g").requested.get("nvidia.com/gpu", 0) == 0
    sim.run()
    assert [r.phase for r in sim.pods.values()] == ["Failed", "Failed"]
    status = sim.store.get("batch/v1", "Job", "j")["status"]
    assert status["failed"] == 2 and status["conditions"][0]["reason"] == "BackoffLimitExceeded"


def test_no_execute_taints_evict_pods_that_do_not_tolerate_them() -> None:
    def pod(name: str, *tolerate: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeName": "n",
                "containers": [{"name": "c", "image": "i"}],
                "tolerations": [
                    {"key": key, "operator": "Exists", "effect": "NoExecute"} for key in tolerate
                ],
            },
        }

    sim = sim_for(
        [{"name": "n", "machine": "t4"}],
        pod("plain"),
        pod("maint", "maintenance"),
        pod("both", "maintenance", "node.kubernetes.io/unreachable"),
    )
    assert {r.name for r in sim.pods.values()} == {"plain", "maint", "both"}
    sim.taint_node(
        "n",
        [
            {"key": "maintenance", "value": "true", "effect": "NoExecute"},
            {"key": "soft", "value": "true", "effect": "NoSchedule"},
        ],
    )
    assert {r.name for r in sim.pods.values()} == {"maint", "both"}
    evicted = [e.object for e in sim.events if e.reason == "TaintManagerEviction"]
    assert evicted == ["Pod/default/plain"]
    sim.fail_node("n")  # unreachable, NoExecute: only the pod that tolerates it too stays
    assert {r.name for r in sim.pods.values()} == {"both"}
    evicted = [e.object for e in sim.events if e.reason == "TaintManagerEviction"]
    assert evicted == ["Pod/default/plain", "Pod/default/maint"]
