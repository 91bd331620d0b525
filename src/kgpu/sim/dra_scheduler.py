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

Beyond the claims a pod names (each with upstream's semantics and messages):

* extended resources backed by DRA (``DeviceClass.extendedResourceName``,
  :mod:`kgpu.sim.dra_extended`): a pod asking for ``nvidia.com/gpu`` on a node that does not
  advertise it gets, per node, the claim kube-scheduler builds, allocated with its other claims
  and created at Reserve with ``status.extendedResourceClaimStatus``;
* DeviceTaintRules are merged into the slices before allocation (``DRADeviceTaintRules``);
* PreBind (:meth:`DraSchedulerPlugin.prebind`) waits for binding conditions, PostFilter
  (:meth:`DraSchedulerPlugin.post_filter`) deallocates claims whose binding failed or timed out
  (:mod:`kgpu.sim.dra_binding`); allocations get ``allocationTimestamp`` as upstream writes it;
* Score (:meth:`DraSchedulerPlugin.score`): 1.35's prioritized-list score of the node's
  allocation, the first ``firstAvailable`` alternative scoring highest.

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
from kgpu.dra.extended import (
    IN_MEMORY_NAME,
    class_for_resources,
    extended_requests,
    extended_resource_claim,
)
from kgpu.dra.features import DEFAULT, Features
from kgpu.dra.results import prioritized_list_score
from kgpu.dra.taints import apply_taint_rules
from kgpu.node.selectors import node_selector_matches
from kgpu.sim.context import time_string
from kgpu.sim.controllers.resourceclaim import recorded_claim
from kgpu.sim.dra_binding import (
    BINDING_TIMEOUT_S,
    claim_binding,
    deallocate,
    has_binding_conditions,
)
from kgpu.sim.dra_extended import defaulted, record_claim
from kgpu.sim.plugins import NodeInfo, PreBindResult
from kgpu.store import AlreadyExists, NotFound, ObjectStore, list_read_only, namespace_of

Obj = dict[str, Any]
NOT_AVAILABLE = "resourceclaim not available on the node"
STALE_EXTENDED = "cannot schedule extended resource claim"
DEALLOCATED = "deallocation of ResourceClaim completed"
DELETED = "deletion of ResourceClaim completed"
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


#: the kinds :meth:`DraSchedulerPlugin._refresh` reads
_READ_KINDS = ("ResourceSlice", "DeviceTaintRule", "DeviceClass", "ResourceClaim")


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
    # extended resource -> DeviceClass, when the pod asks for a resource a class provides
    mapping: dict[str, Obj] | None = None
    # node -> the claim for the extended resources that node does not offer itself (None:
    # the node's own allocatable covers them), and the shape key it adds
    extended: dict[str, tuple[Obj | None, str]] = field(default_factory=dict)
    stale_extended: Obj | None = None  # an extended-resource claim left by an earlier attempt
    prebound: bool = False  # PreBind wrote the claims (Unreserve then keeps allocations)


class DraSchedulerPlugin:
    """The DynamicResources scheduler plugin (see module docstring)."""

    name = "DynamicResources"

    def __init__(self, features: Features = DEFAULT) -> None:
        self.features = features
        self._index: SliceIndex | None = None
        self._slices_rev = -1
        self._rules_rev = -1
        self._mapping: dict[str, Obj] = {}
        # pod uid -> the extended-resource claim Reserve created for it
        self._extended_claims: dict[str, str] = {}
        # claim uid -> simulated clock time of its allocation (allocationTimestamp, exactly)
        self._allocated_at: dict[str, float] = {}
        self.now = 0.0  # the simulated clock, set by the scheduling cycle
        self._skipped: Obj | None = None  # the last pod PreFilter found nothing to do for
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
        self._seen_revs: tuple[int, ...] | None = None  # kind revisions _refresh last saw

    # -- cached cluster view ---------------------------------------------------------------
    @staticmethod
    def _rev(store: ObjectStore, kind: str) -> int:
        fn = getattr(store, "kind_revision", None)
        if fn is not None:
            return int(fn(RESOURCE_API, kind))
        return -2  # unknown: always refresh

    def _refresh(self, store: ObjectStore) -> Allocator:
        # called several times per pod: when no kind it reads changed since the last call,
        # answer at once (what the checks below would conclude, without repeating them)
        rev_of = getattr(store, "kind_revision", None)
        revs = (
            tuple(int(rev_of(RESOURCE_API, k)) for k in _READ_KINDS) if rev_of is not None else None
        )
        if revs is not None and revs == self._seen_revs and self._allocator is not None:
            return self._allocator
        self._seen_revs = revs
        rev = self._rev(store, "ResourceSlice")
        rules_rev = self._rev(store, "DeviceTaintRule")
        if (
            self._index is None
            or rev != self._slices_rev
            or rules_rev != self._rules_rev
            or rev == -2
        ):
            slices: list[Obj] = list_read_only(store, RESOURCE_API, "ResourceSlice")
            if self.features.device_taint_rules:
                rules = store.list(RESOURCE_API, "DeviceTaintRule")
                slices = apply_taint_rules(slices, rules) if rules else slices
            self._index = SliceIndex(slices, self.features)
            self._slices_rev, self._rules_rev = rev, rules_rev
            self._allocator = None
        rev = self._rev(store, "DeviceClass")
        if rev != self._classes_rev or rev == -2:
            self._classes = {_name(c): c for c in store.list(RESOURCE_API, "DeviceClass")}
            self._mapping = (
                class_for_resources(self._classes.values())
                if self.features.extended_resource
                else {}
            )
            self._classes_rev = rev
            self._allocator = None
        rev = self._rev(store, "ResourceClaim")
        if self._allocator is None or rev != self._claims_rev or rev == -2:
            in_use = AllocatedState.of(
                store.list(RESOURCE_API, "ResourceClaim"), self.features.consumable_capacity
            )
            self._allocator = Allocator(self._classes, self._index, in_use, self.features)
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

    def _extended_mapping(self, pod: Obj) -> dict[str, Obj] | None:
        """The mapping of the extended resources the pod asks for that a DeviceClass provides
        (None: none, or the feature is off)."""
        if not self._mapping:
            return None
        wanted = extended_requests(defaulted(pod), self._mapping)
        if not wanted:
            return None
        return {name: self._mapping[name] for name in wanted}

    def extended_resource_names(self, store: ObjectStore) -> frozenset[str]:
        """Extended resources some DeviceClass provides (NodeResourcesFit leaves them to this
        plugin on nodes that do not advertise them)."""
        self._refresh(store)
        return frozenset(self._mapping)

    def _state(self, pod: Obj, store: ObjectStore) -> _PodState | str | None:
        self._refresh(store)
        mapping = self._extended_mapping(pod)
        if not (pod.get("spec") or {}).get("resourceClaims") and mapping is None:
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
        state = _PodState(
            claims, to_allocate, shape, selectors, rev=self._rev(store, "ResourceClaim")
        )
        if mapping is not None:
            state.mapping = mapping
            stale = self._extended_claims.get(str((pod.get("metadata") or {}).get("uid", "")))
            if stale is not None:
                with contextlib.suppress(NotFound):
                    state.stale_extended = store.get(
                        RESOURCE_API, "ResourceClaim", stale, namespace_of(pod)
                    )
        return state

    def _node_claims(self, pod: Obj, state: _PodState, node: NodeInfo) -> tuple[list[Obj], str]:
        """The claims to allocate on this node and the shape key of their specs: the pod's
        unallocated claims, plus the claim for the extended resources the node does not offer
        itself."""
        if state.mapping is None:
            return state.to_allocate, state.shape
        hit = state.extended.get(node.name)
        if hit is None:
            allocatable = ((node.node or {}).get("status") or {}).get("allocatable") or {}
            claim = extended_resource_claim(defaulted(pod), state.mapping, allocatable)
            spec = json.dumps(claim["spec"], sort_keys=True) if claim is not None else ""
            hit = state.extended[node.name] = (claim, spec)
        claim, spec = hit
        if claim is None:
            return state.to_allocate, state.shape
        return [*state.to_allocate, claim], f"{state.shape}+{spec}"

    def _binding_unusable(self, claim: Obj) -> bool:
        """An allocated claim whose binding failed or timed out (Filter then reports it not
        available anywhere, and PostFilter deallocates it)."""
        if not self.features.binding or not has_binding_conditions(claim):
            return False
        uid = str((claim.get("metadata") or {}).get("uid", ""))
        return bool(claim_binding(claim, self._allocated_at.get(uid), self.now))

    # -- SchedulerPlugin -------------------------------------------------------------------
    def prefilter(self, pod: Obj, store: ObjectStore) -> str | None:
        self._last = None
        state = self._state(pod, store)
        if state is None:
            self._pods.pop(pod_key(pod), None)
            self._skipped = pod  # Filter has nothing to do for it on any node
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
            known = self._pods.get(pod_key(pod))
            if known is None:
                if pod is self._skipped or (
                    not (pod.get("spec") or {}).get("resourceClaims") and not self._mapping
                ):
                    return None
                reason = self.prefilter(pod, store)
                if reason:
                    return reason
                known = self._pods.get(pod_key(pod))
                if known is None:
                    return None
            state = known
        if state.stale_extended is not None:
            return STALE_EXTENDED
        alloc = self._allocator or self._refresh(store)
        label_dependent = alloc.index.label_dependent
        to_allocate, shape = self._node_claims(pod, state, node)
        if not to_allocate and not state.claims:
            return None  # only extended resources, which the node's device plugin provides
        verdicts = self._verdicts.setdefault(shape, {}) if to_allocate else None
        if len(self._verdicts) > 10_000:  # many distinct claim specs: start over
            self._forget()
            verdicts = self._verdicts.setdefault(shape, {}) if to_allocate else None
        binding = self.features.binding and any(
            has_binding_conditions(c) for c in state.claims if c not in state.to_allocate
        )
        fast_ok = not (state.selectors or label_dependent or state.mapping or binding)
        self._last = (pod, state, verdicts if fast_ok else None)
        labels: tuple[tuple[str, str], ...] = ()
        if label_dependent or state.selectors:
            labels = tuple(sorted(dict(node.labels).items()))
            for selector in state.selectors:
                if not node_selector_matches(selector, node.labels, node.name):
                    return NOT_AVAILABLE
        if binding and any(self._binding_unusable(c) for c in state.claims):
            return NOT_AVAILABLE
        if verdicts is None:
            state.found[node.name] = []
            return None
        key: Any = (node.name, labels) if label_dependent else node.name
        hit = verdicts.get(key)
        if hit is not None:
            return hit if isinstance(hit, str) else None
        reason = self._allocate(alloc, NodeRef(node.name, labels), to_allocate, state)
        if reason == CANNOT_ALLOCATE:  # other errors name the claim: not shared
            verdicts[key] = reason
        elif reason is None:
            found = state.found[node.name] or []
            shared = not any("shareID" in r for a in found for r in a["devices"]["results"])
            verdicts[key] = found if shared else []
        return reason

    def _kept(
        self, alloc: Allocator, pod: Obj, state: _PodState, node: NodeInfo
    ) -> list[Obj] | None:
        """Allocation results Filter kept for this claim shape on this node, if any."""
        to_allocate, shape = self._node_claims(pod, state, node)
        if not to_allocate:
            return None
        labels = tuple(sorted(dict(node.labels).items()))
        key: Any = (node.name, labels) if alloc.index.label_dependent else node.name
        hit = self._verdicts.get(shape, {}).get(key)
        return hit if isinstance(hit, list) and hit else None

    @staticmethod
    def _allocate(
        alloc: Allocator, ref: NodeRef, claims: list[Obj], state: _PodState
    ) -> str | None:
        try:
            result = alloc.allocate(ref, claims)
        except AllocationError as exc:
            return str(exc)
        if result is None:
            return CANNOT_ALLOCATE
        state.found = {ref.name: result}
        return None

    def score(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> int | None:
        """1.35's DynamicResources Score for a node Filter passed: the prioritized-list score
        of the allocation found there (None when the pod's claims have no ``firstAvailable``
        request to allocate, so the plugin does not score)."""
        state = self._pods.get(pod_key(pod))
        if state is None or not self.features.prioritized_list:
            return None
        to_allocate, _ = self._node_claims(pod, state, node)
        if not any(
            r.get("firstAvailable")
            for c in to_allocate
            for r in ((c.get("spec") or {}).get("devices") or {}).get("requests") or []
        ):
            return None
        found = state.found.get(node.name)
        if not found:
            found = self._kept(self._refresh(store), pod, state, node)
        if not found or len(found) != len(to_allocate):
            return 0
        return prioritized_list_score(to_allocate, found)

    def reserve(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> None:
        found_state = self._pods.get(pod_key(pod))
        if found_state is None:
            if not (pod.get("spec") or {}).get("resourceClaims") and not self._mapping:
                return
            reason = self.filter(pod, node, store)
            if reason:
                raise RuntimeError(reason)
            found_state = self._pods.get(pod_key(pod))
            if found_state is None:
                return
        state = found_state
        state.prebound = False
        if node.name not in state.found:
            reason = self.filter(pod, node, store)
            if reason:
                raise RuntimeError(reason)
        to_allocate, _ = self._node_claims(pod, state, node)
        found = state.found.get(node.name)
        if found is None and to_allocate:
            found = self._kept(self._refresh(store), pod, state, node)
        if found is None and to_allocate:
            reason = self._allocate(self._refresh(store), NodeRef.of(node), to_allocate, state)
            if reason:
                raise RuntimeError(reason)
            found = state.found[node.name]
        results = dict(zip((_name(c) for c in to_allocate), found or [], strict=True))
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
                status["allocation"] = self._stamped(results[_name(claim)])
                allocated_here = True
            reserved = status["reservedFor"] = list(status.get("reservedFor") or [])
            if not any(r.get("uid") == me["uid"] for r in reserved):
                reserved.append(me)
            written = self._write_claim(store, current, before)
            self._note_allocation(written, allocated_here)
            state.reserved.append((_name(claim), allocated_here))
        extended = results.get(IN_MEMORY_NAME)
        if extended is not None:
            self._create_extended(pod, state, node, extended, store)

    def _stamped(self, allocation: Obj) -> Obj:
        """The allocation as PreBind writes it: ``allocationTimestamp`` set when the binding
        gates are on (upstream stamps every allocation it writes). A copy: Filter's cached
        results are shared between pods."""
        if not self.features.binding:
            return allocation
        return {**allocation, "allocationTimestamp": time_string(self.now)}

    def _note_allocation(self, claim: Obj, allocated_here: bool) -> None:
        if allocated_here and self.features.binding:
            self._allocated_at[str(_meta(claim).get("uid", ""))] = self.now

    def _create_extended(
        self, pod: Obj, state: _PodState, node: NodeInfo, allocation: Obj, store: ObjectStore
    ) -> None:
        """Create the extended-resource claim with its allocation, reserved for the pod, and
        record it in the pod's status (upstream's bindClaim for the special claim)."""
        claim, _ = state.extended.get(node.name) or (None, "")
        if claim is None:
            raise RuntimeError(f"extended resource claim not found for node {node.name}")
        fresh = json.loads(json.dumps(claim))
        meta = fresh["metadata"]
        meta.pop("name", None)
        meta["ownerReferences"][0]["blockOwnerDeletion"] = True
        created = store.create(fresh)
        before = _held(created)
        created["status"] = {
            "allocation": self._stamped(allocation),
            "reservedFor": [consumer_ref(pod)],
        }
        written = self._write_claim(store, created, before)
        self._note_allocation(written, True)
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        self._extended_claims[uid] = _name(written)
        state.reserved.append((_name(written), True))
        record_claim(pod, written, store)

    def prebind(self, pod: Obj, node_name: str, store: ObjectStore) -> PreBindResult:
        """PreBind: wait until the binding conditions of every device allocated to the pod are
        ``True`` (:mod:`kgpu.sim.dra_binding`); an error when one failed or the timeout passed.
        The claims were written at Reserve, which the simulator does in one step with
        upstream's bindClaim."""
        state = self._pods.get(pod_key(pod))
        if state is None or not self.features.binding:
            return PreBindResult()
        state.prebound = True
        waiting = False
        for name, _ in state.reserved or [(_name(c), False) for c in state.claims]:
            try:
                claim = store.get(RESOURCE_API, "ResourceClaim", name, namespace_of(pod))
            except NotFound:
                return PreBindResult(error=f'resourceclaim "{name}" not found')
            if not has_binding_conditions(claim):
                continue
            uid = str(_meta(claim).get("uid", ""))
            verdict = claim_binding(claim, self._allocated_at.get(uid), self.now)
            if verdict:
                return PreBindResult(error=verdict)
            if verdict == "":
                waiting = True
                due = self._allocated_at.get(uid)
                if due is not None:
                    return PreBindResult(waiting=True, wake_at=due + BINDING_TIMEOUT_S)
        return PreBindResult(waiting=waiting)

    def post_filter(self, pod: Obj, store: ObjectStore) -> str | None:
        """PostFilter: when no node fits, deallocate one of the pod's claims whose binding
        failed or timed out and that no other pod uses, or delete an extended-resource claim
        left by an earlier attempt; the message kube-scheduler appends, or None."""
        state = self._pods.get(pod_key(pod))
        if state is None:
            return None
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        for claim in state.claims:
            if not self._binding_unusable(claim):
                continue
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if any(r.get("uid") != uid for r in reserved):
                continue
            current = store.get(RESOURCE_API, "ResourceClaim", _name(claim), namespace_of(pod))
            before = _held(current)
            deallocate(current)
            self._write_claim(store, current, before)
            self._pods.pop(pod_key(pod), None)
            return DEALLOCATED
        if state.stale_extended is not None:
            with contextlib.suppress(NotFound):
                store.delete(
                    RESOURCE_API, "ResourceClaim", _name(state.stale_extended), namespace_of(pod)
                )
            self._extended_claims.pop(uid, None)
            self._claims_rev = -1  # the allocator re-reads what is in use
            self._seen_revs = None
            self._pods.pop(pod_key(pod), None)
            return DELETED
        return None

    def unreserve(self, pod: Obj, node: NodeInfo, store: ObjectStore) -> None:
        state = self._pods.get(pod_key(pod))
        if state is None:
            return
        me = consumer_ref(pod)
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        extended = self._extended_claims.get(uid)
        for name, allocated_here in state.reserved:
            try:
                current = store.get(RESOURCE_API, "ResourceClaim", name, namespace_of(pod))
            except NotFound:
                continue
            if name == extended:  # upstream deletes the special claim it created
                with contextlib.suppress(NotFound):
                    store.delete(RESOURCE_API, "ResourceClaim", name, namespace_of(pod))
                self._write_deleted(store, current)
                del self._extended_claims[uid]
                continue
            before = _held(current)
            # after PreBind wrote them, upstream's Unreserve only drops the reservation
            _drop_consumer(current, me["uid"], deallocate=allocated_here and not state.prebound)
            if not current["status"]:
                del current["status"]
            self._write_claim(store, current, before)
        if extended is not None and uid in self._extended_claims:
            del self._extended_claims[uid]
        if "extendedResourceClaimStatus" in (pod.get("status") or {}):
            del pod["status"]["extendedResourceClaimStatus"]
        state.reserved = []
        state.found = {}
        state.prebound = False
        self._pods.pop(pod_key(pod), None)

    def _write_deleted(self, store: ObjectStore, claim: Obj) -> None:
        """A claim was deleted: its devices are free again."""
        alloc = self._refresh(store)
        self._touch(alloc.claim_changed(_held(claim), None))
        self._claims_rev = self._rev(store, "ResourceClaim")

    def release(self, pod: Obj, store: ObjectStore) -> None:
        """The pod is gone: drop it from its claims' consumers and deallocate the claims
        nobody uses any more."""
        self._pods.pop(pod_key(pod), None)
        self._last = None
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        names = (
            self._claim_names(pod, store)[0]
            if (pod.get("spec") or {}).get("resourceClaims")
            else []
        )
        extended = self._extended_claims.pop(uid, None)
        if extended is not None:
            names.append(extended)
        if not names:
            return
        me = consumer_ref(pod)
        for name in names:
            try:
                current = store.get(RESOURCE_API, "ResourceClaim", name, namespace_of(pod))
            except NotFound:
                continue
            self._allocated_at.pop(str(_meta(current).get("uid", "")), None)
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
