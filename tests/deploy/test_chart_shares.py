"""The chart's consumable-shares values (issue 27): ``consumableShares`` and the memory
grid reach the agent as its flags, the rendered DaemonSet validates, the agent takes the flags it
is given, and bad values are refused by helm naming the value."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from kgpu.agent.options import AgentOptions
from kgpu.dra.shares import MEMORY, SHARES

from .conftest import KUBE_VERSIONS, helm_template

SHARE_FLAGS = ("--consumable-shares", "--share-memory-minimum-mib", "--share-memory-step-mib")


def _agent_args(helm: str, version: str, *sets: str) -> list[str]:
    done = helm_template(helm, version, *(a for s in sets for a in ("--set", s)))
    assert done.returncode == 0, done.stderr
    (daemonset,) = [
        d
        for d in yaml.safe_load_all(done.stdout)
        if d and d["kind"] == "DaemonSet" and d["metadata"]["name"].endswith("agent")
    ]
    kubernetes_validate.validate(daemonset, f"{version}.0", strict=True)
    (agent,) = [
        c for c in daemonset["spec"]["template"]["spec"]["containers"] if c["name"] == "agent"
    ]
    args: list[str] = agent["args"]
    return args


def _shares(args: list[str]) -> dict[str, str]:
    return {
        flag: value for flag, _, value in (a.partition("=") for a in args) if flag in SHARE_FLAGS
    }


def test_disabled_by_default_renders_no_share_flag(helm: str) -> None:
    args = _agent_args(helm, KUBE_VERSIONS[-1])
    assert _shares(args) == {}  # the agent's default (and $CONSUMABLE_SHARES) then apply


@pytest.mark.parametrize("version", [KUBE_VERSIONS[0], KUBE_VERSIONS[-1]])
def test_memory_shares_reach_the_agent_as_its_flags(helm: str, version: str) -> None:
    args = _agent_args(
        helm,
        version,
        "consumableShares=memory",
        "shareMemoryMinimumMiB=2048",
        "shareMemoryStepMiB=512",
    )
    shares = _shares(args)
    assert shares == {
        "--consumable-shares": "memory",
        "--share-memory-minimum-mib": "2048",
        "--share-memory-step-mib": "512",
    }
    # the agent takes exactly what the chart renders
    given: dict[str, Any] = {
        "consumable_shares": shares["--consumable-shares"],
        "share_memory_minimum_mib": int(shares["--share-memory-minimum-mib"]),
        "share_memory_step_mib": int(shares["--share-memory-step-mib"]),
    }
    policy = AgentOptions.parse(**given).share_policy
    assert (policy.mode, policy.memory_minimum_mib, policy.memory_step_mib) == (MEMORY, 2048, 512)


def test_a_share_count_set_as_a_number_renders(helm: str) -> None:
    shares = _shares(_agent_args(helm, KUBE_VERSIONS[-1], "consumableShares=4"))
    assert shares["--consumable-shares"] == "4"
    assert AgentOptions.parse(consumable_shares="4").share_policy.mode == SHARES


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["consumableShares=half"], "at '/consumableShares'"),
        (["consumableShares=2000"], "at '/consumableShares'"),
        (["shareMemoryStepMiB=0"], "at '/shareMemoryStepMiB'"),
        (["sharememoryStepMiB=1"], "additional properties 'sharememoryStepMiB'"),
        (
            ["consumableShares=memory", "dra.enabled=false"],
            "consumableShares=memory needs the DRA driver",
        ),
    ],
)
def test_bad_share_values_are_refused_naming_the_value(
    helm: str, sets: list[str], message: str
) -> None:
    done = helm_template(helm, KUBE_VERSIONS[-1], *(a for s in sets for a in ("--set", s)))
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
