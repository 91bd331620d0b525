"""The node's one ledger of who holds each GPU, shared by the device-plugin and DRA drivers.

A thin, thread-safe holder around the pure :mod:`kgpu.node.ownership`: every change is one
pure function applied under a lock, and listeners (the device plugin's ListAndWatch streams,
the DRA driver's slice publisher) are told after the lock is released. The agent builds one
per node and hands it to both drivers; ``kgpu sim`` builds one per simulated node the same way.

Where the holdings come from:

* device plugin: :meth:`GpuOwnership.reserve` in Allocate, before the answer goes back (the
  API has no release call); :meth:`observe_pod_resources` releases the ids the kubelet's
  PodResources no longer lists; :meth:`restore_device_plugin` rebuilds them from the kubelet's
  device checkpoint (``kubelet_internal_checkpoint``) when the agent starts;
* DRA: :meth:`hold_claim` in NodePrepareResources, :meth:`release_claim` in
  NodeUnprepareResources (or a rolled-back preparation), :meth:`restore_claims` from the DRA
  driver's own checkpoint when it starts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from functools import partial

from kgpu.hardware.model import Machine
from kgpu.kubelet.podresources import CheckpointEntry, PodResources
from kgpu.node import ownership as own
from kgpu.node.allocate import AllocationError
from kgpu.node.model import NodeView

log = logging.getLogger(__name__)

#: A device-plugin allocation younger than this is kept even if PodResources does not list it
#: yet (the kubelet records it only after Allocate returns).
RELEASE_GRACE_S = 2.0


def _acquire_one(holding: own.Holding, ledger: own.Ledger) -> own.Ledger:
    return own.acquire(ledger, [holding])


class GpuOwnership:
    """One node's ledger and policy. ``apis``: the kubelet APIs the node runs (a policy
    naming one that does not run falls back to the other, see :class:`~kgpu.node.ownership.Policy`).
    ``clock`` stamps device-plugin holdings (monotonic seconds)."""

    def __init__(
        self,
        apis: Iterable[str] = own.APIS,
        *,
        clock: Callable[[], float] = time.monotonic,
        grace_s: float = RELEASE_GRACE_S,
    ) -> None:
        self._apis = frozenset(apis)
        self._clock = clock
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._ledger = own.EMPTY
        self._policy = own.SHARED_POLICY.running(self._apis)
        self._view: NodeView | None = None
        self._listeners: list[Callable[[], None]] = []
        self._cache: tuple[int, own.Ledger, own.Policy, NodeView] | None = None
        self.version = 0  # bumped on every change, for listeners that poll

    # -- reading -----------------------------------------------------------------------------

    def now(self) -> float:
        """This holder's clock (what :meth:`observe_pod_resources` expects)."""
        return self._clock()

    def ledger(self) -> own.Ledger:
        return self._ledger

    def policy(self) -> own.Policy:
        return self._policy

    def subscribe(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (no argument, no lock held) after every change."""
        with self._lock:
            self._listeners.append(listener)

    def set_apis(self, apis: Iterable[str]) -> None:
        with self._lock:
            self._apis = frozenset(apis)
            self._policy = self._policy.running(self._apis)
        self._changed()

    def set_view(self, view: NodeView | None) -> None:
        """The node view in force: its ``gpuOwnership`` becomes the policy. Holdings stay as
        they are: a new policy only changes what is offered next."""
        policy = own.policy_of(view, self._apis)
        with self._lock:
            self._view = view
            changed = policy != self._policy
            self._policy = policy
        if changed:
            log.info("gpuOwnership: %s", ", ".join(f"{u}={m}" for u, m in policy.modes) or "shared")
            self._changed()

    def device_plugin_view(self, view: NodeView) -> NodeView:
        """What the device plugin lists and allocates from (cached per view and ledger)."""
        ledger, policy = self._ledger, self._policy
        cached = self._cache
        if (
            cached is not None
            and cached[0] == id(view)
            and cached[1] is ledger
            and cached[2] is policy
        ):
            return cached[3]
        out = own.device_plugin_view(view, ledger, policy)
        self._cache = (id(view), ledger, policy, out)
        return out

    def dra_withheld(self, machine: Machine) -> dict[str, str]:
        """GPU UUID -> why, for the GPUs the DRA driver must not publish now."""
        return own.dra_withheld(machine, self._ledger, self._policy)

    def problems(self) -> list[str]:
        return own.problems(self._ledger)

    # -- the device plugin -------------------------------------------------------------------

    def reserve(self, resource: str, ids: Sequence[str]) -> None:
        """Allocate is about to hand ``ids`` of ``resource`` to a container: hold them, or
        raise :class:`AllocationError` naming the holder (the kubelet fails the pod's
        admission with it, ``UnexpectedAdmissionError``). Ids are looked up in the whole view
        (:meth:`set_view`), so an id the device plugin no longer lists is refused by name."""
        holdings = []
        view = self._view
        if view is None:
            return
        by_id = {d.id: d for r in view.resources if r.name == resource for d in r.devices}
        now = self._clock()
        for device_id in ids:
            dev = by_id.get(device_id)
            if dev is None:
                continue  # Allocate refuses an unknown id in upstream's words
            holdings.append(
                own.Holding(own.DEVICE_PLUGIN, device_id, device_id, dev.gpu_uuid, resource, at=now)
            )
        self._apply(lambda ledger: own.acquire(ledger, holdings), AllocationError)

    def cancel(self, resource: str, ids: Sequence[str]) -> None:
        """Allocate failed after :meth:`reserve`: nothing was handed out."""
        self._apply(lambda ledger: own.release(ledger, own.DEVICE_PLUGIN, ids))

    def observe_pod_resources(self, pods: Sequence[PodResources], fetched_at: float) -> None:
        """A PodResources ``List`` answer whose call began at ``fetched_at`` (this holder's
        clock): device-plugin ids it no longer lists are free again."""
        listed: dict[str, str] = {}
        for pod in pods:
            for container in pod.containers:
                for _resource, device_id in container.device_ids():
                    listed[device_id] = f"{pod.namespace}/{pod.name}"
        self.observe_listed(listed, fetched_at)

    def observe_listed(self, listed: Mapping[str, str], fetched_at: float) -> None:
        """:meth:`observe_pod_resources` with the answer already reduced to device id ->
        ``namespace/name`` (the simulator's kubelet has it that way)."""
        if not listed and not self.device_plugin_holdings():
            return
        self._apply(lambda ledger: own.release_absent(ledger, listed, fetched_at, self.grace_s))

    def restore_device_plugin(self, entries: Sequence[CheckpointEntry], view: NodeView) -> None:
        """Rebuild the device plugin's holdings from the kubelet's device checkpoint (agent
        start), also ids the current view no longer has (a pod allocated under an earlier
        config still uses its GPU). PodResources then releases those whose pods are gone."""
        now = self._clock()
        holdings = []
        for entry in entries:
            for device_id in entry.device_ids:
                gpu = own.gpu_of(device_id, view)
                if gpu is None:
                    log.warning(
                        "kubelet checkpoint: %s device %s names no GPU of this node",
                        entry.resource,
                        device_id,
                    )
                    continue
                holdings.append(
                    own.Holding(
                        own.DEVICE_PLUGIN, device_id, device_id, gpu, entry.resource, at=now
                    )
                )
        # a checkpoint naming a GPU a claim holds too is what the ledger exists to prevent;
        # keep what can be kept and say so rather than refuse to start
        for h in holdings:
            try:
                self._apply(partial(_acquire_one, h), own.OwnershipConflict)
            except own.OwnershipConflict as exc:
                log.error("kubelet checkpoint: %s", exc)

    def device_plugin_holdings(self) -> int:
        return sum(1 for h in self._ledger.holdings() if h.api == own.DEVICE_PLUGIN)

    # -- DRA -------------------------------------------------------------------------------------

    def hold_claim(
        self,
        uid: str,
        claim: str,
        devices: Sequence[tuple[str, str]],
        shares: Mapping[str, Fraction] | None = None,
    ) -> None:
        """A claim (``namespace/name``) is being prepared with ``devices`` ((DRA device name,
        GPU UUID) pairs), ``shares`` naming the devices it holds a share of (device name ->
        fraction of the GPU; the rest are whole): hold them, or raise
        :class:`~kgpu.node.ownership.OwnershipConflict` naming the holder."""
        shares = shares or {}
        holdings = [
            own.Holding(own.DRA, uid, name, gpu, pod=claim, share=shares.get(name))
            for name, gpu in devices
        ]
        self._apply(lambda ledger: own.acquire(ledger, holdings), own.OwnershipConflict)

    def release_claim(self, uid: str) -> None:
        self._apply(lambda ledger: own.release(ledger, own.DRA, [uid]))

    def restore_claims(
        self,
        claims: Mapping[str, tuple[str, Sequence[tuple[str, str]]]],
        shares: Mapping[str, Mapping[str, Fraction]] | None = None,
    ) -> None:
        """Rebuild DRA holdings from the driver's checkpoint: uid -> (claim, devices), and
        uid -> the claim's shares (device name -> fraction)."""
        for uid, (claim, devices) in sorted(claims.items()):
            try:
                self.hold_claim(uid, claim, devices, (shares or {}).get(uid))
            except own.OwnershipConflict as exc:
                log.error("DRA checkpoint: claim %s: %s", claim, exc)

    # -- internals ------------------------------------------------------------------------------

    def _apply(
        self,
        change: Callable[[own.Ledger], own.Ledger],
        error: type[Exception] | None = None,
    ) -> None:
        with self._lock:
            before = self._ledger
            try:
                after = change(before)
            except own.OwnershipConflict as exc:
                if error is None or error is own.OwnershipConflict:
                    raise
                raise error(str(exc)) from None
            if after is before or after == before:
                return
            self._ledger = after
        self._changed()

    def _changed(self) -> None:
        with self._lock:
            self.version += 1
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener()
            except Exception:  # a listener's failure must not undo the change
                log.exception("ownership listener failed")
