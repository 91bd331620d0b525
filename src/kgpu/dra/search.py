"""The search: kube-scheduler's ``allocateOne`` over one node's pools, claim by claim, request by
request, device by device, first full solution wins.

What it follows from upstream (k8s.io/dynamic-resource-allocation structured, experimental
allocator of 1.35):

* before searching, every request is validated and ``All`` requests collect their devices (an
  incomplete or invalid pool is then an error); a claim that needs more than 32 devices even
  with its smallest alternatives is an error;
* candidates are tried in pool order (pools with binding conditions last), skipping incomplete
  and invalid pools; a device is taken when it is free (or, with admin access, not already in
  this claim), matches the class and request selectors and reaches the node, has room for the
  requested capacity, its counters fit, no untolerated ``NoSchedule``/``NoExecute`` taint, and
  the claim's constraints hold;
* ``firstAvailable`` alternatives are tried in order; hitting the 32-result limit inside a
  request abandons that branch at once (it cannot succeed with more devices) and moves to the
  next alternative, so a prioritized list that would need more than 32 devices fails fast
  instead of trying every combination;
* when nothing fits and some pool of the node was invalid, the answer is an error ("invalid
  resource pools were encountered"), since the invalid pool might have held a solution.

Within one request devices are tried as combinations rather than permutations (a set that
failed in one order fails in every order), and a request that cannot find enough matching free
devices at all is abandoned before any combination is tried.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from kgpu.dra.capacity import CapacityError, Key, consumption, fits, resolve_requests
from kgpu.dra.cel import CelRuntimeError
from kgpu.dra.constraints import Constraint, DistinctAttribute, MatchAttribute
from kgpu.dra.nodeselect import NodeRef
from kgpu.dra.pools import Device, Pool, device_id_str
from kgpu.dra.requests import (
    MAX_RESULTS,
    AllocationError,
    NodeAllocationError,
    Request,
    Slot,
    claim_ref,
)
from kgpu.dra.taints import blocking_taint

if TYPE_CHECKING:
    from kgpu.dra.allocator import Allocator

Obj = dict[str, Any]
DeviceID = tuple[str, str, str]

#: allocateOne's errAllocationResultMaxSizeExceeded, a third answer besides True/False
EXCEEDED = 2
_SHARE_NS = uuid.UUID("6f1c2a8e-3b0d-4c55-9a8b-2f5d7e1c0a11")

_SELECTOR_CACHE_MAX = 64


def selectable(req: Request, dev: Device) -> Any:
    """Cached on the device: True, False, or ("class"|"claim", selector index, error)."""
    cached = dev.matches.get(req.key)
    if cached is not None:
        return cached
    result: Any = True
    for source, selectors in (("class", req.class_selectors()), ("claim", req.selectors())):
        for i, sel in enumerate(selectors):
            try:
                hit = sel.evaluate_raw(dev.id[0], dev.raw, dev.view_of)
            except CelRuntimeError as exc:
                result = (source, i, str(exc))
                break
            except ValueError as exc:  # an attribute the CEL view cannot represent
                result = (source, i, str(exc))
                break
            if not hit:
                result = False
                break
        if result is not True:
            break
    if len(dev.matches) > _SELECTOR_CACHE_MAX:
        dev.matches.clear()
    dev.matches[req.key] = result
    return result


class Taken:
    """One device taken for one request during the search."""

    __slots__ = ("consumed", "dev", "req", "share")

    def __init__(self, req: Request, dev: Device, share: str, consumed: dict[Key, Decimal]):
        self.req = req
        self.dev = dev
        self.share = share
        self.consumed = consumed


class Search:
    """State of one :meth:`Allocator.allocate` call."""

    def __init__(self, alloc: Allocator, node: NodeRef, claims: list[Obj]) -> None:
        self.alloc = alloc
        self.features = alloc.features
        self.node = node
        self.claims = claims
        self.refs = [claim_ref(c) for c in claims]
        self.pools: list[Pool] = alloc.index.pools_for(node)
        self.devices: list[Device] = alloc.index.search_devices(node)
        self.state = alloc.state
        self.taking: dict[DeviceID, set[int]] = {}
        self.allocating_cap: dict[DeviceID, dict[Key, Decimal]] = {}
        self.results: list[list[Taken]] = [[] for _ in claims]
        self.constraints: list[list[Constraint]] = []
        self.slots: list[list[Slot]] = []
        self.consumed: dict[tuple[str, str], dict[str, dict[str, Decimal]]] = {}
        self.shares = 0

    # -- setup -----------------------------------------------------------------------------
    def prepare(self) -> None:
        consumable = self.features.consumable_capacity
        for ci, claim in enumerate(self.claims):
            slots = self.alloc.prepared(claim)
            self.slots.append(slots)
            ref = self.refs[ci]
            minimum = 0
            for slot in slots:
                least: int | None = None
                for req in slot.alternatives:
                    if req.all_mode:
                        self._gather_all(ci, req, consumable)
                        n = len(req.all_devices)
                    else:
                        n = req.count
                    least = n if least is None else min(least, n)
                minimum += least or 0
            if minimum > MAX_RESULTS:
                raise AllocationError(
                    f"claim {ref}: number of requested devices {minimum} exceeds the claim limit "
                    f"of {MAX_RESULTS}"
                )
            cons: list[Constraint] = []
            for i, c in enumerate(
                ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []
            ):
                if c.get("matchAttribute"):
                    cons.append(MatchAttribute(c.get("requests") or [], str(c["matchAttribute"])))
                elif c.get("distinctAttribute"):
                    cons.append(
                        DistinctAttribute(c.get("requests") or [], str(c["distinctAttribute"]))
                    )
                else:
                    raise AllocationError(
                        f"claim {ref}, constraint #{i}: empty constraint (unsupported constraint "
                        "type?)"
                    )
            self.constraints.append(cons)

    def _gather_all(self, ci: int, req: Request, consumable: bool) -> None:
        ref = self.refs[ci]
        for pool in self.pools:
            if pool.incomplete:
                raise AllocationError(
                    f"claim {ref}, request {req.name}: asks for all devices, but resource pool "
                    f"{pool.id} is currently being updated"
                )
            if pool.invalid:
                raise AllocationError(
                    f"claim {ref}, request {req.name}: asks for all devices, but resource pool "
                    f"{pool.id} is currently invalid"
                )
            for dev in pool.devices:
                if not self._selectable(ci, req, dev):
                    continue
                if consumable and self._capacity(req, dev) is None:
                    continue
                req.all_devices.append(dev)

    # -- checks ----------------------------------------------------------------------------
    def _selectable(self, ci: int, req: Request, dev: Device) -> bool:
        if dev.binding and not self.features.binding:
            return False
        hit = selectable(req, dev)
        if hit is True:
            return dev.reaches(self.node)
        if hit is False:
            return False
        source, i, message = hit
        who = f"class {req.class_name}" if source == "class" else f"claim {self.refs[ci]}"
        raise AllocationError(f"{who}: selector #{i}: CEL runtime error: {message}")

    def _capacity(self, req: Request, dev: Device) -> dict[Key, Decimal] | None:
        """What taking ``dev`` for ``req`` consumes of its capacities, None when it does not
        fit (upstream's CmpRequestOverCapacity; errors count as not fitting)."""
        caps = dev.capacities
        try:
            requested = resolve_requests(req.capacity, dev.driver, caps)
        except CapacityError:
            return None
        if requested is None:
            return None
        consumed = consumption(requested, caps)
        if not fits(
            consumed, caps, self.state.capacity.get(dev.id), self.allocating_cap.get(dev.id)
        ):
            return None
        return consumed

    def _free(self, ci: int, req: Request, dev: Device) -> bool:
        taking = self.taking.get(dev.id)
        if req.admin:
            return not taking or ci not in taking
        return dev.id not in self.state.dedicated and not taking

    # -- counters --------------------------------------------------------------------------
    def _pool_of(self, dev: Device) -> Pool:
        key = (dev.id[0], dev.id[1])
        for p in self.pools:
            if p.key == key:
                return p
        raise KeyError(key)  # pragma: no cover - devices come from these pools

    def _consume(self, dev: Device) -> bool:
        pool = self._pool_of(dev)
        avail = self.alloc.available_counters(pool)
        used = self.consumed.setdefault(pool.key, {})
        for cset, counters in dev.consumes:
            into = used.setdefault(cset, {})
            for name, value in counters:
                into[name] = into.get(name, Decimal(0)) + value
        for set_name, limits in avail.items():
            have = used.get(set_name)
            if not have:
                continue
            for name, value in limits.items():
                if value < have.get(name, Decimal(0)):
                    self._release(dev)
                    return False
        return True

    def _release(self, dev: Device) -> None:
        used = self.consumed[(dev.id[0], dev.id[1])]
        for cset, counters in dev.consumes:
            for name, value in counters:
                used[cset][name] -= value

    # -- taking one device -----------------------------------------------------------------
    def _take(self, ci: int, req: Request, dev: Device, must: bool) -> Callable[[], None] | None:
        """Take ``dev`` (selectable) for ``req`` of claim ``ci``; an undo function, or None
        when it is not available (in use, counters, taints, constraints, capacity)."""
        features = self.features
        multi = features.consumable_capacity and dev.multi
        taking = self.taking.get(dev.id)
        if not multi and req.admin and taking and ci in taking:
            return None
        if not req.admin and (dev.id in self.state.dedicated or taking):
            return None
        if dev.consumes and not features.partitionable_devices:
            return None
        counted = False
        if dev.consumes and not (
            multi and (dev.id in self.state.capacity or dev.id in self.allocating_cap)
        ):
            if not self._consume(dev):
                return None
            counted = True
        if features.device_taints and dev.taints and blocking_taint(dev.taints, req.tolerations):
            if counted:
                self._release(dev)
            return None
        added: list[Constraint] = []
        for con in self.constraints[ci]:
            try:
                ok = con.add(req.base, req.sub, dev)
            except ValueError as exc:
                raise AllocationError(str(exc)) from None
            if not ok:
                for a in added:
                    a.remove(req.base, req.sub, dev)
                if counted:
                    self._release(dev)
                if must:
                    raise AllocationError(
                        f"claim {self.refs[ci]}, request {req.name}: cannot add device "
                        f"{device_id_str(dev.id)} because a claim constraint would not be "
                        "satisfied"
                    )
                return None
            added.append(con)
        consumed: dict[Key, Decimal] = {}
        if features.consumable_capacity:
            fit = self._capacity(req, dev)
            if fit is None:
                for a in added:
                    a.remove(req.base, req.sub, dev)
                if counted:
                    self._release(dev)
                return None
            if multi:
                consumed = fit
        share = ""
        if multi:
            self.shares += 1
            share = str(
                uuid.uuid5(
                    _SHARE_NS,
                    f"{self.refs[ci]}/{req.result_name}/{device_id_str(dev.id)}/{self.shares}",
                )
            )
            into = self.allocating_cap.setdefault(dev.id, {})
            for k, v in consumed.items():
                into[k] = into.get(k, Decimal(0)) + v
        else:
            self.taking.setdefault(dev.id, set()).add(ci)
        self.results[ci].append(Taken(req, dev, share, consumed))

        def undo() -> None:
            for a in added:
                a.remove(req.base, req.sub, dev)
            if multi:
                into = self.allocating_cap[dev.id]
                for k, v in consumed.items():
                    into[k] -= v
                if all(v == 0 for v in into.values()):
                    del self.allocating_cap[dev.id]
            else:
                self.taking[dev.id].discard(ci)
            if counted:
                self._release(dev)
            self.results[ci].pop()

        return undo

    # -- the recursion ---------------------------------------------------------------------
    def run(self) -> bool:
        self.prepare()
        done = self._one(0, 0, 0, 0, False, 0)
        if done is True:
            return True
        for pool in self.pools:
            if pool.invalid:
                raise NodeAllocationError("invalid resource pools were encountered")
        return False

    def _one(self, c: int, r: int, s: int, d: int, sub: bool, start: int) -> bool | int:
        if c >= len(self.claims):
            return True
        slots = self.slots[c]
        if r >= len(slots):
            got = self._one(c + 1, 0, 0, 0, False, 0)
            return False if got == EXCEEDED else got
        slot = slots[r]
        if slot.subrequests and not sub:
            all_exceeded = True
            for si in range(len(slot.alternatives)):
                got = self._one(c, r, si, 0, True, 0)
                if got == EXCEEDED:
                    continue
                all_exceeded = False
                if got is True:
                    slot.chosen = si
                    return True
            return EXCEEDED if all_exceeded else False
        req = slot.alternatives[s]
        if req.all_mode:
            if not req.all_devices:
                return False
            if d >= len(req.all_devices):
                return self._one(c, r + 1, 0, 0, False, 0)
            if len(self.results[c]) + len(req.all_devices) - d > MAX_RESULTS:
                return EXCEEDED
            undo = self._take(c, req, req.all_devices[d], must=True)
            if undo is None:
                return False
            got = self._one(c, r, s, d + 1, sub, 0)
            if got is not True:
                undo()
            return got
        if d >= req.count:
            return self._one(c, r + 1, 0, 0, False, 0)
        if len(self.results[c]) + req.count - d > MAX_RESULTS:
            return EXCEEDED
        devices = self.devices
        if d == 0 and req.count > 1 and not self._enough(c, req, req.count):
            return False  # fewer matching free devices than wanted: no combination can work
        for i in range(start, len(devices)):
            dev = devices[i]
            if not self._free(c, req, dev) or not self._selectable(c, req, dev):
                continue
            undo = self._take(c, req, dev, must=False)
            if undo is None:
                continue
            # a shareable device may serve the same request again, others only once
            nxt = i if (dev.multi and self.features.consumable_capacity) else i + 1
            got = self._one(c, r, s, d + 1, sub, nxt)
            if got is True:
                return True
            undo()
            if got == EXCEEDED:
                return EXCEEDED
        return False

    def _enough(self, c: int, req: Request, want: int) -> bool:
        n = 0
        for dev in self.devices:
            if self._free(c, req, dev) and self._selectable(c, req, dev):
                if dev.multi and self.features.consumable_capacity:
                    return True  # may be taken more than once: no bound from counting
                n += 1
                if n >= want:
                    return True
        return False
