"""One owner per GPU: who holds each device of a node, and what each kubelet API may offer.

A node's GPUs reach pods through two kubelet APIs at once: the device plugin (``nvidia.com/gpu``,
MIG resources, shared replicas) and DRA (``gpu.nvidia.com`` claims). Each API's own allocator
(the kubelet's device manager, the scheduler's DRA allocator) knows nothing of the other's, so
without a common record both hand out the same GPU. This module is that record, pure:

* a :class:`Holding` is one device held through one API: a device-plugin device id allocated
  to a container, or a DRA device of a prepared claim. Every holding names its physical GPU:
  a MIG device and its parent, a shared replica and its GPU, are the same GPU here.
* a :class:`Ledger` is every holding of the node. A GPU has at most one *owning API*: the
  holdings of a GPU all come from the device plugin or all from DRA (:func:`acquire` refuses
  the other API, naming the holder; :func:`problems` is the invariant tests check).
* a :class:`Policy` (``gpuOwnership`` in the device-plugin config) says which API *offers* a
  free GPU: both (``shared``, first come first served), or one. The policy never takes a held
  GPU away: it only decides what is offered next (:func:`device_plugin_view`,
  :func:`dra_withheld`), so changing it moves a GPU once its pods are gone.

A holding is a whole device, or a *share* of one (``Holding.share``, a Fraction): a DRA
consumable-capacity memory share of a GPU (:mod:`kgpu.dra.shares`), enforced through the
GPU's MPS daemon. Many shares of one GPU (of several claims) are fine as long as they sum to
at most the whole; a whole-device holding beside a share of the same GPU is not
(:func:`acquire` refuses it, :func:`problems` flags it). The device plugin is never offered a
GPU with a share: a share is a DRA holding like any other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction

from kgpu.config.plugin import GpuOwnership, is_gpu_index
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.hardware.model import Gpu, Machine
from kgpu.node.ids import strip_replica
from kgpu.node.model import NodeView

SHARED = "shared"
DEVICE_PLUGIN = "devicePlugin"
DRA = "dra"
APIS = (DEVICE_PLUGIN, DRA)
#: How each API is named in messages and ``kgpu plan``.
API_TITLES = {DEVICE_PLUGIN: "device plugin", DRA: "DRA"}


class OwnershipConflict(Exception):
    """A device cannot be held: its GPU is held through the other API. The message names the
    holder."""


@dataclass(frozen=True)
class Holding:
    """One device held through one API.

    ``holder`` identifies the holder within its API: the device id for the device plugin (its
    API has no pod in Allocate; ``pod`` is filled in once PodResources names it), the claim UID
    for DRA (``pod`` then carries ``namespace/name`` of the claim). ``device`` is the device
    id (device plugin) or the DRA device name. ``share`` is None for the whole device; a
    fractional share (memory of a GPU) is a Fraction of it. ``at`` is when it was taken, on the
    holder's clock (a device-plugin holding is released only by a PodResources answer fetched
    after ``at`` + a grace period).
    """

    api: str
    holder: str
    device: str
    gpu: str  # the physical GPU's UUID
    resource: str = ""  # the device plugin's resource name ("" for DRA)
    pod: str = ""  # "namespace/name" of the pod (device plugin) or of the claim (DRA)
    share: Fraction | None = None
    at: float = 0.0

    def describe(self) -> str:
        """``the device plugin (pod ns/name, nvidia.com/gpu GPU-...)`` or
        ``DRA claim ns/name (device gpu-0)``."""
        if self.api == DRA:
            share = "" if self.share is None else f", share {self.share} of it"
            return f"DRA claim {self.pod or self.holder} (device {self.device}{share})"
        parts = [f"pod {self.pod}"] if self.pod else []
        parts.append(f"{self.resource} device {self.device}" if self.resource else self.device)
        return f"the device plugin ({', '.join(parts)})"


@dataclass(frozen=True)
class Ledger:
    """Every holding on one node, by GPU UUID (a frozen value: each change makes a new one)."""

    by_gpu: Mapping[str, tuple[Holding, ...]] = field(default_factory=dict)

    def holdings(self, gpu: str | None = None) -> tuple[Holding, ...]:
        if gpu is not None:
            return tuple(self.by_gpu.get(gpu, ()))
        return tuple(h for hs in self.by_gpu.values() for h in hs)

    def owner(self, gpu: str) -> str | None:
        """The API holding ``gpu`` now, or None when it is free."""
        held = self.by_gpu.get(gpu)
        return held[0].api if held else None

    def held_by(self, api: str) -> frozenset[str]:
        """GPU UUIDs held through ``api``."""
        return frozenset(g for g, hs in self.by_gpu.items() if hs and hs[0].api == api)

    def devices(self, api: str) -> frozenset[str]:
        """Device ids (device plugin) or device names (DRA) held through ``api``."""
        return frozenset(h.device for h in self.holdings() if h.api == api)

    def __len__(self) -> int:
        return sum(len(hs) for hs in self.by_gpu.values())


EMPTY = Ledger()


def _rebuild(holdings: Iterable[Holding]) -> Ledger:
    out: dict[str, list[Holding]] = {}
    for h in holdings:
        out.setdefault(h.gpu, []).append(h)
    return Ledger({g: tuple(hs) for g, hs in out.items()})


def acquire(ledger: Ledger, new: Sequence[Holding]) -> Ledger:
    """``ledger`` with ``new`` added, all or none; :class:`OwnershipConflict` when a GPU of
    ``new`` is held through the other API. A holder taking devices again replaces its own: a
    claim prepared again after a restart, and a device-plugin id allocated again (the kubelet
    is the authority on its ids: it hands an id out again only once its pod is gone, which
    PodResources may not have shown yet)."""
    holders = {(h.api, h.holder) for h in new}
    kept = [h for h in ledger.holdings() if (h.api, h.holder) not in holders]
    base = _rebuild(kept)
    for h in new:
        for other in base.holdings(h.gpu):
            if other.api != h.api:
                raise OwnershipConflict(
                    f"GPU {h.gpu} is held by {other.describe()}; {API_TITLES[h.api]} cannot "
                    f"use it (device {h.device}) until that holder is gone"
                )
    out = _rebuild([*kept, *new])
    for gpu in {h.gpu for h in new if h.api == DRA}:
        problem = _share_problem(gpu, out.holdings(gpu))
        if problem:
            raise OwnershipConflict(problem)
    return out


def _share_problem(gpu: str, held: Sequence[Holding]) -> str:
    """What is wrong with the DRA shares of one GPU ("" when nothing is): a whole device of
    the GPU held beside a share, or shares summing above the whole GPU."""
    shares = [h for h in held if h.api == DRA and h.share is not None]
    if not shares:
        return ""
    whole = [h for h in held if h.api == DRA and h.share is None]
    if whole:
        return (
            f"GPU {gpu} is held whole by {whole[0].describe()} and in shares by "
            f"{', '.join(h.describe() for h in shares)}"
        )
    total = sum((h.share for h in shares if h.share is not None), Fraction(0))
    if total > 1:
        return (
            f"GPU {gpu} is shared beyond its whole ({float(total):.2f} of it) by "
            f"{', '.join(h.describe() for h in shares)}"
        )
    return ""


def release(ledger: Ledger, api: str, holders: Iterable[str]) -> Ledger:
    """``ledger`` without the holdings of ``holders`` of ``api`` (unknown ones are ignored)."""
    gone = set(holders)
    if not gone:
        return ledger
    return _rebuild(h for h in ledger.holdings() if not (h.api == api and h.holder in gone))


def release_absent(
    ledger: Ledger, listed: Mapping[str, str], fetched_at: float, grace_s: float
) -> Ledger:
    """Device-plugin holdings after a PodResources answer: the kubelet lists the device ids its
    pods hold (``listed``: id -> ``namespace/name``), fetched starting at ``fetched_at``. An id
    it no longer lists was released (the pod ended, or its admission failed after Allocate),
    unless it was allocated less than ``grace_s`` before the fetch began (the kubelet records
    an allocation only after Allocate returns). Listed ids get their pod's name."""
    out = []
    changed = False
    for h in ledger.holdings():
        if h.api != DEVICE_PLUGIN:
            out.append(h)
        elif h.device in listed:
            if h.pod != listed[h.device]:
                h, changed = replace(h, pod=listed[h.device]), True
            out.append(h)
        elif h.at + grace_s > fetched_at:
            out.append(h)
        else:
            changed = True
    return _rebuild(out) if changed else ledger


def problems(ledger: Ledger) -> list[str]:
    """What breaks "one owner per GPU" in ``ledger`` (empty when nothing does): a GPU held
    through both APIs, one device-plugin device id (or whole DRA device of two claims) held
    twice, a whole GPU held beside a share of it, or shares summing above the whole."""
    out = []
    for gpu, held in ledger.by_gpu.items():
        apis = {h.api for h in held}
        if len(apis) > 1:
            out.append(f"GPU {gpu} is held through both APIs: {[h.describe() for h in held]}")
        shared = _share_problem(gpu, held)
        if shared:
            out.append(shared)
        seen: dict[tuple[str, str], Holding] = {}
        for h in held:
            if h.share is not None:
                continue
            key = (h.api, h.device)
            if key in seen and seen[key].holder != h.holder:
                out.append(
                    f"device {h.device} has two holders: {seen[key].describe()}, {h.describe()}"
                )
            seen[key] = h
    return out


def gpu_of(device_id: str, view: NodeView) -> str | None:
    """The physical GPU behind a device-plugin id: from ``view``, else from the id itself (an
    id a pod got under an earlier config, e.g. a whole GPU before time-slicing was turned on:
    the GPU is in use all the same). None when it names no GPU of the node."""
    for res in view.resources:
        for dev in res.devices:
            if dev.id == device_id:
                return dev.gpu_uuid
    base = strip_replica(device_id)
    machine = view.machine
    if base.isdigit() or (base.count(":") == 1 and base.split(":")[0].isdigit()):
        index = int(base.split(":")[0])  # deviceIDStrategy index: "<gpu>" or "<gpu>:<mig>"
        return next((g.uuid for g in machine.gpus if g.index == index), None)
    try:
        found = machine.by_uuid(base)
    except KeyError:
        return None
    return found.uuid if isinstance(found, Gpu) else found.parent_uuid


# -- the policy ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Policy:
    """Which API offers each free GPU: ``modes`` maps GPU UUID -> ``shared`` |
    ``devicePlugin`` | ``dra`` (a GPU not listed gets ``default``). ``apis`` are the APIs
    running on the node: a GPU whose mode names an API that does not run is offered by the
    one that does (a policy must never leave a GPU offered by nobody)."""

    default: str = SHARED
    modes: tuple[tuple[str, str], ...] = ()
    apis: frozenset[str] = frozenset(APIS)

    def mode(self, gpu: str) -> str:
        for uuid, mode in self.modes:
            if uuid == gpu:
                return mode
        return self.default

    def allows(self, api: str, gpu: str) -> bool:
        """Whether ``api`` may offer ``gpu`` while it is free."""
        if api not in self.apis:
            return False
        mode = self.mode(gpu)
        return mode in (SHARED, api) or mode not in self.apis

    def running(self, apis: Iterable[str]) -> Policy:
        return replace(self, apis=frozenset(apis))


SHARED_POLICY = Policy()


def resolve_policy(
    section: GpuOwnership, machine: Machine, *, file: str = "", entry: str = ""
) -> tuple[tuple[str, str], ...]:
    """Every GPU of ``machine`` with the mode ``section`` gives it, in index order.
    :class:`FieldError` names ``gpuOwnership.gpus[i].devices[k]`` when a reference names a GPU
    the node lacks (a policy that silently misses a GPU would leave it where it was)."""
    gpus = sorted(machine.gpus, key=lambda g: g.index)
    chosen: dict[str, str] = {}
    bad: list[FieldProblem] = []
    for i, rule in enumerate(section.gpus):
        path = join_path("gpuOwnership", "gpus", i, "devices")
        selection = rule.devices
        if selection.all:
            picked = gpus
        elif selection.count is not None:
            picked = gpus[: selection.count]
        else:
            picked = []
            for k, ref in enumerate(selection.refs):
                match = [
                    g for g in gpus if (g.index == int(ref) if is_gpu_index(ref) else g.uuid == ref)
                ]
                if not match:
                    known = ", ".join(str(g.index) for g in gpus) or "none"
                    bad.append(
                        FieldProblem(
                            f"{ref} names no GPU of this node ({machine.profile}: GPU indices "
                            f"{known}, or their UUIDs)",
                            join_path(path, k),
                            file,
                            entry,
                        )
                    )
                picked += match
        for g in picked:
            chosen.setdefault(g.uuid, rule.owner)
    if bad:
        raise FieldError(bad)
    return tuple((g.uuid, chosen.get(g.uuid, section.default)) for g in gpus)


def policy_of(view: NodeView | None, apis: Iterable[str] = APIS) -> Policy:
    """The policy ``view`` was built with (every GPU shared when there is no view)."""
    if view is None:
        return SHARED_POLICY.running(apis)
    return Policy(SHARED, view.gpu_ownership, frozenset(apis))


# -- what each API offers -----------------------------------------------------------------------


def device_plugin_view(view: NodeView, ledger: Ledger, policy: Policy) -> NodeView:
    """``view`` as the device plugin lists it: without the devices of GPUs DRA holds, and
    without the free devices of GPUs the policy does not let the device plugin offer (a
    device it holds stays listed, so the kubelet keeps counting it until its pod ends).

    Devices are *dropped* from ListAndWatch rather than reported Unhealthy: the kubelet's
    device manager counts a dropped device in neither capacity nor allocatable, and an
    Unhealthy one in capacity only, which reads as a broken GPU to every capacity-vs-
    allocatable alert and to KEP-4680's device health in pod status. Either way the scheduler
    sees the lower allocatable."""
    dra_held = ledger.held_by(DRA)
    if not dra_held and _offers_everything(policy):
        return view  # the common case, kept cheap: nothing to drop
    mine = ledger.devices(DEVICE_PLUGIN)
    resources = []
    changed = False
    for res in view.resources:
        kept = tuple(
            d
            for d in res.devices
            if d.gpu_uuid not in dra_held
            and (d.id in mine or policy.allows(DEVICE_PLUGIN, d.gpu_uuid))
        )
        changed |= len(kept) != len(res.devices)
        resources.append(replace(res, devices=kept) if len(kept) != len(res.devices) else res)
    return replace(view, resources=tuple(resources)) if changed else view


def _offers_everything(policy: Policy) -> bool:
    """Whether the device plugin may offer every GPU under ``policy`` (cheap: no GPU walk)."""
    if DEVICE_PLUGIN not in policy.apis:
        return False
    modes = {policy.default, *(m for _, m in policy.modes)}
    return all(m in (SHARED, DEVICE_PLUGIN) or m not in policy.apis for m in modes)


def dra_withheld(machine: Machine, ledger: Ledger, policy: Policy) -> dict[str, str]:
    """GPU UUID -> why, for every GPU whose devices (the GPU, its MIG devices and placements)
    DRA must not offer: held by the device plugin, or given to it by the policy."""
    out: dict[str, str] = {}
    dp_held = ledger.held_by(DEVICE_PLUGIN)
    for gpu in machine.gpus:
        if gpu.uuid in dp_held:
            out[gpu.uuid] = f"held by {ledger.holdings(gpu.uuid)[0].describe()}"
        elif not policy.allows(DRA, gpu.uuid):
            out[gpu.uuid] = f"gpuOwnership gives GPU {gpu.index} to the device plugin"
    return out


@dataclass(frozen=True)
class GpuOffer:
    """One GPU as ``kgpu plan`` shows it: its mode, the APIs offering it, who holds it."""

    index: int
    uuid: str
    mode: str
    offered_by: tuple[str, ...]
    holder: str = ""


def offers(view: NodeView, ledger: Ledger = EMPTY, policy: Policy | None = None) -> list[GpuOffer]:
    """Per GPU of ``view``: which API offers it now (none while the other one holds it)."""
    policy = policy if policy is not None else policy_of(view)
    out = []
    for gpu in sorted(view.machine.gpus, key=lambda g: g.index):
        owner = ledger.owner(gpu.uuid)
        if owner is not None:
            by: tuple[str, ...] = (owner,)
        else:
            by = tuple(api for api in APIS if policy.allows(api, gpu.uuid))
        held = ledger.holdings(gpu.uuid)
        out.append(
            GpuOffer(
                gpu.index, gpu.uuid, policy.mode(gpu.uuid), by, held[0].describe() if held else ""
            )
        )
    return out


__all__ = [
    "APIS",
    "DEVICE_PLUGIN",
    "DRA",
    "EMPTY",
    "SHARED",
    "GpuOffer",
    "Holding",
    "Ledger",
    "OwnershipConflict",
    "Policy",
    "acquire",
    "device_plugin_view",
    "dra_withheld",
    "offers",
    "policy_of",
    "problems",
    "release",
    "release_absent",
    "resolve_policy",
]
