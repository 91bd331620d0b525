"""Device health as a pure state machine: XID events and probe answers in, Unhealthy UUIDs out.

The agent's health thread only feeds events and probe results in and reads the set out; every
decision (which XIDs count, which devices an event hits, when a GPU is trusted again) lives here,
so it is tested without threads or clocks.

Facts from NVIDIA's device plugin: XIDs 13, 31, 43, 45, 68 and 109 are faults of the
application, not the GPU, and never mark a device; users add their own through
``DP_DISABLE_HEALTHCHECKS``-style lists (``--ignore-xids`` here). An event NVML attributes to a
GPU/compute instance hits only the MIG device with those ids; an unattributed event hits the GPU
and so every replica and MIG device of it.

Where kgpu goes further than upstream (which never recovers without a restart): a GPU (or MIG
device) marked Unhealthy becomes Healthy again once its GPU answers a probe and no new critical
XID arrived for it within the quiet period. A GPU that stops answering probes is Unhealthy too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from kgpu.hardware.backend import XidEvent
from kgpu.hardware.model import Machine

APPLICATION_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})
DEFAULT_QUIET_PERIOD_S = 30.0


@dataclass(frozen=True)
class Problem:
    """Why one GPU or MIG device is Unhealthy."""

    uuid: str  # the GPU or MIG device marked
    gpu_uuid: str  # its physical GPU (what gets probed)
    reason: str  # "xid 79", "nvml: not answering"
    since: float
    last_critical: float  # time of the latest critical XID (or failed probe)


@dataclass(frozen=True)
class HealthState:
    problems: Mapping[str, Problem] = field(default_factory=dict)

    @property
    def unhealthy(self) -> frozenset[str]:
        return frozenset(self.problems)

    def describe(self) -> list[dict[str, object]]:
        return [
            {"uuid": p.uuid, "gpu": p.gpu_uuid, "reason": p.reason, "since": p.since}
            for p in sorted(self.problems.values(), key=lambda p: p.uuid)
        ]


def parse_xid_list(text: str) -> frozenset[int]:
    """``"48, 79"`` -> {48, 79}; raises ValueError naming the bad item."""
    out = set()
    for item in text.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit():
            raise ValueError(f"XID list item {item!r} is not a number (expected e.g. 48,79)")
        out.add(int(item))
    return frozenset(out)


def is_critical(xid: int, ignored: Iterable[int] = ()) -> bool:
    return xid not in APPLICATION_XIDS and xid not in set(ignored)


def affected_uuid(machine: Machine, event: XidEvent) -> tuple[str, str] | None:
    """(uuid to mark, its GPU's uuid) for an event; None when the GPU is not on this node."""
    for gpu in machine.gpus:
        if gpu.uuid != event.gpu_uuid:
            continue
        if event.gi_id is not None and gpu.mig_devices:
            for mig in gpu.mig_devices:
                if mig.gi_id == event.gi_id and (event.ci_id is None or mig.ci_id == event.ci_id):
                    return mig.uuid, gpu.uuid
        return gpu.uuid, gpu.uuid
    return None


def on_event(
    state: HealthState,
    machine: Machine,
    event: XidEvent,
    now: float,
    ignored: Iterable[int] = (),
) -> HealthState:
    """The state after one XID event (unchanged for application XIDs and unknown GPUs)."""
    if not is_critical(event.xid, ignored):
        return state
    hit = affected_uuid(machine, event)
    if hit is None:
        return state
    uuid, gpu = hit
    problems = dict(state.problems)
    old = problems.get(uuid)
    problems[uuid] = Problem(
        uuid=uuid,
        gpu_uuid=gpu,
        reason=f"xid {event.xid}",
        since=old.since if old else now,
        last_critical=now,
    )
    return HealthState(problems)


def on_probe(
    state: HealthState,
    gpu_uuid: str,
    answered: bool,
    now: float,
    quiet_period_s: float = DEFAULT_QUIET_PERIOD_S,
) -> HealthState:
    """The state after probing one GPU.

    A GPU that does not answer is marked (reason ``nvml``); one that answers clears every
    problem of it (the GPU and its MIG devices) whose last critical event is older than the
    quiet period.
    """
    problems = dict(state.problems)
    if not answered:
        old = problems.get(gpu_uuid)
        problems[gpu_uuid] = Problem(
            uuid=gpu_uuid,
            gpu_uuid=gpu_uuid,
            reason="nvml: GPU does not answer",
            since=old.since if old else now,
            last_critical=now,
        )
        return HealthState(problems)
    for uuid, problem in list(problems.items()):
        if problem.gpu_uuid == gpu_uuid and now - problem.last_critical >= quiet_period_s:
            del problems[uuid]
    if len(problems) == len(state.problems):
        return state
    return HealthState(problems)


def forget_missing(state: HealthState, machine: Machine) -> HealthState:
    """Drop problems of devices that no longer exist (a MIG layout changed under them)."""
    present = {g.uuid for g in machine.gpus} | {m.uuid for g in machine.gpus for m in g.mig_devices}
    kept = {k: v for k, v in state.problems.items() if k in present}
    return state if len(kept) == len(state.problems) else replace(state, problems=kept)
