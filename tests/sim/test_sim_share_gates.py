"""The simulated API server drops ``DRAConsumableCapacity``'s claim fields when the release
does not serve the gate, as kube-apiserver's ResourceClaim strategy does (issue 27): at 1.34-1.35
without the gate, claims asking GPU memory are stored as plain claims and get whole, exclusive
GPUs, rather than waiting for a feature the scheduler does not have; with the gate (or at 1.36)
they share. One rule with the API-server stand-in: :mod:`kgpu.dra.gated_fields`."""

from __future__ import annotations

from typing import Any

import pytest
from test_sim_shares import _claim

from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation

DRA = "resource.k8s.io/v1"
#: three inference pods asking 20Gi each, run as one user: with the gate they share one GPU (a
#: Legacy MPS daemon serves one user's server at a time, so a GPU's shares are one user's)
SIZES = (("chat", "20Gi"), ("embed", "20Gi"), ("summarize", "20Gi"))


def _run(**extra: Any) -> tuple[Simulation, dict[str, dict[str, Any]]]:
    sim = Simulation(
        scenario_from_dict(
            {
                "nodes": [{"name": "dgx", "machine": "dgx-h100"}],
                "devicePlugin": False,
                "draDriver": {"consumableShares": "memory"},
                **extra,
            }
        )
    )
    sim.start()
    for name, memory in SIZES:
        claim, pod = _claim(name, memory)
        pod["spec"]["securityContext"] = {"runAsUser": 1000}
        sim.apply(claim)
        sim.apply(pod)
    sim.settle()
    claims = {c["metadata"]["name"]: c for c in sim.store.list(DRA, "ResourceClaim")}
    return sim, claims


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return list(claim["status"]["allocation"]["devices"]["results"])


@pytest.mark.parametrize("version", ["1.34", "1.35"])
def test_without_the_gate_claims_asking_memory_get_whole_gpus(version: str) -> None:
    sim, claims = _run(kubernetesVersion=version)
    assert {sim.pods[f"default/{n}"].phase for n, _ in SIZES} == {"Running"}
    devices = []
    for name, _ in SIZES:
        (request,) = claims[name]["spec"]["devices"]["requests"]
        assert "capacity" not in request["exactly"]  # dropped on create, as the server does
        (result,) = _results(claims[name])
        assert "shareID" not in result and "consumedCapacity" not in result
        devices.append(result["device"])
    assert len(set(devices)) == 3  # one whole GPU each


@pytest.mark.parametrize(
    "extra",
    [
        {"kubernetesVersion": "1.35", "featureGates": {"DRAConsumableCapacity": True}},
        {"kubernetesVersion": "1.36"},
    ],
)
def test_with_the_gate_they_share_gpus_by_memory(extra: dict[str, Any]) -> None:
    sim, claims = _run(**extra)
    assert {sim.pods[f"default/{n}"].phase for n, _ in SIZES} == {"Running"}
    placed = {}
    for name, memory in SIZES:
        (request,) = claims[name]["spec"]["devices"]["requests"]
        assert request["exactly"]["capacity"] == {"requests": {"memory": memory}}
        (result,) = _results(claims[name])
        assert result["shareID"] and result["consumedCapacity"]["memory"] == memory
        placed[name] = result["device"]
    assert len(set(placed.values())) == 1  # 3 x 20Gi of one 79Gi GPU


def test_a_template_asking_memory_makes_plain_claims_without_the_gate() -> None:
    sim = Simulation(
        scenario_from_dict(
            {
                "nodes": [{"name": "dgx", "machine": "dgx-h100"}],
                "devicePlugin": False,
                "draDriver": {"consumableShares": "memory"},
                "kubernetesVersion": "1.35",
            }
        )
    )
    sim.start()
    claim, pod = _claim("infer", "20Gi")
    template = {
        "apiVersion": DRA,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "infer"},
        "spec": {"spec": claim["spec"]},
    }
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "infer"}]
    sim.apply(template)
    sim.apply(pod)
    sim.settle()
    (stored,) = sim.store.list(DRA, "ResourceClaimTemplate")
    assert "capacity" not in stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    (made,) = sim.store.list(DRA, "ResourceClaim")
    (result,) = _results(made)
    assert "shareID" not in result
    assert sim.pods["default/infer"].phase == "Running"
