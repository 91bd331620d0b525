"""``kgpu sim`` admits ResourceClaims and ResourceClaimTemplates as a cluster with kgpu's chart
and ``draDriver.consumableShares: memory`` does: its ValidatingAdmissionPolicy refuses a GPU
memory request off the share grid (which the scheduler would round up without a word), in the
API server's words, and the object is not stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kgpu.dra.shares import DISABLED_POLICY, SharePolicy, parse_share_policy
from kgpu.sim.admission import SHARE_POLICY, Admission, AdmissionDenied, share_policy_of
from kgpu.sim.scenario import Scenario, scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.store import MemoryStore, NotFound
from kgpu.testing.manifests import memory_share_claim

Obj = dict[str, Any]
MEMORY = parse_share_policy("memory")


def claim(name: str, memory: str, kind: str = "ResourceClaim") -> Obj:
    return memory_share_claim(name, memory, kind=kind)


def with_shares(scenario: Scenario, policy: SharePolicy) -> Scenario:
    # The scenario's draDriver map lands as Scenario.share_policy (issue 27's scenario helper);
    # until then the attribute is set here, as the simulator reads it (share_policy_of).
    object.__setattr__(scenario, "share_policy", policy)
    return scenario


def stored(sim: Simulation, kind: str, name: str) -> bool:
    try:
        sim.context.store.get("resource.k8s.io/v1", kind, name, "default")
    except NotFound:
        return False
    return True


def test_claims_off_the_share_grid_are_refused_with_the_api_servers_words(
    tmp_path: Path,
) -> None:
    data = {
        "nodes": [{"name": "gpu-node", "machine": "rtx-2080ti"}],
        "devicePlugin": False,
        "apply": [
            claim("tiny", "512Mi"),
            claim("odd", "20.5Gi", kind="ResourceClaimTemplate"),
            claim("fine", "20Gi"),
        ],
    }
    sim = Simulation(with_shares(scenario_from_dict(data), MEMORY), work_dir=tmp_path).run()
    assert not stored(sim, "ResourceClaim", "tiny")
    assert not stored(sim, "ResourceClaimTemplate", "odd")
    assert stored(sim, "ResourceClaim", "fine")
    forbidden = {e.object: e.message for e in sim.context.events if e.reason == "Forbidden"}
    assert forbidden == {
        "ResourceClaim/default/tiny": (
            'resourceclaims.resource.k8s.io "tiny" is forbidden: ValidatingAdmissionPolicy '
            f"'{SHARE_POLICY}' with binding '{SHARE_POLICY}' denied request: request gpu: "
            "memory 512Mi is below the shared GPU minimum 1Gi (the scheduler would round it "
            "up): ask 1Gi or more"
        ),
        "ResourceClaimTemplate/default/odd": (
            'resourceclaimtemplates.resource.k8s.io "odd" is forbidden: '
            f"ValidatingAdmissionPolicy '{SHARE_POLICY}' with binding '{SHARE_POLICY}' denied "
            "request: request gpu: memory 20.5Gi is not on the shared GPU grid (1Gi, then steps "
            "of 1Gi; the scheduler would round it up): ask 20Gi or 21Gi"
        ),
    }
    # without memory shares (the default) the same claims are stored
    plain = Simulation(scenario_from_dict(data), work_dir=tmp_path / "plain").run()
    assert stored(plain, "ResourceClaim", "tiny")
    assert stored(plain, "ResourceClaimTemplate", "odd")


def test_an_update_is_checked_only_when_it_changes_the_spec() -> None:
    store = MemoryStore()
    admission = Admission(store, shares=MEMORY)
    bad = claim("old", "512Mi")
    admission.admit_object({**bad, "metadata": {**bad["metadata"], "finalizers": []}}, bad)
    try:
        admission.admit_object(bad, claim("old", "2Gi"))
    except AdmissionDenied as exc:
        assert "is forbidden: ValidatingAdmissionPolicy" in str(exc)
    else:
        raise AssertionError("a spec changed to 512Mi was admitted")
    Admission(store).admit_object(bad)  # shares off: nothing checked


def test_the_share_policy_is_read_from_the_scenario_and_needs_a_dra_driver() -> None:
    scenario = scenario_from_dict({"nodes": [{"name": "n"}]})
    assert share_policy_of(scenario) == DISABLED_POLICY
    assert share_policy_of(with_shares(scenario, MEMORY)) == MEMORY
    no_dra = scenario_from_dict({"nodes": [{"name": "n"}], "draDriver": False})
    assert share_policy_of(with_shares(no_dra, MEMORY)) == DISABLED_POLICY
