"""The structured-parameters allocator, with kube-scheduler's semantics (resource.k8s.io/v1).

Given the node being filtered, DeviceClasses, ResourceSlices, the devices other claims already
hold and the claims of one pod, :meth:`Allocator.allocate` returns one ``AllocationResult`` per
claim (``devices.results``, ``devices.config``, ``nodeSelector``), None when the claims cannot
all be satisfied on that node (kube-scheduler then reports "cannot allocate all claims"), or
raises :class:`AllocationError` when a claim or class is broken (a CEL runtime error, a missing
class...), worded as kube-scheduler words it.

What it follows from kube-scheduler's allocator (k8s.io/dynamic-resource-allocation/structured):

* pools: slices reach a node by ``nodeName``, ``nodeSelector``, ``allNodes`` or per device
  (``perDeviceNodeSelection``); only the newest generation of a pool counts; a pool whose
  newest generation has fewer slices than ``resourceSliceCount`` is incomplete and skipped
  (an ``All`` request fails on it with an error); duplicate device names make a pool invalid;
* requests: ``exactly`` with ``ExactCount``/``count`` or ``All``, ``firstAvailable``
  alternatives tried in order (results name ``<request>/<subrequest>``), ``adminAccess``
  (may use devices in use, never one device twice in a claim); class selectors run before the
  request's; devices are tried in pool/slice order and the first full solution wins;
* ``matchAttribute`` constraints across the claim's requests; shared counters
  (``consumesCounters``) so partitions of one GPU never overlap;
* at most 32 results per claim; the claims of one pod are allocated together.

Searching smartly: selector results are cached per device and, across devices, per (expression,
the attributes it can read) so identical devices share one CEL evaluation; slices are indexed by
node, pools are assembled once per node, and within one request devices are picked as
combinations, not permutations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kgpu.dra.cel import (
    CelCompileError,
    CelRuntimeError,
    Selector,
    compile_selector,
    device_view,
    parse_quantity,
)
from kgpu.errors import KgpuError
from kgpu.node.selectors import node_selector_matches
from kgpu.store import object_ref

Obj = dict[str, Any]
DeviceID = tuple[str, str, str]  # (driver, pool, device)

#: resourceapi.AllocationResultsMaxSize
MAX_RESULTS = 32
CANNOT_ALLOCATE = "cannot allocate all claims"


class AllocationError(KgpuError):
    """The claims cannot be allocated anywhere because something in them (or their classes)
    is wrong; kube-scheduler fails the Filter with this message."""


def device_id_str(dev_id: DeviceID) -> str:
    return "/".join(dev_id)


# -- nodes -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeRef:
    """What the allocator needs of a node: its name and labels."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def of(node: Any) -> NodeRef:
        """From a Node object, a ``{name, labels}`` dict, a NodeInfo or a NodeRef."""
        if isinstance(node, NodeRef):
            return node
        if isinstance(node, Mapping):
            meta = (node.get("metadata") or {}) if "metadata" in node else node
            return NodeRef(
                str(meta.get("name", "")), tuple(sorted((meta.get("labels") or {}).items()))
            )
        return NodeRef(str(node.name), tuple(sorted(dict(node.labels).items())))


def _access_matches(spec: Mapping[str, Any], node: NodeRef) -> bool:
    if spec.get("nodeName"):
        return bool(spec["nodeName"] == node.name)
    if spec.get("allNodes"):
        return True
    if spec.get("nodeSelector"):
        return node_selector_matches(spec["nodeSelector"], dict(node.labels), node.name)
    return False


# -- devices, slices, pools --------------------------------------------------------------------


@dataclass(eq=False)
class Device:
    """One published device plus the allocator's caches for it."""

    id: DeviceID
    raw: Obj
    slice_spec: Obj
    consumes: tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...]
    matches: dict[Any, Any] = field(default_factory=dict)
    _view: Obj | None = None

    @property
    def driver(self) -> str:
        return self.id[0]

    @property
    def view(self) -> Obj:
        if self._view is None:
            self._view = device_view(self.id[0], self.raw)
        return self._view

    def reaches(self, node: NodeRef) -> bool:
        """Per-device node selection (``perDeviceNodeSelection``); True for slice-level."""
        if not self.slice_spec.get("perDeviceNodeSelection"):
            return True
        return _access_matches(self.raw, node)

    def attribute(self, qualified: str) -> tuple[str, Any] | None:
        """A fully qualified attribute as (type, value), as kube-scheduler's matchAttribute
        looks it up: the exact name, or the bare name when the domain is the driver's."""
        attrs = self.raw.get("attributes") or {}
        attr = attrs.get(qualified)
        if attr is None:
            domain, _, ident = qualified.partition("/")
            if domain == self.driver:
                attr = attrs.get(ident)
        if not attr:
            return None
        for kind in ("string", "int", "bool", "version"):
            if kind in attr:
                return kind, attr[kind]
        return None


@dataclass(eq=False)
class SliceRec:
    name: str
    driver: str
    pool: str
    generation: int
    count: int
    spec: Obj
    devices: list[Device]


@dataclass(eq=False)
class Pool:
    """The newest generation of one pool as one node sees it."""

    driver: str
    name: str
    slices: list[SliceRec]
    incomplete: bool
    invalid: str  # reason, "" when valid
    devices: list[Device]
    counters: dict[str, dict[str, Decimal]]

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"


def _make_slice(obj: Obj) -> SliceRec:
    spec = obj.get("spec") or {}
    pool = spec.get("pool") or {}
    driver = str(spec.get("driver", ""))
    pool_name = str(pool.get("name", ""))
    devices = []
    for raw in spec.get("devices") or []:
        consumes = tuple(
            (
                str(c.get("counterSet", "")),
                tuple(
                    (str(k), parse_quantity(str((v or {}).get("value", "0"))))
                    for k, v in (c.get("counters") or {}).items()
                ),
            )
            for c in raw.get("consumesCounters") or []
        )
        devices.append(Device((driver, pool_name, str(raw.get("name", ""))), raw, spec, consumes))
    return SliceRec(
        name=str((obj.get("metadata") or {}).get("name", "")),
        driver=driver,
        pool=pool_name,
        generation=int(pool.get("generation", 0) or 0),
        count=int(pool.get("resourceSliceCount", 1) or 1),
        spec=spec,
        devices=devices,
    )


def _build_pool(recs: list[SliceRec]) -> Pool:
    newest = max(r.generation for r in recs)
    live = sorted((r for r in recs if r.generation == newest), key=lambda r: r.name)
    devices = [d for r in live for d in r.devices]
    names = set()
    invalid = ""
    for d in devices:
        if d.id[2] in names:
            invalid = f"duplicate device name {d.id[2]}"
            break
        names.add(d.id[2])
    counters: dict[str, dict[str, Decimal]] = {}
    for r in live:
        for cset in r.spec.get("sharedCounters") or []:
            into = counters.setdefault(str(cset.get("name", "")), {})
            for k, v in (cset.get("counters") or {}).items():
                into[str(k)] = into.get(str(k), Decimal(0)) + parse_quantity(
                    str((v or {}).get("value", "0"))
                )
    return Pool(
        driver=live[0].driver,
        name=live[0].pool,
        slices=live,
        incomplete=len(live) != live[0].count,
        invalid=invalid,
        devices=devices,
        counters=counters,
    )


class SliceIndex:
    """ResourceSlices indexed by node, with each node's pools assembled once."""

    def __init__(self, slices: Iterable[Obj]) -> None:
        self.local: dict[str, list[SliceRec]] = {}
        self.shared: list[SliceRec] = []
        self.pool_nodes: dict[tuple[str, str], set[str]] = {}  # node-local pools -> nodes
        self.devices = 0
        for obj in slices:
            rec = _make_slice(obj)
            self.devices += len(rec.devices)
            node_name = rec.spec.get("nodeName")
            if node_name:
                self.local.setdefault(str(node_name), []).append(rec)
                self.pool_nodes.setdefault((rec.driver, rec.pool), set()).add(str(node_name))
            else:
                self.shared.append(rec)
        self._pools: dict[NodeRef | str, list[Pool]] = {}
        self._usable: dict[NodeRef | str, list[Device]] = {}

    def _key(self, node: NodeRef) -> NodeRef | str:
        """What a node's pools depend on: its labels only when some slice is shared between
        nodes, so a node asked for with and without labels is assembled once."""
        return node if self.shared else node.name

    def usable_devices(self, node: NodeRef) -> list[Device]:
        """Devices of the node's complete, valid pools in allocation order."""
        key = self._key(node)
        cached = self._usable.get(key)
        if cached is None:
            cached = [
                d
                for p in self.pools_for(node)
                if not (p.incomplete or p.invalid)
                for d in p.devices
            ]
            if len(self._usable) > 100_000:
                self._usable.clear()
            self._usable[key] = cached
        return cached

    def pools_for(self, node: NodeRef) -> list[Pool]:
        key = self._key(node)
        cached = self._pools.get(key)
        if cached is not None:
            return cached
        by_pool: dict[tuple[str, str], list[SliceRec]] = {}
        for rec in self.local.get(node.name, ()):
            by_pool.setdefault((rec.driver, rec.pool), []).append(rec)
        for rec in self.shared:
            spec = rec.spec
            if spec.get("perDeviceNodeSelection"):
                reaches = any(d.reaches(node) for d in rec.devices)
            else:
                reaches = _access_matches(spec, node)
            if reaches:
                by_pool.setdefault((rec.driver, rec.pool), []).append(rec)
        pools = [_build_pool(by_pool[k]) for k in sorted(by_pool)]
        if len(self._pools) > 100_000:
            self._pools.clear()
        self._pools[key] = pools
        return pools


# -- requests ----------------------------------------------------------------------------------


def claim_ref(claim: Mapping[str, Any]) -> str:
    return object_ref(claim)


@dataclass(eq=False)
class Request:
    """One request, or one ``firstAvailable`` subrequest."""

    name: str
    parent: str  # "" unless a subrequest
    class_name: str
    class_obj: Obj
    class_selectors: tuple[Selector, ...]
    selectors: tuple[Selector, ...]
    all_mode: bool
    count: int
    admin: bool
    key: Any
    all_devices: list[Device] = field(default_factory=list)

    @property
    def result_name(self) -> str:
        return f"{self.parent}/{self.name}" if self.parent else self.name


@dataclass(eq=False)
class Slot:
    """A claim's request: a single request or prioritized alternatives."""

    name: str
    alternatives: list[Request]
    subrequests: bool
    chosen: int = 0


class MatchAttribute:
    """All devices of the named requests (all requests when none are named) must share the
    attribute's value; a device without the attribute never satisfies it."""

    def __init__(self, requests: Sequence[str], attribute: str) -> None:
        self.requests = set(requests)
        self.attribute = attribute
        self.value: tuple[str, Any] | None = None
        self.n = 0

    def applies(self, base: str, sub: str) -> bool:
        if not self.requests:
            return True
        return base in self.requests or (bool(sub) and f"{base}/{sub}" in self.requests)

    def add(self, base: str, sub: str, dev: Device) -> bool:
        if not self.applies(base, sub):
            return True
        value = dev.attribute(self.attribute)
        if value is None:
            return False
        if self.n == 0:
            self.value = value
        elif value != self.value:
            return False
        self.n += 1
        return True

    def remove(self, base: str, sub: str, dev: Device) -> None:
        if self.applies(base, sub):
            self.n -= 1


# -- selector evaluation -----------------------------------------------------------------------

_SIG_CACHE: dict[tuple[str, Any], bool | str] = {}


def _evaluate(selector: Selector, dev: Device) -> bool | str:
    """True/False, or the runtime error text; shared by devices with equal signatures."""
    view = dev.view
    key = (selector.expression, selector.signature(view))
    hit = _SIG_CACHE.get(key)
    if hit is None:
        try:
            hit = selector.evaluate(view)
        except CelRuntimeError as exc:
            hit = str(exc)
        if len(_SIG_CACHE) > 1_000_000:
            _SIG_CACHE.clear()
        _SIG_CACHE[key] = hit
    return hit


def _selectable(req: Request, dev: Device) -> Any:
    """Cached on the device: True, False, or ("class"|"claim", selector index, error)."""
    cached = dev.matches.get(req.key)
    if cached is not None:
        return cached
    result: Any = True
    for source, selectors in (("class", req.class_selectors), ("claim", req.selectors)):
        for i, sel in enumerate(selectors):
            hit = _evaluate(sel, dev)
            if isinstance(hit, str):
                result = (source, i, hit)
                break
            if not hit:
                result = False
                break
        if result is not True:
            break
    dev.matches[req.key] = result
    return result


# -- the allocator -----------------------------------------------------------------------------


class Allocator:
    """Allocates claims against one snapshot of classes, slices and devices in use.

    ``classes`` maps class name to DeviceClass; ``allocated`` holds the devices other claims
    hold (admin-access results excluded, as in Kubernetes). The object is reusable: the
    scheduler keeps one and updates ``allocated`` as claims come and go.
    """

    def __init__(
        self,
        classes: Mapping[str, Obj],
        index: SliceIndex,
        allocated: set[DeviceID] | None = None,
    ) -> None:
        self.classes = classes
        self.index = index
        self.allocated: set[DeviceID] = allocated if allocated is not None else set()
        self._prepared: dict[int, tuple[Obj, list[Slot]]] = {}

    def prepared(self, claim: Obj) -> list[Slot]:
        """The claim's requests, resolved and compiled once per claim object (the scheduler
        filters many nodes for one pod); per-run state is reset on reuse."""
        hit = self._prepared.get(id(claim))
        if hit is not None and hit[0] is claim:
            for slot in hit[1]:
                slot.chosen = 0
                for req in slot.alternatives:
                    req.all_devices = []
            return hit[1]
        slots = self._slots(claim)
        if len(self._prepared) > 10_000:
            self._prepared.clear()
        self._prepared[id(claim)] = (claim, slots)
        return slots

    # -- request preparation ---------------------------------------------------------------
    def _compile(self, exprs: Iterable[Obj], where: Callable[[int], str]) -> tuple[Selector, ...]:
        out = []
        for i, sel in enumerate(exprs):
            cel_sel = (sel or {}).get("cel") or {}
            expression = cel_sel.get("expression")
            if not expression:
                raise AllocationError(
                    f"{where(i)}: CEL expression empty (unsupported selector type?)"
                )
            try:
                out.append(compile_selector(str(expression)))
            except CelCompileError as exc:
                raise AllocationError(f"{where(i)}: CEL compile error: {exc}") from None
        return tuple(out)

    def _request(self, claim: Obj, spec: Mapping[str, Any], name: str, parent: str) -> Request:
        ref = claim_ref(claim)
        label = f"{parent}/{name}" if parent else name
        class_name = str(spec.get("deviceClassName") or "")
        if not class_name:
            raise AllocationError(
                f"claim {ref}, request {label}: missing device class name "
                "(unsupported request type?)"
            )
        cls = self.classes.get(class_name)
        if cls is None:
            raise AllocationError(
                f"claim {ref}, request {label}: could not retrieve device class {class_name}: "
                f'deviceclass.resource.k8s.io "{class_name}" not found'
            )
        class_sels = self._compile(
            (cls.get("spec") or {}).get("selectors") or [],
            lambda i: f"class {class_name}: selector #{i}",
        )
        sels = self._compile(spec.get("selectors") or [], lambda i: f"claim {ref}: selector #{i}")
        mode = spec.get("allocationMode") or "ExactCount"
        if mode not in ("ExactCount", "All"):
            raise AllocationError(f"claim {ref}, request {label}: unsupported count mode {mode}")
        count = int(spec.get("count", 1) or 1) if mode == "ExactCount" else 0
        admin = bool(spec.get("adminAccess")) and not parent
        key = (
            class_name,
            tuple(s.expression for s in class_sels),
            tuple(s.expression for s in sels),
        )
        return Request(
            name=name,
            parent=parent,
            class_name=class_name,
            class_obj=cls,
            class_selectors=class_sels,
            selectors=sels,
            all_mode=mode == "All",
            count=count,
            admin=admin,
            key=key,
        )

    def _slots(self, claim: Obj) -> list[Slot]:
        slots = []
        for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            name = str(req.get("name", ""))
            if req.get("firstAvailable"):
                alts = [
                    self._request(claim, sub, str(sub.get("name", "")), name)
                    for sub in req["firstAvailable"]
                ]
                slots.append(Slot(name, alts, True))
            else:
                exactly = req.get("exactly") or {}
                if not exactly and req.get("deviceClassName"):
                    exactly = req  # tolerate the v1beta1 shape
                slots.append(Slot(name, [self._request(claim, exactly, name, "")], False))
        return slots

    # -- the search ------------------------------------------------------------------------
    def allocate(self, node: Any, claims: Sequence[Obj]) -> list[Obj] | None:
        """One AllocationResult per claim, or None when they do not all fit on ``node``."""
        return _Run(self, NodeRef.of(node), list(claims)).run()


class _Run:
    """State of one :meth:`Allocator.allocate` call."""

    def __init__(self, alloc: Allocator, node: NodeRef, claims: list[Obj]) -> None:
        self.alloc = alloc
        self.node = node
        self.claims = claims
        self.pools = alloc.index.pools_for(node)
        self.devices = alloc.index.usable_devices(node)
        self.taking: dict[DeviceID, set[int]] = {}
        self.results: list[list[tuple[Request, Device]]] = [[] for _ in claims]
        self.constraints: list[list[MatchAttribute]] = []
        self.slots: list[list[Slot]] = []
        self.available: dict[tuple[str, str], dict[str, dict[str, Decimal]]] = {}
        self.consumed: dict[tuple[str, str], dict[str, dict[str, Decimal]]] = {}

    def _raise_selection(self, req: Request, dev: Device, err: tuple[str, int, str]) -> None:
        source, i, message = err
        who = (
            f"class {req.class_name}"
            if source == "class"
            else f"claim {claim_ref(self.claims[self._claim_index(req)])}"
        )
        raise AllocationError(
            f"{who}: selector #{i} on device {device_id_str(dev.id)}: CEL runtime error: {message}"
        )

    def _claim_index(self, req: Request) -> int:
        for ci, slots in enumerate(self.slots):
            for slot in slots:
                if req in slot.alternatives:
                    return ci
        return 0

    def _selectable(self, req: Request, dev: Device) -> bool:
        hit = _selectable(req, dev)
        if hit is True:
            return dev.reaches(self.node)
        if hit is False:
            return False
        self._raise_selection(req, dev, hit)
        return False  # pragma: no cover

    def run(self) -> list[Obj] | None:
        for claim in self.claims:
            slots = self.alloc.prepared(claim)
            self.slots.append(slots)
            ref = claim_ref(claim)
            minimum = 0
            for slot in slots:
                least = None
                for req in slot.alternatives:
                    if req.all_mode:
                        self._gather_all(ref, req)
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
            cons = []
            for i, c in enumerate(
                ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []
            ):
                if not c.get("matchAttribute"):
                    raise AllocationError(
                        f"claim {ref}, constraint #{i}: empty constraint (unsupported constraint "
                        "type?)"
                    )
                cons.append(MatchAttribute(c.get("requests") or [], str(c["matchAttribute"])))
            self.constraints.append(cons)
        if not self._one(0, 0, 0, 0, False, 0):
            for pool in self.pools:
                if pool.invalid:
                    raise AllocationError("invalid resource pools were encountered")
            return None
        return [self._result(ci) for ci in range(len(self.claims))]

    def _gather_all(self, ref: str, req: Request) -> None:
        label = req.result_name
        for pool in self.pools:
            if pool.incomplete:
                raise AllocationError(
                    f"claim {ref}, request {label}: asks for all devices, but resource pool "
                    f"{pool.id} is currently being updated"
                )
            if pool.invalid:
                raise AllocationError(
                    f"claim {ref}, request {label}: asks for all devices, but resource pool "
                    f"{pool.id} is currently invalid"
                )
            req.all_devices.extend(d for d in pool.devices if self._selectable(req, d))

    def _one(self, c: int, r: int, s: int, d: int, sub: bool, start: int) -> bool:
        if c >= len(self.claims):
            return True
        slots = self.slots[c]
        if r >= len(slots):
            return self._one(c + 1, 0, 0, 0, False, 0)
        slot = slots[r]
        if slot.subrequests and not sub:
            for si in range(len(slot.alternatives)):
                if self._one(c, r, si, 0, True, 0):
                    slot.chosen = si
                    return True
            return False
        req = slot.alternatives[s]
        if req.all_mode:
            if not req.all_devices:
                return False
            if d >= len(req.all_devices):
                return self._one(c, r + 1, 0, 0, False, 0)
            dev = req.all_devices[d]
            undo = self._take(c, req, dev, must=True) if self._free(c, req, dev) else None
            if undo is None:
                return False
            if self._one(c, r, s, d + 1, sub, 0):
                return True
            undo()
            return False
        if d >= req.count:
            return self._one(c, r + 1, 0, 0, False, 0)
        if len(self.results[c]) + req.count - d > MAX_RESULTS:
            return False
        devices = self.devices
        if d == 0 and req.count > 1 and self._free_matching(c, req, req.count) < req.count:
            return False  # not enough devices: no need to try every combination
        for i in range(start, len(devices)):
            dev = devices[i]
            if not self._free(c, req, dev) or not self._selectable(req, dev):
                continue
            undo = self._take(c, req, dev, must=False)
            if undo is None:
                continue
            if self._one(c, r, s, d + 1, sub, i + 1):
                return True
            undo()
        return False

    def _free_matching(self, c: int, req: Request, enough: int) -> int:
        """How many devices this request could still take (up to ``enough``)."""
        n = 0
        for dev in self.devices:
            if self._free(c, req, dev) and self._selectable(req, dev):
                n += 1
                if n >= enough:
                    break
        return n

    def _free(self, c: int, req: Request, dev: Device) -> bool:
        """Whether claim ``c`` may still take ``dev`` for ``req``: nobody holds it, or, with
        admin access, this claim does not hold it already."""
        if req.admin:
            return c not in self.taking.get(dev.id, ())
        return dev.id not in self.alloc.allocated and not self.taking.get(dev.id)

    def _take(self, c: int, req: Request, dev: Device, must: bool) -> Callable[[], None] | None:
        """Add ``dev`` (free for claim ``c``, see :meth:`_free`) to the claim's results, or None
        when a shared counter or a constraint refuses it."""
        if dev.consumes and not self._consume(dev):
            return None
        base, subname = (req.parent, req.name) if req.parent else (req.name, "")
        added: list[MatchAttribute] = []
        for con in self.constraints[c]:
            if not con.add(base, subname, dev):
                for a in added:
                    a.remove(base, subname, dev)
                if dev.consumes:
                    self._release(dev)
                if must:
                    raise AllocationError(
                        f"claim {claim_ref(self.claims[c])}, request {req.result_name}: cannot "
                        f"add device {device_id_str(dev.id)} because a claim constraint would "
                        "not be satisfied"
                    )
                return None
            added.append(con)
        self.taking.setdefault(dev.id, set()).add(c)
        self.results[c].append((req, dev))

        def undo() -> None:
            for a in added:
                a.remove(base, subname, dev)
            self.taking[dev.id].discard(c)
            if dev.consumes:
                self._release(dev)
            self.results[c].pop()

        return undo

    # -- shared counters -------------------------------------------------------------------
    def _available(self, key: tuple[str, str]) -> dict[str, dict[str, Decimal]]:
        avail = self.available.get(key)
        if avail is None:
            pool = next(p for p in self.pools if (p.driver, p.name) == key)
            avail = {name: dict(cs) for name, cs in pool.counters.items()}
            for dev in pool.devices:
                if dev.consumes and dev.id in self.alloc.allocated:
                    for cset, counters in dev.consumes:
                        into = avail.setdefault(cset, {})
                        for name, value in counters:
                            if name in into:
                                into[name] -= value
            self.available[key] = avail
        return avail

    def _consume(self, dev: Device) -> bool:
        key = (dev.id[0], dev.id[1])
        avail = self._available(key)
        used = self.consumed.setdefault(key, {})
        for cset, counters in dev.consumes:
            into = used.setdefault(cset, {})
            for name, value in counters:
                into[name] = into.get(name, Decimal(0)) + value
        for set_name, limits in avail.items():
            for name, value in limits.items():
                if value < used.get(set_name, {}).get(name, Decimal(0)):
                    self._release(dev)
                    return False
        return True

    def _release(self, dev: Device) -> None:
        used = self.consumed[(dev.id[0], dev.id[1])]
        for cset, counters in dev.consumes:
            for name, value in counters:
                used[cset][name] -= value

    # -- results ---------------------------------------------------------------------------
    def _result(self, c: int) -> Obj:
        results = []
        for req, dev in self.results[c]:
            item: Obj = {
                "request": req.result_name,
                "driver": dev.id[0],
                "pool": dev.id[1],
                "device": dev.id[2],
            }
            if req.admin:
                item["adminAccess"] = True
            results.append(item)
        devices: Obj = {"results": results}
        config = self._config(c)
        if config:
            devices["config"] = config
        out: Obj = {"devices": devices}
        selector = self._node_selector(c)
        if selector is not None:
            out["nodeSelector"] = selector
        return out

    def _config(self, c: int) -> list[Obj]:
        claim = self.claims[c]
        slots = self.slots[c]
        chosen = [slot.alternatives[slot.chosen] for slot in slots]
        config: list[Obj] = []
        seen: dict[str, list[Obj]] = {}
        for req in chosen:
            cls_configs = (req.class_obj.get("spec") or {}).get("config") or []
            if req.class_name in seen:
                for entry in seen[req.class_name]:
                    entry["requests"].append(req.result_name)
                continue
            entries = []
            for cfg in cls_configs:
                entry = {"source": "FromClass", "requests": [req.result_name]}
                entry.update({k: v for k, v in cfg.items() if k != "requests"})
                entries.append(entry)
            seen[req.class_name] = entries
            config.extend(entries)
        names = {slot.name for slot in slots}
        for cfg in ((claim.get("spec") or {}).get("devices") or {}).get("config") or []:
            wanted = list(cfg.get("requests") or [])
            applies = not wanted or any(
                w in names or w in {req.result_name for req in chosen} for w in wanted
            )
            if applies:
                entry = {"source": "FromClaim"}
                if wanted:
                    entry["requests"] = wanted
                entry.update({k: v for k, v in cfg.items() if k != "requests"})
                config.append(entry)
        for entry in config:
            if "requests" in entry and len(entry["requests"]) == len(slots):
                del entry["requests"]
        return config

    def _node_selector(self, c: int) -> Obj | None:
        fields: list[Obj] = []
        exprs: list[Obj] = []
        for _req, dev in self.results[c]:
            spec = dev.raw if dev.slice_spec.get("perDeviceNodeSelection") else dev.slice_spec
            if spec.get("nodeName"):
                return {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {
                                    "key": "metadata.name",
                                    "operator": "In",
                                    "values": [spec["nodeName"]],
                                }
                            ]
                        }
                    ]
                }
            selector = spec.get("nodeSelector")
            if selector and selector.get("nodeSelectorTerms"):
                term = selector["nodeSelectorTerms"][0]
                for src, into in (
                    (term.get("matchFields"), fields),
                    (term.get("matchExpressions"), exprs),
                ):
                    for r in src or []:
                        if not any(_same_requirement(r, x) for x in into):
                            into.append(r)
        if not fields and not exprs:
            return None
        merged: Obj = {}
        if exprs:
            merged["matchExpressions"] = exprs
        if fields:
            merged["matchFields"] = fields
        return {"nodeSelectorTerms": [merged]}


def _same_requirement(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return (
        a.get("key") == b.get("key")
        and a.get("operator") == b.get("operator")
        and set(a.get("values") or []) == set(b.get("values") or [])
    )


# -- helpers for callers -----------------------------------------------------------------------


def allocated_devices(claims: Iterable[Obj]) -> set[DeviceID]:
    """Devices held by allocated claims (admin-access results do not block others)."""
    out: set[DeviceID] = set()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for res in (allocation.get("devices") or {}).get("results") or []:
            if res.get("adminAccess"):
                continue
            out.add((str(res.get("driver")), str(res.get("pool")), str(res.get("device"))))
    return out


def allocate(
    node: Any,
    claims: Sequence[Obj],
    *,
    classes: Iterable[Obj],
    slices: Iterable[Obj],
    allocated: Iterable[Obj] = (),
) -> list[Obj] | None:
    """One-shot allocation (``kgpu allocate``): results per claim, None if they do not fit,
    :class:`AllocationError` if they cannot be allocated anywhere."""
    by_name = {str((c.get("metadata") or {}).get("name", "")): c for c in classes}
    alloc = Allocator(by_name, SliceIndex(slices), allocated_devices(allocated))
    return alloc.allocate(node, claims)
