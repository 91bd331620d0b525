"""Why claims do not fit on a node: kube-scheduler's reason, then kgpu's account per request.

kube-scheduler says only ``cannot allocate all claims``. That stays the first words of the
answer; after it, for every claim and request (every alternative of a prioritized list), how
many devices it wants and how many on the node match its class and selectors, are free, are not
tainted against it, and have counters and capacity left for it. When every request would fit
on its own, the cause is their combination (devices shared between requests, counters,
constraints), and the answer says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kgpu.dra.cel import CelRuntimeError
from kgpu.dra.requests import AllocationError, Request
from kgpu.dra.taints import blocking_taint

if TYPE_CHECKING:
    from kgpu.dra.search import Search

CANNOT_ALLOCATE = "cannot allocate all claims"


def _count(search: Search, ci: int, req: Request) -> tuple[int, int, int, int]:
    """(matching, free, untainted, usable) devices for one request on the search's node."""
    matching = free = untainted = usable = 0
    features = search.features
    for dev in search.devices:
        try:
            if not search._selectable(ci, req, dev):
                continue
        except (AllocationError, CelRuntimeError):
            continue
        matching += 1
        if not search._free(ci, req, dev) and not (features.consumable_capacity and dev.multi):
            continue
        free += 1
        if features.device_taints and dev.taints and blocking_taint(dev.taints, req.tolerations):
            continue
        untainted += 1
        if dev.consumes:
            if not features.partitionable_devices or not search._consume(dev):
                continue
            search._release(dev)
        if features.consumable_capacity and search._capacity(req, dev) is None:
            continue
        usable += 1
    return matching, free, untainted, usable


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _request_reason(search: Search, ci: int, req: Request) -> tuple[bool, str]:
    """(fits alone, words) for one request or alternative."""
    matching, free, untainted, usable = _count(search, ci, req)
    want = len(req.all_devices) if req.all_mode else req.count
    node = search.node.name
    wanted = f"all {_plural(want, 'matching device')}" if req.all_mode else _plural(want, "device")
    head = f"request {req.result_name}: wants {wanted} of class {req.class_name}"
    if req.all_mode and not req.all_devices:
        return False, f"{head}, but no device on {node} matches"
    if matching == 0:
        return False, f"{head}, but no device on {node} matches its class and selectors"
    parts = [f"{matching} on {node} match"]
    if free < matching:
        parts.append(f"{free} of them free")
    if untainted < free:
        parts.append(f"{untainted} not tainted against it")
    if usable < untainted:
        parts.append(f"{usable} with counters and capacity left")
    fits = usable >= want if not req.all_mode else usable >= len(req.all_devices)
    return fits, f"{head}; {', '.join(parts)}"


def explain(search: Search) -> str:
    """The unsatisfiable answer for a finished (failed) search."""
    reasons: list[str] = []
    every_fits = True
    for ci, slots in enumerate(search.slots):
        ref = search.refs[ci]
        for slot in slots:
            texts = []
            slot_fits = False
            for req in slot.alternatives:
                fits, text = _request_reason(search, ci, req)
                slot_fits = slot_fits or fits
                texts.append(text)
            every_fits = every_fits and slot_fits
            if not slot_fits:
                if slot.subrequests:
                    reasons.append(
                        f"claim {ref}, request {slot.name}: no alternative fits ("
                        + "; ".join(texts)
                        + ")"
                    )
                else:
                    reasons.append(f"claim {ref}, {texts[0]}")
    if every_fits:
        what = "claims" if len(search.claims) > 1 else "claim"
        refs = ", ".join(search.refs)
        reasons.append(
            f"every request of {what} {refs} fits on its own on {search.node.name}, but not "
            "all together (devices, counters or capacity wanted twice, or a constraint)"
        )
    return f"{CANNOT_ALLOCATE}: " + "; ".join(reasons)
