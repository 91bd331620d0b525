"""Which user's MPS server enforces a DRA memory share (issue 27): the pure decisions of
:mod:`kgpu.node.shares` over claim and pod objects."""

from __future__ import annotations

from typing import Any

import pytest

from kgpu.node.shares import (
    Served,
    ShareRefused,
    consumer_uid,
    consumer_uids,
    daemon_commands,
    other_user,
    server_limits,
)


def claim(*pods: str, namespace: str = "ml") -> dict[str, Any]:
    return {
        "metadata": {"name": "share", "namespace": namespace},
        "status": {
            "reservedFor": [
                *({"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods),
                {"apiGroup": "batch", "resource": "jobs", "name": "not-a-pod", "uid": "j"},
            ]
        },
    }


def pod(pod_uid: int | None, **containers: int | None) -> dict[str, Any]:
    """A pod using the claim through a template (resourceClaimStatuses names it)."""
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
        "containers": [
            {
                "name": name,
                "resources": {"claims": [{"name": "gpu"}]},
                **({} if uid is None else {"securityContext": {"runAsUser": uid}}),
            }
            for name, uid in containers.items()
        ]
        + [{"name": "logger", "securityContext": {"runAsUser": 0}}],  # no claim: not asked
    }
    if pod_uid is not None:
        spec["securityContext"] = {"runAsUser": pod_uid}
    status = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "share"}]}
    return {"spec": spec, "status": status}


def test_the_container_user_counts_over_the_pods_and_only_consumers_are_asked() -> None:
    assert consumer_uids(pod(1000, a=None, b=2000), "share") == {"a": 1000, "b": 2000}
    # a pod whose claim mapping does not resolve: every container is a consumer
    assert consumer_uids(pod(7, a=None), "other-claim") == {"a": 7, "logger": 0}


def test_one_user_for_all_consumer_pods_or_a_refusal_naming_claim_pod_and_fix() -> None:
    pods = {("ml", "p1"): pod(1000, a=None), ("ml", "p2"): pod(None, a=1000)}
    assert consumer_uid(claim("p1", "p2"), lambda ns, n: pods.get((ns, n))) == (1000, "ml/p1")
    pods[("ml", "p2")] = pod(None, a=1001)
    with pytest.raises(ShareRefused, match=r"several users \(1000 \(pod ml/p1\), 1001"):
        consumer_uid(claim("p1", "p2"), lambda ns, n: pods.get((ns, n)))
    with pytest.raises(ShareRefused, match=r"pod ml/gone \(status\.reservedFor\) was not found"):
        consumer_uid(claim("gone"), lambda ns, n: None)
    with pytest.raises(ShareRefused, match=r"status\.reservedFor names no pod"):
        consumer_uid(claim(), lambda ns, n: None)
    with pytest.raises(ShareRefused, match="container 'a' has no runAsUser: set securityContext"):
        consumer_uid(claim("p"), lambda ns, n: pod(None, a=None))


def test_the_server_is_limited_to_the_largest_share_of_its_gpu() -> None:
    a = Served("u1", "ml/a", 1000, 20480, 100, 77)
    b = Served("u2", "ml/b", 1000, 40960, 30, 77)
    assert server_limits([]) is None
    assert server_limits([a]) == (20480, 100)
    assert server_limits([a, b]) == (40960, 100)  # each the largest asked
    assert server_limits([b]) == (40960, 30)


def test_daemon_defaults_are_the_smallest_share() -> None:
    assert daemon_commands(1024, 81559) == [
        "set_default_device_pinned_mem_limit 0 1024M",
        "set_default_active_thread_percentage 2",
    ]
    assert daemon_commands(4096, 2048)[0].endswith(" 2048M")


def test_a_legacy_daemon_serves_one_user_so_another_is_refused_naming_who_it_serves() -> None:
    served = [Served("u1", "ml/a", 1000, 20480, 100, 77)]
    other_user(served, 1000, claim="ml/b", pod="ml/b", gpu=3)  # the same user: fine
    other_user([], 1001, claim="ml/b", pod="ml/b", gpu=3)  # a free GPU: fine
    with pytest.raises(ShareRefused, match=r"GPU 3 serves user 1000 \(claim ml/a\)"):
        other_user(served, 1001, claim="ml/b", pod="ml/b", gpu=3)
