"""kube-scheduler's DynamicResources plugin for the simulated cluster.

For each pod with ``spec.resourceClaims`` it does what kube-scheduler does:

* PreFilter: resolve the pod's claims: a ``resourceClaimName``, or for a template the claim the
  resourceclaim controller (:mod:`kgpu.sim.controllers.resourceclaim`) made and recorded in
  ``status.resourceClaimStatuses`` (``ResourceClaim not created yet`` until it has). A missing
  or deleted claim makes the pod unschedulable.
* Filter: claims already allocated must be reachable from the node (their
  ``allocation.nodeSelector``); the others are allocated together by
  :class:`kgpu.dra.allocator.Allocator`. Failure reasons are kube-scheduler's: "cannot allocate
  all claims", "resourceclaim not available on the node", or the allocator's error (a CEL runtime
  error naming the class or claim).
* Reserve: write ``status.allocation`` and add the pod to ``status.reservedFor``; Unreserve undoes
  exactly that. Release (the pod is gone) removes the pod from ``reservedFor`` and deallocates a
  claim once no consumer is left (the resourceclaim controller then deletes the claims it
  generated for the pod).

The allocator's view (slices indexed by node, classes, devices in use) is cached and refreshed
only when the store reports a write to that kind (``MemoryStore.kind_revision``), so scheduling
10,000 pods on 5,000 nodes does not re-read every slice per pod.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from kgpu.dra.allocator import (
    CANNOT_ALLOCATE,
    AllocatedState,
    AllocationError,
    Allocator,
    DeviceID,
    NodeRef,
    SliceIndex,
)
from kgpu.dra.api import RESOURCE_API
from kgpu.node.selectors import node_selector_matches
from kgpu.sim.controllers.resourceclaim import recorded_claim
from kgpu.sim.plugins import NodeInfo
from kgpu.store import AlreadyExists, NotFound, ObjectStore, namespace_of

Obj = dict[str, Any]
NOT_AVAILABLE = "resourceclaim not available on the node"
#: Filter's cached answer: why the node does not fit, or the allocation results when it does
Verdict = str | list[Obj]


def _meta(obj: Obj) -> Obj:
    meta: Obj = obj.setdefault("metadata", {})
    return meta


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def pod_key(pod: Obj) -> tuple[str, str]:
    return (namespace_of(pod), _name(pod))


def consumer_ref(pod: Obj) -> Obj:
    """The pod as a ResourceClaimConsumerReference."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid") or f"00000000-0000-4000-8000-{abs(hash(pod_key(pod))) % 16**12:012x}"
    return {"resource": "pods", "name": str(meta.get("name", "")), "uid": str(uid)}


@dataclass
class _PodState:
    """What PreFilter found for one pod, reused by Filter and Reserve."""

    claims: list[Obj]  # every claim of the pod, current store content
    to_allocate: list[Obj]
    shape: str = ""  # what feasibility depends on besides the node: the claims' specs
    selectors: list[Obj] = field(default_factory=list)  # nodeSelectors of allocated claims
    # node -> allocations; None when only feasibility is known (from the cache)
    found: dict[str, list[Obj] | None] = field(default_factory=dict)
    reserved: list[tuple[str, bool]] = field(default_factory=list)  # (claim name, allocated here)
    rev: int = -2  # the store's ResourceClaim revision when ``claims`` were read


class DraSchedulerPlugin:
    """The DynamicResources scheduler plugin (see module docstring)."""

    name = "DynamicResources"

    def __init__(self) -> None:
        self._index: SliceIndex | None = None
        self._slices_rev = -1
        self._classes: dict[str, Obj] = {}
        self._classes_rev = -1
        self._claims_rev = -1
        self._allocator: Allocator | None = None
        self._pods: dict[tuple[str, str], _PodState] = {}
        # Filter's answer per claim shape and node: why not, or the allocation results when the
        # node fits (kept for Reserve; [] when they name the claim), dropped for a node when a
        # device it can reach is allocated or freed, and for all nodes when the view is rebuilt.
        self._verdicts: dict[str, dict[Any, Verdict]] = {}
        self._free: dict[str, int] = {}  # free devices per node, dropped the same way
        # the pod Filter saw last, its state, and its verdicts when Filter may answer from
        # them without looking at the node's labels
        self._last: tuple[Obj, _PodState, dict[Any, Verdict] | None] | None = None

    # -- cached cluster view ---------------------------------------------------------------
    @staticmethod
    def _rev(store: ObjectStore, kind: str) -> int:
        fn = getattr(store, "kind_revision", None)
        if fn is not None:
            return int(fn(RESOURCE_API, kind))
        return -2  # unknown: always refresh

    def _refresh(self, store: ObjectStore) -> Allocator:
        rev = self._rev(store, "ResourceSlice")
        if self._index is None or rev != self._slices_rev or rev == -2:
            self._index = SliceIndex(store.list(RESOURCE_API, "ResourceSlice"))
            self._slices_rev = rev
            self._allocator = None
        rev = self._rev(store, "DeviceClass")
        if rev != self._classes_rev or rev == -2:
            self._classes = {_name(c): c for c in store.list(RESOURCE_API, "DeviceClass")}
            self._classes_rev = rev
            self._allocator = None
        rev = self._rev(store, "ResourceClaim")
        if self._allocator is None or rev != self._claims_rev or rev == -2:
            in_use = AllocatedState.of(store.list(RESOURCE_API, "ResourceClaim"))
            self._allocator = Allocator(self._classes, self._index, in_use)
            self._claims_rev = rev
            self._forget()
        return self._allocator

    def sync(self, store: ObjectStore) -> None:
        """Read slices, classes and claims now (kube-scheduler's informers sync before its
        first scheduling cycle); otherwise the first PreFilter does it."""
        self._refresh(store)

    def _forget(self) -> None:
        """Every cached verdict and free count is stale."""
        self._verdicts = {}
        self._free = {}
        self._last = None

    def free_devices(self, node: NodeInfo | NodeRef) -> int:
        """Devices the node can reach that no claim holds (for a bin-packing score)."""
        free = self._free.get(node.name)
        if free is not None:
            return free
        alloc = self._allocator
        if alloc is None:
            return 0
        if alloc.index.label_dependent:
            return alloc.free_devices(NodeRef.of(node))
        free = self._free[node.name] = alloc.free_devices(NodeRef(node.name))
        return free

    def _touch(self, devices: set[DeviceID]) -> None:
        """Devices changed hands: verdicts and free counts of the nodes reaching them are
        stale."""
        index = self._index
        if not devices:
            return
        if index is None or index.label_dependent:
            self._forget()
            return
        for driver, pool, _ in devices:
            nodes = index.pool_nodes.get((driver, pool))
            if not nodes:  # a pool reaching nodes by label or all nodes
                self._forget()
                return
            for n in nodes:
                self._free.pop(n, None)
                for verdicts in self._verdicts.values():
                    verdicts.pop(n, None)

    def _write_claim(self, store: ObjectStore, claim: Obj, old: Obj) -> Obj:
        """Update a claim (``old``: its allocation before, see :func:`_held`) and keep the
        allocator's devices in use in step without re-listing."""
        alloc = self._refresh(store)
        _meta(claim).pop("resourceVersion", None)
        written = store.update(claim)
        self._touch(alloc.claim_changed(old, written))
        self._claims_rev = self._rev(store, "ResourceClaim")
        return written

    # -- claims of a pod -------------------------------------------------------------------
    @staticmethod
    def _claim_names(pod: Obj, store: ObjectStore) -> tuple[list[str], str | None]:
        """Names of the pod's claims and, when a template's claim is not made yet, the reason
        the pod is unschedulable. The scheduler's copy of the pod may predate the status that
        records a claim: the stored pod's status is read then."""
        names: list[str] = []
        missing: str | None = None
        stored: Obj | None = None
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = recorded_claim(pod, entry)
            if name is None and entry.get("resourceClaimTemplateName"):
                if stored is None:
                    try:
                        stored = store.get("v1", "Pod", _name(pod), namespace_of(pod))
                    except NotFound:
                        stored = {}
                uid = (pod.get("metadata") or {}).get("uid")
                if (stored.get("metadata") or {}).get("uid") == uid:
                    name = recorded_claim(stored, entry)
                if name is None:
                    missing = missing or (
                        f'pod "{namespace_of(pod)}/{_name(pod)}": ResourceClaim not created yet'
                    )
            if name is not None:
                names.append(name)
        return names, missing

    def _state(self, pod: Obj, store: ObjectStore) -> _PodState | str | None:
        if not (pod.get("spec") or {}).get("resourceClaims"):
            return None
        names, missing = self._claim_names(pod, store)
        if missing:
            return missing
        claims = []
        for name in names:
            try:
                claim = store.get(RESOURCE_API, "ResourceClaim", name, namespace_of(pod))
            except NotFound:
                return f'resourceclaim "{name}" not found'
            if (claim.get("metadata") or {}).get("deletionTimestamp"):
                return f'resourceclaim "{name}" is being deleted'
            claims.append(claim)
        to_allocate = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        shape = json.dumps([c.get("spec") for c in to_allocate], sort_keys=True)
        selectors = [
            sel
            for c in claims
            if (sel := ((c.get("status") or {}).get("allocation") or {}).get("nodeSelector"))
        ]
        return _PodState(
            claims, to_allocate, shape, selectors, rev=self._rev(store, "ResourceClaim")
        )

    # -- SchedulerPlugin -------------------------------------------------------------------
    def prefilter(self, pod: Obj, store: ObjectStore) -> str | None:
        self._last = None
        state = self._state(pod, store)
        if state is None:
            self._pods.pop(pod_key(pod), None)
            return None
        if isinstance(state, str):
            return state
        self._refresh(store)
        self._pods[pod_key(pod)] = state
        return None

    def filter(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> str | None:
        last = self._last
        if last is not None and last[0] is pod:  # the same pod against the next node
            fast = last[2]
            if fast is not None:
                hit = fast.get(node.name)
                if hit is not None:
                    return hit if hit.__class__ is str else None
            state = last[1]
        else:
            if not (pod.get("spec") or {}).get("resourceClaims"):
                return None
            known = self._pods.get(pod_key(pod))
            if known is None:
                reason = self.prefilter(pod, store)
                if reason:
                    return reason
                known = self._pods.get(pod_key(pod))
                if known is None:
                    return None
            state = known
        alloc = self._allocator or self._refresh(store)
        label_dependent = alloc.index.label_dependent
        verdicts = self._verdicts.setdefault(state.shape, {}) if state.to_allocate else None
        if len(self._verdicts) > 10_000:  # many distinct claim specs: start over
            self._forget()
            verdicts = self._verdicts.setdefault(state.shape, {}) if state.to_allocate else None
        self._last = (pod, state, None if state.selectors or label_dependent else verdicts)
        labels: tuple[tuple[str, str], ...] = ()
        if label_dependent or state.selectors:
            labels = tuple(sorted(dict(node.labels).items()))
            for selector in state.selectors:
                if not node_selector_matches(selector, node.labels, node.name):
                    return NOT_AVAILABLE
        if verdicts is None:
            state.found[node.name] = []
            return None
        key: Any = (node.name, labels) if label_dependent else node.name
        hit = verdicts.get(key)
        if hit is not None:
            return hit if isinstance(hit, str) else None
        reason = self._allocate(alloc, NodeRef(node.name, labels), state)
        if reason == CANNOT_ALLOCATE:  # other errors name the claim: not shared
            verdicts[key] = reason
        elif reason is None:
            found = state.found[node.name] or []
            shared = not any("shareID" in r for a in found for r in a["devices"]["results"])
            verdicts[key] = found if shared else []
        return reason

    def _kept(self, alloc: Allocator, state: _PodState, node: NodeInfo) -> list[Obj] | None:
        """Allocation results Filter kept for this claim shape on this node, if any."""
        if not state.to_allocate:
            return None
        labels = tuple(sorted(dict(node.labels).items()))
        key: Any = (node.name, labels) if alloc.index.label_dependent else node.name
        hit = self._verdicts.get(state.shape, {}).get(key)
        return hit if isinstance(hit, list) and hit else None

    @staticmethod
    def _allocate(alloc: Allocator, ref: NodeRef, state: _PodState) -> str | None:
        try:
            result = alloc.allocate(ref, state.to_allocate)
        except AllocationError as exc:
            return str(exc)
        if result is None:
            return CANNOT_ALLOCATE
        state.found = {ref.name: result}
        return None

    def reserve(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> None:
        found_state = self._pods.get(pod_key(pod))
        if found_state is None:
            if not (pod.get("spec") or {}).get("resourceClaims"):
                return
            reason = self.filter(pod, node, store)
            if reason:
                raise RuntimeError(reason)
            found_state = self._pods[pod_key(pod)]
        state = found_state
        if node.name not in state.found:
            reason = self.filter(pod, node, store)
            if reason:
                raise RuntimeError(reason)
        found = state.found.get(node.name)
        if found is None and state.to_allocate:
            found = self._kept(self._refresh(store), state, node)
        if found is None and state.to_allocate:
            reason = self._allocate(self._refresh(store), NodeRef.of(node), state)
            if reason:
                raise RuntimeError(reason)
            found = state.found[node.name]
        results = dict(zip((_name(c) for c in state.to_allocate), found or [], strict=True))
        me = consumer_ref(pod)
        state.reserved = []
        for claim in state.claims:
            if state.rev == -2 or state.rev != self._rev(store, "ResourceClaim"):
                current = store.get(
                    RESOURCE_API, "ResourceClaim", _name(claim), namespace_of(claim)
                )
            else:  # no claim was written since PreFilter read this one
                current = {**claim, "metadata": dict(_meta(claim))}
            before = _held(current)
            status = current["status"] = dict(current.get("status") or {})
            allocated_here = False
            if not status.get("allocation"):
                if _name(claim) not in results:
                    raise RuntimeError(CANNOT_ALLOCATE)
                status["allocation"] = results[_name(claim)]
                allocated_here = True
            reserved = status["reservedFor"] = list(status.get("reservedFor") or [])
            if not any(r.get("uid") == me["uid"] for r in reserved):
                reserved.append(me)
            self._write_claim(store, current, before)
            state.reserved.append((_name(claim), allocated_here))

    def unreserve(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> None:
        state = self._pods.get(pod_key(pod))
        if state is None:
            return
        me = consumer_ref(pod)
        for name, allocated_here in state.reserved:
            try:
                current = store.get(RESOURCE_API, "ResourceClaim", name, namespace_of(pod))
            except NotFound:
                continue
            before = _held(current)
            _drop_consumer(current, me["uid"], deallocate=allocated_here)
            self._write_claim(store, current, before)
        state.reserved = []
        state.found = {}

    def release(self, pod: Obj, store: ObjectStore) -> None:
        """The pod is gone: drop it from its claims' consumers and deallocate the claims
        nobody uses any more."""
        self._pods.pop(pod_key(pod), None)
        self._last = None
        if not (pod.get("spec") or {}).get("resourceClaims"):
            return
        me = consumer_ref(pod)
        for name in self._claim_names(pod, store)[0]:
            try:
                current = store.get(RESOURCE_API, "ResourceClaim", name, namespace_of(pod))
            except NotFound:
                continue
            before = _held(current)
            _drop_consumer(current, me["uid"], deallocate=True)
            if not current["status"]:
                del current["status"]
            self._write_claim(store, current, before)


def _held(claim: Obj) -> Obj:
    """What a claim holds, kept before it is changed: the allocator is told the difference."""
    return {"status": {"allocation": (claim.get("status") or {}).get("allocation")}}


def _drop_consumer(claim: Obj, uid: str, *, deallocate: bool) -> bool:
    """Remove pod ``uid`` from the claim's ``status.reservedFor``. When nobody is left, the
    claim's allocation goes too if ``deallocate`` (the scheduler made it for this pod, or the
    pod is gone); True when nobody reserves the claim any more."""
    status = claim.setdefault("status", {})
    status["reservedFor"] = [r for r in status.get("reservedFor") or [] if r.get("uid") != uid]
    if status["reservedFor"]:
        return False
    del status["reservedFor"]
    if deallocate:
        status.pop("allocation", None)
    return True


def ensure_classes(store: ObjectStore, classes: list[Obj]) -> None:
    """Create DeviceClasses that do not exist yet (what the driver's Helm chart installs)."""
    for cls in classes:
        with contextlib.suppress(AlreadyExists):
            store.create(cls)
