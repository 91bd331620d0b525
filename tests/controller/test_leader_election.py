"""Leader election over a real Lease on the API-server stand-in: two replicas race and one
leads; a killed leader is replaced within the lease duration; a leader that cannot renew
stops writing before anyone else may start. Timings are shortened (lease 1.5 s, renew
deadline 1.0 s, retry 0.2 s); the rules are client-go's."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from controller_cluster import FAST, NAMESPACE, RACK_A, Cluster, domain, node, wait_for  # type: ignore[import-not-found]

from kgpu.cluster.kube import KubeApiError
from kgpu.computedomain.api import API_VERSION
from kgpu.controller.fence import NotLeader
from kgpu.controller.leaderelection import LeaderElector, LeaseConfig
from kgpu.errors import FieldError
from kgpu.store import ObjectStore

WRITES = {"create", "update", "patch", "delete"}


def _lease(cluster: Cluster) -> dict[str, Any]:
    return dict(cluster.admin.get("coordination.k8s.io/v1", "Lease", "kgpu-controller", NAMESPACE))


def test_two_replicas_racing_for_the_lease_never_lead_together(cluster: Cluster) -> None:
    a, b = (cluster.controller(name) for name in ("replica-a", "replica-b"))
    both = []
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        both.append((a.elector.is_leader, b.elector.is_leader))
        time.sleep(0.01)
    assert not any(x and y for x, y in both)
    leaders = {name for name, ctl in (("replica-a", a), ("replica-b", b)) if ctl.leading}
    assert len(leaders) == 1
    assert _lease(cluster)["spec"]["holderIdentity"] in leaders
    # the standby wrote nothing but its attempts at the Lease
    standby = ({"replica-a", "replica-b"} - leaders).pop()
    writes = {
        r.resource
        for r in cluster.server.requests
        if r.user_agent == f"kgpu-controller/{standby}" and r.verb in WRITES
    }
    assert writes <= {"leases"}


def test_a_killed_leader_is_replaced_within_the_lease_duration(cluster: Cluster) -> None:
    cluster.admin.create(node("tray-0", RACK_A, "10.0.0.1"))
    a = cluster.controller("replica-a")
    assert wait_for(lambda: a.leading)
    b = cluster.controller("replica-b")
    time.sleep(0.5)  # b watches the Lease being renewed
    assert not b.leading
    a.elector.release = lambda: False  # type: ignore[method-assign]  # it crashes: no release
    died = time.monotonic()
    a.stop()
    assert wait_for(lambda: b.leading, seconds=5.0)
    took = time.monotonic() - died
    # client-go's bound: the lease duration after the last renewal b saw, plus one retry
    assert FAST["lease_duration_s"] * 0.5 <= took <= FAST["lease_duration_s"] + 2.2 * 0.2 + 0.8
    lease = _lease(cluster)["spec"]
    assert lease["holderIdentity"] == "replica-b" and lease["leaseTransitions"] == 1
    # the new leader works: a domain created now is reconciled by b
    cluster.admin.create(domain("after"))
    assert wait_for(
        lambda: cluster.admin.get(API_VERSION, "ComputeDomain", "after", "ml").get("status")
    )


def test_a_leader_that_stops_cleanly_hands_over_at_once(cluster: Cluster) -> None:
    a = cluster.controller("replica-a")
    assert wait_for(lambda: a.leading)
    b = cluster.controller("replica-b")
    time.sleep(0.3)
    stopped = time.monotonic()
    a.stop()  # releases the Lease after its workers stopped
    assert wait_for(lambda: b.leading, seconds=5.0)
    assert time.monotonic() - stopped < FAST["lease_duration_s"]


class _LeaseOutage:
    """The leader's store, whose Lease requests fail once ``down`` is set (its other requests
    still reach the server: the dangerous case for a leader that would go on writing)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.down = threading.Event()

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            kinds = [a for a in args if a == "Lease"] + [
                a.get("kind") for a in args if isinstance(a, dict)
            ]
            if self.down.is_set() and "Lease" in kinds:
                raise KubeApiError("the Lease cannot be reached", "ServiceUnavailable", 503)
            return real(*args, **kwargs)

        return call


def test_a_leader_whose_renewals_fail_stops_writing(cluster: Cluster) -> None:
    admin = cluster.admin
    admin.create(node("tray-0", RACK_A, "10.0.0.1"))
    outage: list[_LeaseOutage] = []

    def flaky_elector(store: ObjectStore, config: LeaseConfig, **kw: Any) -> LeaderElector:
        outage.append(_LeaseOutage(store))
        return LeaderElector(outage[-1], config, **kw)  # type: ignore[arg-type]

    a = cluster.controller("replica-a", elector_factory=flaky_elector)
    assert wait_for(lambda: a.leading)
    b = cluster.controller("replica-b")
    time.sleep(0.3)
    outage[0].down.set()
    broke = time.monotonic()
    assert a.wait(timeout=3.0)  # it gave up leadership
    assert a.lost_leadership and not a.elector.is_leader
    # it stopped within the renew deadline (plus scheduling slack on a busy machine), before
    # the lease could expire for anyone else
    assert time.monotonic() - broke <= FAST["renew_deadline_s"] + 0.45
    with pytest.raises(NotLeader):
        a.fenced.patch("v1", "Node", "tray-0", {"metadata": {"labels": {"x": "y"}}})
    lost_at = len(cluster.server.requests)
    assert not b.leading  # the lease has not expired yet: nobody writes for a moment

    admin.create(domain("during"))  # work arrives while leadership moves
    assert wait_for(lambda: b.leading, seconds=5.0)
    assert wait_for(lambda: admin.get(API_VERSION, "ComputeDomain", "during", "ml").get("status"))
    late = [
        (r.verb, r.resource)
        for r in cluster.server.requests[lost_at:]
        if r.user_agent == "kgpu-controller/replica-a" and r.verb in WRITES
    ]
    assert late == []


def test_lease_timings_are_checked_as_client_go_checks_them() -> None:
    with pytest.raises(FieldError) as bad:
        LeaseConfig(
            "l", "ns", "me", lease_duration_s=10, renew_deadline_s=10, retry_period_s=2
        ).check()
    assert "--leader-elect-lease-duration: 10s must be greater than the renew deadline" in str(
        bad.value
    )
    with pytest.raises(FieldError, match=r"greater than 1\.2 x the retry period"):
        LeaseConfig("l", "ns", "me", 15, 2, 2).check()
    LeaseConfig("l", "ns", "me").check()  # client-go's defaults: 15, 10, 2
