"""The structured-parameters allocator of kube-scheduler (``resource.k8s.io/v1``, Kubernetes
1.32-1.37, each feature behind its gate as the release sets it: :mod:`kgpu.releases`), as one
pure function of a snapshot.

Given the node being filtered, DeviceClasses, ResourceSlices (DeviceTaintRules merged), the
claims already allocated and the claims of one pod, :meth:`Allocator.allocate` returns one
``AllocationResult`` per claim, None when they cannot all be satisfied on that node
(kube-scheduler: "cannot allocate all claims"; :meth:`Allocator.explain` says why per request),
or raises :class:`AllocationError` when something is broken: a CEL runtime error, a claim needing
more than 32 devices, an ``All`` request meeting an incomplete or invalid pool, invalid pools
when nothing else fits (:class:`NodeAllocationError`).

The work is split by concern: :mod:`~kgpu.dra.pools` (which pools a node sees),
:mod:`~kgpu.dra.requests` (claims resolved against classes), :mod:`~kgpu.dra.search` (the
backtracking search), :mod:`~kgpu.dra.constraints`, :mod:`~kgpu.dra.capacity` (consumable
capacity), :mod:`~kgpu.dra.taints` (taints, tolerations, DeviceTaintRules),
:mod:`~kgpu.dra.results` (AllocationResult, prioritized-list score), :mod:`~kgpu.dra.extended`
(extended resources backed by DRA), :mod:`~kgpu.dra.features` (feature gates).

Reuse: an :class:`Allocator` keeps what does not change between pods (each node's pools, per
device and request the selector results, per claim its resolved requests) and is told about
allocations as they happen (:meth:`Allocator.claim_changed`), so the scheduler filtering many
nodes for many pods pays for a node's devices once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from kgpu.dra.diagnose import CANNOT_ALLOCATE, explain
from kgpu.dra.features import DEFAULT, Features
from kgpu.dra.nodeselect import NodeRef, node_selector_matches
from kgpu.dra.pools import DeviceID, Pool, PoolID, SliceIndex, device_id_str
from kgpu.dra.requests import (
    MAX_RESULTS,
    AllocationError,
    NodeAllocationError,
    Slot,
    claim_ref,
    prepare,
)
from kgpu.dra.results import configs, device_results, node_selector, prioritized_list_score
from kgpu.dra.search import Search
from kgpu.dra.state import AllocatedState, allocated_devices, result_id, results_of
from kgpu.dra.taints import apply_taint_rules

Obj = dict[str, Any]

__all__ = [
    "CANNOT_ALLOCATE",
    "MAX_RESULTS",
    "AllocatedState",
    "AllocationError",
    "Allocator",
    "DeviceID",
    "NodeAllocationError",
    "NodeRef",
    "SliceIndex",
    "allocate",
    "allocated_devices",
    "claim_ref",
    "device_id_str",
    "node_selector_matches",
    "prioritized_list_score",
]


class Allocator:
    """Allocates claims against one snapshot of classes, slices and devices in use.

    ``classes`` maps class name to DeviceClass; ``allocated`` is what other claims hold (an
    :class:`AllocatedState`, or a set of device ids held exclusively).
    """

    def __init__(
        self,
        classes: Mapping[str, Obj],
        index: SliceIndex,
        allocated: AllocatedState | set[DeviceID] | None = None,
        features: Features | None = None,
    ) -> None:
        self.classes = classes
        self.index = index
        self.features = features or index.features
        if isinstance(allocated, AllocatedState):
            self.state = allocated
        else:
            self.state = AllocatedState(dedicated=set(allocated or ()))
        self._prepared: dict[int, tuple[Obj, list[Slot]]] = {}
        self._counters: dict[PoolID, dict[str, dict[str, Decimal]]] = {}
        self._pool_used: dict[PoolID, int] = {}
        self._free_shape: dict[Any, tuple[tuple[PoolID, int], ...] | None] = {}
        self._count_used()

    # -- devices in use --------------------------------------------------------------------
    @property
    def allocated(self) -> set[DeviceID]:
        """Devices held exclusively by other claims."""
        return self.state.dedicated

    @allocated.setter
    def allocated(self, devices: set[DeviceID]) -> None:
        self.state.dedicated = devices
        self._counters.clear()
        self._count_used()

    def _count_used(self) -> None:
        used: dict[PoolID, int] = {}
        for dev_id in self.state.dedicated:
            if dev_id in self.index.by_id:
                key = (dev_id[0], dev_id[1])
                used[key] = used.get(key, 0) + 1
        self._pool_used = used

    def claim_changed(self, before: Obj | None, after: Obj | None) -> set[DeviceID]:
        """Account for a claim whose allocation changed (None: it did not exist); returns
        the device ids whose availability changed."""
        consumable = self.features.consumable_capacity
        state = self.state
        ids = {result_id(r) for c in (before, after) if c for r in results_of(c)}
        was = {i: (i in state.dedicated, dict(state.capacity.get(i) or {})) for i in ids}
        if before:
            state.remove(before, consumable)
        if after:
            state.add(after, consumable)
        changed = {i for i in ids if was[i] != (i in state.dedicated, state.capacity.get(i) or {})}
        for dev_id in changed:
            if dev_id in self.index.by_id and was[dev_id][0] != (dev_id in state.dedicated):
                key = (dev_id[0], dev_id[1])
                self._pool_used[key] = self._pool_used.get(key, 0) + (
                    1 if dev_id in state.dedicated else -1
                )
        if changed:
            self._counters.clear()
        return changed

    def free_devices(self, node: Any) -> int:
        """Devices the node can reach that no claim holds exclusively (a bin-packing score)."""
        ref = NodeRef.of(node)
        key = self.index.key(ref)
        shape = self._free_shape.get(key, ())
        if shape == ():
            pools = [p for p in self.index.pools_for(ref) if p.usable]
            if any(d.per_device for p in pools for d in p.devices):
                shape = None  # per-device node selection: count device by device
            else:
                shape = tuple((p.key, len(p.devices)) for p in pools)
            if len(self._free_shape) > 100_000:
                self._free_shape.clear()
            self._free_shape[key] = shape
        if shape is None:
            in_use = self.state.dedicated
            return sum(1 for d in self.index.usable_devices(ref) if d.id not in in_use)
        used = self._pool_used
        return sum(n - used.get(pool, 0) for pool, n in shape)

    def available_counters(self, pool: Pool) -> dict[str, dict[str, Decimal]]:
        """The pool's counter sets minus what allocated devices of the pool consume, on this
        node or any other (computed once per change of what is allocated)."""
        avail = self._counters.get(pool.key)
        if avail is None:
            avail = {name: dict(values) for name, values in pool.counters.items()}
            in_use = self.state.dedicated
            for dev in pool.all_devices():
                if dev.consumes and dev.id in in_use:
                    for cset, counters in dev.consumes:
                        into = avail.get(cset)
                        if into is None:
                            continue
                        for name, value in counters:
                            if name in into:
                                into[name] -= value
            self._counters[pool.key] = avail
        return avail

    # -- claims ----------------------------------------------------------------------------
    def prepared(self, claim: Obj) -> list[Slot]:
        """The claim's requests, resolved once per claim object (the scheduler filters many
        nodes for one pod); per-search state is reset on reuse."""
        hit = self._prepared.get(id(claim))
        if hit is not None and hit[0] is claim:
            for slot in hit[1]:
                slot.chosen = 0
                for req in slot.alternatives:
                    req.all_devices = []
            return hit[1]
        slots = prepare(claim, self.classes, self.features)
        if len(self._prepared) > 10_000:
            self._prepared.clear()
        self._prepared[id(claim)] = (claim, slots)
        return slots

    def _search(self, node: Any, claims: Sequence[Obj]) -> tuple[Search, bool]:
        search = Search(self, NodeRef.of(node), list(claims))
        return search, search.run()

    def allocate(self, node: Any, claims: Sequence[Obj]) -> list[Obj] | None:
        """One AllocationResult per claim, or None when they do not all fit on ``node``."""
        search, done = self._search(node, claims)
        return self._results(search) if done else None

    def allocate_explained(self, node: Any, claims: Sequence[Obj]) -> tuple[list[Obj] | None, str]:
        """(results, "") or (None, why not, per claim and request)."""
        search, done = self._search(node, claims)
        if done:
            return self._results(search), ""
        return None, explain(search)

    def _results(self, search: Search) -> list[Obj]:
        out = []
        binding = self.features.binding
        for ci, claim in enumerate(search.claims):
            devices: Obj = {"results": device_results(search.results[ci], binding)}
            config = configs(claim, search.slots[ci])
            if config:
                devices["config"] = config
            result: Obj = {"devices": devices}
            selector = node_selector(search.results[ci], search.node.name)
            if selector is not None:
                result["nodeSelector"] = selector
            out.append(result)
        return out


def build(
    *,
    classes: Iterable[Obj],
    slices: Iterable[Obj],
    allocated: Iterable[Obj] = (),
    features: Features = DEFAULT,
    taint_rules: Sequence[Obj] = (),
) -> Allocator:
    """An allocator for one snapshot of v1 objects (taint rules merged when their gate is on)."""
    by_name = {str((c.get("metadata") or {}).get("name", "")): c for c in classes}
    slice_list = list(slices)
    if features.device_taint_rules and taint_rules:
        slice_list = apply_taint_rules(slice_list, taint_rules)
    state = AllocatedState.of(allocated, features.consumable_capacity)
    return Allocator(by_name, SliceIndex(slice_list, features), state, features)


def allocate(
    node: Any,
    claims: Sequence[Obj],
    *,
    classes: Iterable[Obj],
    slices: Iterable[Obj],
    allocated: Iterable[Obj] = (),
    features: Features = DEFAULT,
    taint_rules: Sequence[Obj] = (),
) -> list[Obj] | None:
    """One-shot allocation: results per claim, None if they do not fit,
    :class:`AllocationError` if they cannot be allocated anywhere."""
    alloc = build(
        classes=classes,
        slices=slices,
        allocated=allocated,
        features=features,
        taint_rules=taint_rules,
    )
    return alloc.allocate(node, claims)
