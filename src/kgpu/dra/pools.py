"""The pool index: ResourceSlices grouped into pools, and each node's view of them.

kube-scheduler gathers, for the node being filtered, the pools with devices that node can reach
(k8s.io/dynamic-resource-allocation ``GatherPools``):

* a slice is relevant when its ``nodeName``, ``allNodes`` or ``nodeSelector`` reaches the node,
  when it has ``perDeviceNodeSelection`` and one of its devices reaches it, or when it has
  ``sharedCounters`` (counter slices are always relevant); a slice with none of these is some
  future extension and is skipped. With DRAPartitionableDevices off, slices using
  ``perDeviceNodeSelection`` or ``sharedCounters`` are skipped;
* of a pool only the newest generation among the relevant slices counts. The pool is complete
  when that generation has ``resourceSliceCount`` slices; if the relevant ones are fewer, all
  slices of the pool, on every node, are counted, and a newer generation elsewhere makes the
  relevant ones obsolete (the pool is ignored);
* a pool is invalid when device names repeat among its device slices, when two slices define
  the same counter set, or when a device (targeting the node or not) consumes a counter set or
  counter the pool does not define;
* pools are ordered by driver and name, pools with binding conditions last, slices by name.

Everything a node's view needs is computed once per node (per node and labels when some slice
selects nodes by label) and cached, so filtering the same node for the next pod costs a lookup.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kgpu.dra.capacity import Capacity, Key, device_capacities
from kgpu.dra.cel import device_view
from kgpu.dra.features import DEFAULT, Features
from kgpu.dra.nodeselect import NodeRef, reaches
from kgpu.quantity import parse_quantity

Obj = dict[str, Any]
DeviceID = tuple[str, str, str]  # (driver, pool, device)
PoolID = tuple[str, str]  # (driver, pool)


def device_id_str(dev_id: DeviceID) -> str:
    return "/".join(dev_id)


def _counters(raw: Mapping[str, Any] | None) -> dict[str, Decimal]:
    return {
        str(k): parse_quantity(str((v or {}).get("value", "0"))) for k, v in (raw or {}).items()
    }


class Device:
    """One published device plus what the allocator caches about it."""

    __slots__ = (
        "_caps",
        "_view",
        "binding",
        "consumes",
        "id",
        "matches",
        "multi",
        "per_device",
        "raw",
        "slice",
        "taints",
    )

    def __init__(self, dev_id: DeviceID, raw: Obj, slice_rec: SliceRec) -> None:
        self.id = dev_id
        self.raw = raw
        self.slice = slice_rec
        self.consumes: tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...] = tuple(
            (str(c.get("counterSet", "")), tuple(_counters(c.get("counters")).items()))
            for c in raw.get("consumesCounters") or []
        )
        self.multi = bool(raw.get("allowMultipleAllocations"))
        self.binding = bool(raw.get("bindingConditions"))
        self.taints: tuple[Obj, ...] = tuple(raw.get("taints") or ())
        self.per_device = bool(slice_rec.spec.get("perDeviceNodeSelection"))
        self.matches: dict[Any, Any] = {}
        self._view: Obj | None = None
        self._caps: dict[Key, Capacity] | None = None

    @property
    def driver(self) -> str:
        return self.id[0]

    @property
    def view(self) -> Obj:
        """The CEL ``device`` variable (built once)."""
        if self._view is None:
            self._view = device_view(self.id[0], self.raw)
        return self._view

    def view_of(self) -> Obj:
        return self.view

    @property
    def capacities(self) -> dict[Key, Capacity]:
        if self._caps is None:
            self._caps = device_capacities(self.id[0], self.raw.get("capacity") or {})
        return self._caps

    def reaches(self, node: NodeRef) -> bool:
        """Per-device node selection; True for devices of slices that select nodes as a whole."""
        return not self.per_device or reaches(self.raw, node)

    def attribute(self, qualified: str) -> tuple[str, Any] | None:
        """A fully qualified attribute as (type, value), looked up as kube-scheduler's
        constraints do: the exact name, or the bare name when the domain is the driver's.
        :class:`ValueError` for an attribute with no value of a known type."""
        attrs = self.raw.get("attributes") or {}
        attr = attrs.get(qualified)
        if attr is None:
            domain, _, ident = qualified.partition("/")
            if domain == self.driver:
                attr = attrs.get(ident)
        if attr is None:
            return None
        for kind in ("string", "int", "bool", "version"):
            if kind in attr:
                return kind, attr[kind]
        raise ValueError("unsupported attribute value")


@dataclass(eq=False)
class SliceRec:
    """One ResourceSlice as the index keeps it."""

    name: str
    driver: str
    pool: str
    generation: int
    count: int
    spec: Obj
    devices: list[Device] = field(default_factory=list)
    counter_sets: list[tuple[str, dict[str, Decimal]]] = field(default_factory=list)

    @property
    def pool_id(self) -> PoolID:
        return (self.driver, self.pool)

    @property
    def is_counter_slice(self) -> bool:
        return bool(self.counter_sets) or bool(self.spec.get("sharedCounters"))

    @property
    def selects_by_label(self) -> bool:
        spec = self.spec
        if spec.get("nodeSelector") is not None:
            return True
        return bool(spec.get("perDeviceNodeSelection")) and any(
            d.raw.get("nodeSelector") is not None for d in self.devices
        )


def make_slice(obj: Obj) -> SliceRec:
    spec = obj.get("spec") or {}
    pool = spec.get("pool") or {}
    rec = SliceRec(
        name=str((obj.get("metadata") or {}).get("name", "")),
        driver=str(spec.get("driver", "")),
        pool=str(pool.get("name", "")),
        generation=int(pool.get("generation", 0) or 0),
        count=int(pool.get("resourceSliceCount", 1) or 1),
        spec=spec,
    )
    rec.devices = [
        Device((rec.driver, rec.pool, str(raw.get("name", ""))), raw, rec)
        for raw in spec.get("devices") or []
    ]
    rec.counter_sets = [
        (str(cs.get("name", "")), _counters(cs.get("counters")))
        for cs in spec.get("sharedCounters") or []
    ]
    return rec


@dataclass(eq=False)
class Pool:
    """The newest generation of one pool as one node sees it."""

    driver: str
    name: str
    slices: list[SliceRec]  # device slices targeting the node, by name
    others: list[SliceRec]  # device slices of the pool not targeting the node
    incomplete: bool
    invalid: str  # reason, "" when valid
    counters: dict[str, dict[str, Decimal]]
    devices: list[Device]
    binding: bool  # some device has binding conditions: searched after the others

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"

    @property
    def key(self) -> PoolID:
        return (self.driver, self.name)

    @property
    def usable(self) -> bool:
        return not (self.incomplete or self.invalid)

    def all_devices(self) -> Iterable[Device]:
        for s in (*self.slices, *self.others):
            yield from s.devices


def _relevant(rec: SliceRec, node: NodeRef, features: Features) -> bool:
    spec = rec.spec
    if rec.is_counter_slice:
        return True
    if spec.get("nodeName") or spec.get("allNodes") or spec.get("nodeSelector") is not None:
        return reaches(spec, node)
    if spec.get("perDeviceNodeSelection"):
        return any(d.reaches(node) for d in rec.devices)
    return False  # some future way of selecting nodes


def _validate(
    device_slices: Sequence[SliceRec],
    counter_slices: Sequence[SliceRec],
    other_slices: Sequence[SliceRec],
    features: Features,
) -> tuple[str, dict[str, dict[str, Decimal]]]:
    """(invalid reason or "", counter sets) of one pool, as upstream's buildPool checks it."""
    names: set[str] = set()
    for s in device_slices:
        for d in s.devices:
            if d.id[2] in names:
                return f"duplicate device name {d.id[2]}", {}
            names.add(d.id[2])
    if not features.partitionable_devices:
        return "", {}
    counters: dict[str, dict[str, Decimal]] = {}
    for s in counter_slices:
        for name, values in s.counter_sets:
            if name in counters:
                return f"duplicate counter set name {name}", {}
            counters[name] = values
    for s in (*device_slices, *counter_slices, *other_slices):
        for d in s.devices:
            for cset, used in d.consumes:
                have = counters.get(cset)
                if have is None:
                    return f"counter set {cset} not found", {}
                for counter, _ in used:
                    if counter not in have:
                        return f"counter {counter} not found in counter set {cset}", {}
    return "", counters


class SliceIndex:
    """ResourceSlices indexed by pool and node, with each node's pools assembled once.

    ``slices`` are v1 objects (DeviceTaintRules already merged, see
    :func:`kgpu.dra.taints.apply_taint_rules`).
    """

    def __init__(self, slices: Iterable[Obj], features: Features = DEFAULT) -> None:
        self.features = features
        self.by_pool: dict[PoolID, list[SliceRec]] = {}
        self.local: dict[str, list[SliceRec]] = {}  # nodeName -> slices
        self.shared: list[SliceRec] = []  # slices reaching nodes by label, allNodes, per device
        self.counter_slices: list[SliceRec] = []
        self.pool_nodes: dict[PoolID, set[str]] = {}  # node-local pools -> their nodes
        self.by_id: dict[DeviceID, Device] = {}
        self.devices = 0
        self.label_dependent = False
        for obj in slices:
            rec = make_slice(obj)
            spec = rec.spec
            # every slice counts when judging whether its pool is complete ...
            self.by_pool.setdefault(rec.pool_id, []).append(rec)
            if not features.partitionable_devices and (
                spec.get("perDeviceNodeSelection") is not None or rec.is_counter_slice
            ):
                continue  # ... but one using a disabled feature reaches no node, as upstream
            self.devices += len(rec.devices)
            for d in rec.devices:
                self.by_id.setdefault(d.id, d)
            if rec.is_counter_slice:
                self.counter_slices.append(rec)
            elif spec.get("nodeName"):
                node_name = str(spec["nodeName"])
                self.local.setdefault(node_name, []).append(rec)
                self.pool_nodes.setdefault(rec.pool_id, set()).add(node_name)
            else:
                self.shared.append(rec)
                if rec.selects_by_label:
                    self.label_dependent = True
        self._pools: dict[Any, list[Pool]] = {}
        self._usable: dict[Any, list[Device]] = {}
        self._problems: list[Pool] | None = None

    # -- per-node views --------------------------------------------------------------------
    def key(self, node: NodeRef) -> Any:
        """What a node's view depends on: its labels only when some slice selects by label."""
        return node if self.label_dependent else node.name

    def pools_for(self, node: NodeRef) -> list[Pool]:
        """The node's pools in search order (see module docstring), including incomplete and
        invalid ones (the search skips them; ``All`` requests and error reporting need them)."""
        key = self.key(node)
        cached = self._pools.get(key)
        if cached is not None:
            return cached
        relevant: dict[PoolID, list[SliceRec]] = {}
        for rec in self.local.get(node.name, ()):
            relevant.setdefault(rec.pool_id, []).append(rec)
        for rec in self.shared:
            if _relevant(rec, node, self.features):
                relevant.setdefault(rec.pool_id, []).append(rec)
        for pool_id in relevant:
            # counter slices are relevant wherever the pool has devices for this node
            relevant[pool_id].extend(r for r in self.by_pool[pool_id] if r.is_counter_slice)
        pools = [p for pid in relevant if (p := self._gather(pid, relevant[pid])) is not None]
        pools += [p for p in self._counter_only() if p.key not in relevant]
        pools.sort(key=lambda p: (p.binding, p.driver, p.name))
        if len(self._pools) > 100_000:
            self._pools.clear()
            self._usable.clear()
        self._pools[key] = pools
        return pools

    def usable_devices(self, node: NodeRef) -> list[Device]:
        """Devices of the node's complete, valid pools, in search order."""
        key = self.key(node)
        cached = self._usable.get(key)
        if cached is None:
            cached = [
                d for p in self.pools_for(node) if p.usable for d in p.devices if d.reaches(node)
            ]
            self._usable[key] = cached
        return cached

    def search_devices(self, node: NodeRef) -> list[Device]:
        """Devices of the node's complete, valid pools in search order, including devices of
        per-device slices that do not reach the node (checked after their selectors, as
        upstream does, so a broken selector fails the same way)."""
        key = ("search", self.key(node))
        cached = self._usable.get(key)
        if cached is None:
            cached = [d for p in self.pools_for(node) if p.usable for d in p.devices]
            self._usable[key] = cached
        return cached

    def _counter_only(self) -> list[Pool]:
        """Pools a node sees only through their counter slices (upstream treats counter slices
        as relevant to every node): they offer no device but count for ``All`` requests and
        for "invalid resource pools were encountered". Computed once."""
        if self._problems is None:
            seen: dict[PoolID, list[SliceRec]] = {}
            for rec in self.counter_slices:
                seen.setdefault(rec.pool_id, []).append(rec)
            self._problems = [
                p for pid, recs in seen.items() if (p := self._gather(pid, recs)) is not None
            ]
        return self._problems

    def _gather(self, pool_id: PoolID, relevant: list[SliceRec]) -> Pool | None:
        newest = max(r.generation for r in relevant)
        live = [r for r in relevant if r.generation == newest]
        count = live[0].count
        everything = live
        if len(live) != count:
            everything = []
            for r in self.by_pool[pool_id]:
                if r.generation > newest:
                    return None  # being replaced by a newer generation elsewhere: ignored
                if r.generation == newest:
                    everything.append(r)
            if len(everything) != count:
                return Pool(pool_id[0], pool_id[1], [], [], True, "", {}, [], False)
        partitionable = self.features.partitionable_devices
        counter_slices = [r for r in live if partitionable and r.is_counter_slice]
        device_slices = sorted(
            (r for r in live if not (partitionable and r.is_counter_slice)), key=lambda r: r.name
        )
        live_ids = {id(r) for r in live}
        others = [r for r in everything if id(r) not in live_ids and not r.is_counter_slice]
        invalid, counters = _validate(device_slices, counter_slices, others, self.features)
        devices = [d for s in device_slices for d in s.devices]
        return Pool(
            driver=pool_id[0],
            name=pool_id[1],
            slices=device_slices,
            others=others,
            incomplete=False,
            invalid=invalid,
            counters=counters,
            devices=devices,
            binding=any(d.raw.get("bindingConditions") is not None for d in devices),
        )
