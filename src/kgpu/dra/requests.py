"""A claim's requests, resolved against the DeviceClasses and checked as kube-scheduler checks
them before it searches (``validateDeviceRequest``): the class must exist, selectors must be
CEL, the allocation mode known, features a request uses must be on. Problems are
:class:`AllocationError` with upstream's wording, e.g.
``claim default/c, request gpu: could not retrieve device class x: ...``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kgpu.dra.cel import CelCompileError, Selector, compile_selector
from kgpu.dra.features import Features
from kgpu.errors import KgpuError
from kgpu.store import object_ref

Obj = dict[str, Any]

#: resourceapi.AllocationResultsMaxSize
MAX_RESULTS = 32
#: resourceapi.FirstAvailableDeviceRequestMaxSize (prioritized-list scoring)
FIRST_AVAILABLE_MAX = 8


class AllocationError(KgpuError):
    """The claims cannot be allocated anywhere because something in them (or their classes or
    slices) is broken; kube-scheduler fails the Filter with this message."""


class NodeAllocationError(AllocationError):
    """A problem of this node only (upstream's ErrFailedAllocationOnNode, e.g. invalid pools):
    another node may still work, so the scheduler reports it as this node's reason."""


def claim_ref(claim: Mapping[str, Any]) -> str:
    return object_ref(claim)


@dataclass(eq=False)
class Request:
    """One request, or one ``firstAvailable`` subrequest."""

    name: str
    parent: str  # "" unless a subrequest
    index: int  # position among the parent's subrequests (0 for plain requests)
    class_name: str
    class_obj: Obj
    class_exprs: tuple[str, ...]
    exprs: tuple[str, ...]
    all_mode: bool
    count: int
    admin: bool
    tolerations: tuple[Obj, ...]
    capacity: Obj | None  # capacity.requests
    key: Any  # what selector results depend on
    all_devices: list[Any] = field(default_factory=list)
    claim: str = ""
    _class_sels: tuple[Selector, ...] | None = None
    _sels: tuple[Selector, ...] | None = None

    # Selectors compile when first needed: like kube-scheduler, a selector that does not
    # compile is an error only once a device has to be checked against it.
    def class_selectors(self) -> tuple[Selector, ...]:
        if self._class_sels is None:
            name = self.class_name
            self._class_sels = _compile(self.class_exprs, lambda i: f"class {name}: selector #{i}")
        return self._class_sels

    def selectors(self) -> tuple[Selector, ...]:
        if self._sels is None:
            ref = self.claim
            self._sels = _compile(self.exprs, lambda i: f"claim {ref}: selector #{i}")
        return self._sels

    @property
    def result_name(self) -> str:
        return f"{self.parent}/{self.name}" if self.parent else self.name

    @property
    def base(self) -> str:
        return self.parent or self.name

    @property
    def sub(self) -> str:
        return self.name if self.parent else ""


@dataclass(eq=False)
class Slot:
    """A claim's request: a single request or prioritized alternatives."""

    name: str
    alternatives: list[Request]
    subrequests: bool
    chosen: int = 0


def _exprs(selectors: Iterable[Obj]) -> tuple[str, ...]:
    return tuple(str(((s or {}).get("cel") or {}).get("expression", "")) for s in selectors)


def _compile(exprs: Iterable[str], where: Callable[[int], str]) -> tuple[Selector, ...]:
    out = []
    for i, expression in enumerate(exprs):
        try:
            out.append(compile_selector(expression))
        except CelCompileError as exc:
            raise AllocationError(f"{where(i)}: CEL compile error: {exc}") from None
    return tuple(out)


def _request(
    claim: Obj,
    spec: Mapping[str, Any],
    name: str,
    parent: str,
    index: int,
    classes: Mapping[str, Obj],
    features: Features,
) -> Request:
    ref = claim_ref(claim)
    label = name
    for i, sel in enumerate(spec.get("selectors") or []):
        if not ((sel or {}).get("cel") or {}).get("expression"):
            raise AllocationError(
                f"claim {ref}, request {label}, selector #{i}: CEL expression empty "
                "(unsupported selector type?)"
            )
    admin = bool(spec.get("adminAccess")) and not parent
    if not features.admin_access and "adminAccess" in spec and not parent:
        raise AllocationError(
            f"claim {ref}, request {label}: admin access is requested, but the feature is disabled"
        )
    class_name = str(spec.get("deviceClassName") or "")
    if not class_name:
        raise AllocationError(
            f"claim {ref}, request {label}: missing device class name (unsupported request type?)"
        )
    cls = classes.get(class_name)
    if cls is None:
        raise AllocationError(
            f"claim {ref}, request {label}: could not retrieve device class {class_name}: "
            f'deviceclass.resource.k8s.io "{class_name}" not found'
        )
    class_exprs = _exprs((cls.get("spec") or {}).get("selectors") or [])
    exprs = _exprs(spec.get("selectors") or [])
    mode = spec.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise AllocationError(f"claim {ref}, request {label}: unsupported count mode {mode}")
    count = int(spec.get("count", 1) or 1) if mode == "ExactCount" else 0
    return Request(
        name=name,
        parent=parent,
        index=index,
        class_name=class_name,
        class_obj=cls,
        class_exprs=class_exprs,
        exprs=exprs,
        all_mode=mode == "All",
        count=count,
        admin=admin,
        tolerations=tuple(spec.get("tolerations") or ()),
        capacity=(spec.get("capacity") or {}).get("requests"),
        key=(class_name, class_exprs, exprs),
        claim=ref,
    )


def prepare(claim: Obj, classes: Mapping[str, Obj], features: Features) -> list[Slot]:
    """The claim's slots (requests with their alternatives), or :class:`AllocationError`."""
    ref = claim_ref(claim)
    slots = []
    for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        name = str(req.get("name", ""))
        subs = req.get("firstAvailable")
        if subs:
            if not features.prioritized_list:
                raise AllocationError(
                    f"claim {ref}, request {name}: has subrequests, but the DRAPrioritizedList "
                    "feature is disabled"
                )
            if not features.consumable_capacity:
                for sub in subs:
                    if sub.get("capacity") is not None:
                        raise AllocationError(
                            f"claim {ref}, subrequest {sub.get('name', '')}: has capacity "
                            "requests, but the DRAConsumableCapacity feature is disabled"
                        )
            alts = [
                _request(claim, sub, str(sub.get("name", "")), name, i, classes, features)
                for i, sub in enumerate(subs)
            ]
            slots.append(Slot(name, alts, True))
            continue
        exactly = req.get("exactly") or {}
        if not exactly and req.get("deviceClassName"):
            exactly = req  # the v1beta1 shape, should it reach here unconverted
        if not features.consumable_capacity and exactly.get("capacity") is not None:
            raise AllocationError(
                f"claim {ref}, request {name}: has capacity requests, but the "
                "DRAConsumableCapacity feature is disabled"
            )
        slots.append(Slot(name, [_request(claim, exactly, name, "", 0, classes, features)], False))
    return slots
