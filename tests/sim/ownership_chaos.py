"""A seeded random run of one-owner-per-GPU on every built-in machine (issue 21).

Shared by the suite's short run (``test_sim_ownership_property.py``) and the long one
(``bench/ownership.py``, at least 10,000 steps). One node of every built-in machine joins, the
p4de split into MIG devices by its MIG manager; then each step is one of: a device-plugin pod
(one or two GPUs, a MIG device, a time-sliced replica), a claim pod (one GPU, several GPUs, a
MIG device), both at once on one node (the race), a pod deleted, an agent restarted (its
ledger rebuilt from both checkpoints), or a node's ``gpuOwnership`` changed (shared, device
plugin, DRA, a split, each with and without time-slicing). After every step the cluster
settles and :func:`check` asserts: no GPU is in pods of both APIs (from what the pods really
got), the ledger has no double holder, and no free GPU stays unoffered by the APIs the policy
names.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgpu.hardware.profiles import profile_names
from kgpu.sim import ownership
from kgpu.sim.node_lifecycle import restart_agent
from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation

REPO = Path(__file__).resolve().parents[2]
VALUES = REPO / "examples" / "manifests" / "gpu-operator-values.yaml"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
#: Above this many pods a step deletes one instead (about what the 13 nodes' 36 GPUs hold, with
#: time-slicing and MIG, plus a queue)
MAX_PODS = 80

_TS = "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 3\n"
_POLICIES = {
    "shared": "",
    "dp": "gpuOwnership: devicePlugin\n",
    "dra": "gpuOwnership: dra\n",
    "split": "gpuOwnership:\n  default: devicePlugin\n  gpus:\n  - {devices: [0], owner: dra}\n",
    "split2": "gpuOwnership:\n  default: dra\n  gpus:\n  - {devices: 1, owner: shared}\n",
}
CONFIGS = {
    **{name: "version: v1\n" + text for name, text in _POLICIES.items()},
    **{f"ts-{name}": "version: v1\n" + _TS + text for name, text in _POLICIES.items()},
}


def config_map() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "device-plugin-configs"},
        "data": dict(CONFIGS),
    }


def _template(name: str, count: int, device_class: str) -> dict[str, Any]:
    exactly = {"deviceClassName": device_class, "count": count}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


TEMPLATES = [
    _template("gpu-1", 1, "gpu.nvidia.com"),
    _template("gpu-2", 2, "gpu.nvidia.com"),
    _template("gpu-4", 4, "gpu.nvidia.com"),
    _template("mig-1", 1, "mig.nvidia.com"),
]


def _pod(name: str, node: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, **spec},
    }


def dp_pod(name: str, node: str, resource: str, count: int) -> dict[str, Any]:
    limits = {resource: count}
    container = {"name": "c", "image": "x", "resources": {"limits": limits}}
    return _pod(name, node, {"containers": [container]})


def claim_pod(name: str, node: str, template: str) -> dict[str, Any]:
    container = {"name": "c", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}
    return _pod(
        name,
        node,
        {
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template}],
            "containers": [container],
        },
    )


@dataclass
class Run:
    """What a run did, for the bench's figures."""

    steps: int = 0
    actions: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    running: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # per API, summed
    seconds: float = 0.0
    checks: int = 0


def new_cluster() -> Simulation:
    nodes = [{"name": f"n-{m.replace('.', '-')}", "machine": m} for m in profile_names()]
    for node in nodes:
        if node["machine"] == "p4de.24xlarge":
            node["labels"] = {"nvidia.com/mig.config": "p4de-half-balanced"}
    sim = Simulation(scenario_from_dict({"nodes": nodes, "configs": [str(VALUES)]}))
    sim.start()
    sim.apply(config_map())
    for template in TEMPLATES:
        sim.apply(template)
    sim.settle()
    return sim


def check(sim: Simulation) -> None:
    """The properties, after a settled step; AssertionError says what broke."""
    problems = ownership.problems(sim.context)
    assert not problems, problems
    apis: dict[tuple[str, str], set[str]] = defaultdict(set)
    for rec in sim.pods.values():
        if rec.phase != "Running":
            continue
        node = sim.node(rec.node)
        assert node.machine is not None
        kind = "dra" if rec.name.startswith("claim-") else "dp"
        for env in rec.env.values():
            for ref in filter(None, env.get("NVIDIA_VISIBLE_DEVICES", "").split(",")):
                found = node.machine.by_uuid(ref.split("::")[0])
                gpu = getattr(found, "parent_uuid", None) or found.uuid
                apis[(rec.node, gpu)].add(kind)
    both = [key for key, kinds in apis.items() if len(kinds) > 1]
    assert not both, f"GPUs in pods of both APIs: {both}"


def step(sim: Simulation, rng: random.Random, n: int, run: Run) -> str:
    """One random action (then the cluster settles); its name."""
    nodes = sim.nodes
    node = rng.choice(nodes)
    roll = rng.random()
    if len(sim.pods) > MAX_PODS:  # keep the cluster about full, not an ever-longer queue
        roll = 0.7
    if roll < 0.1 and node.view is not None and node.view.resources:
        # the race: a device-plugin pod and a claim for the same node in the same moment
        res = rng.choice(node.view.resources)
        sim.apply(dp_pod(f"dp-{n}", node.name, res.name, 1))
        sim.apply(claim_pod(f"claim-{n}", node.name, rng.choice(["gpu-1", "gpu-2", "mig-1"])))
        action = "race"
    elif roll < 0.35 and node.view is not None and node.view.resources:
        res = rng.choice(node.view.resources)
        count = 1 if res.name != "nvidia.com/gpu" or rng.random() < 0.7 else 2
        sim.apply(dp_pod(f"dp-{n}", node.name, res.name, count))
        action = "device-plugin pod"
    elif roll < 0.58:
        template = rng.choice(["gpu-1", "gpu-1", "gpu-2", "gpu-4", "mig-1"])
        sim.apply(claim_pod(f"claim-{n}", node.name, template))
        action = "claim pod"
    elif roll < 0.8:
        names = sorted(sim.pods)
        if not names:
            return "nothing"
        sim.delete_pod(rng.choice(names))
        action = "delete"
    elif roll < 0.9:
        restart_agent(sim.context, node)
        action = "agent restart"
    else:
        sim.label_node(node.name, {CONFIG_LABEL: rng.choice(sorted(CONFIGS))})
        action = "policy change"
    sim.settle()
    return action


def run(steps: int, seed: int, *, check_every: int = 1) -> Run:
    """``steps`` random steps from ``seed``, checked after every ``check_every``-th."""
    rng = random.Random(seed)
    started = time.perf_counter()
    sim = new_cluster()
    out = Run()
    try:
        check(sim)
        for n in range(steps):
            action = step(sim, rng, n, out)
            out.actions[action] += 1
            out.steps += 1
            if (n + 1) % check_every == 0:
                try:
                    check(sim)
                except AssertionError as exc:
                    raise AssertionError(f"seed {seed}, step {n} ({action}): {exc}") from None
                out.checks += 1
            for rec in sim.pods.values():
                if rec.phase == "Running":
                    out.running["dra" if rec.name.startswith("claim-") else "dp"] += 1
    finally:
        sim.close()
    out.seconds = time.perf_counter() - started
    return out
