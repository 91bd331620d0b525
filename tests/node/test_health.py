"""Health decisions: which XIDs mark what, and when a GPU is trusted again."""

from __future__ import annotations

import pytest

from kgpu.hardware.backend import XidEvent
from kgpu.node.health import HealthState, on_event, on_probe, parse_xid_list
from kgpu.testing.views import gpu_uuid, make_machine, make_view, mig_resources, mig_uuid, replicas

MACHINE = make_machine(2, mig={1: ["3g.40gb", "3g.40gb"]})


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
def test_application_xids_never_mark(xid: int) -> None:
    state = on_event(HealthState(), MACHINE, XidEvent(gpu_uuid(0), xid), now=1.0)
    assert state.unhealthy == frozenset()


def test_critical_xid_marks_every_replica_of_the_gpu() -> None:
    view = make_view(MACHINE, [replicas(MACHINE, 3, gpus=[0]), *mig_resources(MACHINE)])
    state = on_event(HealthState(), MACHINE, XidEvent(gpu_uuid(0), 79), now=1.0)
    served = view.with_health(state.unhealthy)
    assert served.resource("nvidia.com/gpu").healthy_count == 0
    assert served.resource("nvidia.com/mig-3g.40gb").healthy_count == 2


def test_user_ignored_xids() -> None:
    event = XidEvent(gpu_uuid(0), 48)
    assert on_event(HealthState(), MACHINE, event, 1.0, ignored={48}).unhealthy == frozenset()
    assert parse_xid_list("48, 79") == {48, 79}
    with pytest.raises(ValueError, match="'x'"):
        parse_xid_list("48,x")


def test_mig_attributed_event_marks_only_that_mig_device() -> None:
    view = make_view(MACHINE, mig_resources(MACHINE))
    # Second MIG device of GPU 1 has gi_id 2.
    state = on_event(HealthState(), MACHINE, XidEvent(gpu_uuid(1), 94, gi_id=2, ci_id=0), 1.0)
    assert state.unhealthy == {mig_uuid(1, 1)}
    res = view.with_health(state.unhealthy).resource("nvidia.com/mig-3g.40gb")
    assert [d.healthy for d in res.devices] == [True, False]
    # Unattributed event on the same GPU hits both.
    state = on_event(state, MACHINE, XidEvent(gpu_uuid(1), 79), 2.0)
    assert view.with_health(state.unhealthy).resource("nvidia.com/mig-3g.40gb").healthy_count == 0


def test_recovery_needs_an_answer_and_a_quiet_period() -> None:
    state = on_event(HealthState(), MACHINE, XidEvent(gpu_uuid(0), 79), now=10.0)
    assert on_probe(state, gpu_uuid(0), answered=True, now=15.0, quiet_period_s=10).unhealthy
    again = on_event(state, MACHINE, XidEvent(gpu_uuid(0), 79), now=18.0)
    assert on_probe(again, gpu_uuid(0), True, now=21.0, quiet_period_s=10).unhealthy
    assert on_probe(again, gpu_uuid(0), True, now=28.0, quiet_period_s=10).unhealthy == frozenset()


def test_gpu_not_answering_is_unhealthy_until_it_answers() -> None:
    state = on_probe(HealthState(), gpu_uuid(1), answered=False, now=1.0, quiet_period_s=5)
    assert state.unhealthy == {gpu_uuid(1)}
    assert on_probe(state, gpu_uuid(1), answered=True, now=3.0, quiet_period_s=5).unhealthy
    assert not on_probe(state, gpu_uuid(1), answered=True, now=6.0, quiet_period_s=5).unhealthy
