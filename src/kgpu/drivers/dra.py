"""The DRA part of ``kgpu agent``: every DRA driver the node serves, in one process.

``gpu.nvidia.com`` is always there; other drivers join with :meth:`DraComponent.add_driver`, or
through ``driver_factories``: functions the component calls at start with the hardware snapshot,
each returning a handler or None. The agent passes the ComputeDomain driver's factory
(:func:`kgpu.drivers.computedomain.compute_domain_driver`), which serves
``compute-domain.nvidia.com`` on a node whose GPUs belong to a multi-node NVLink fabric (a
clique), as upstream runs its ComputeDomain kubelet plugin on such nodes. The component itself
knows no driver but the GPU one, so the kubelet layer never imports the ComputeDomain package.

Per driver the component runs a :class:`DraPlugin` (checkpoint, CDI specs, restart
reconciliation) behind a :class:`DriverServer` (DRAPlugin + registration sockets), and publishes
the driver's ResourceSlices into the object store. The agent hands the component its first view
before ``start``: the GPU slices are published from that view's machine (the MIG layout the node
serves), once, rather than from a raw hardware snapshot that a later view would replace. A new
view republishes the GPU slices only when they changed. A socket that vanished (the DRAPlugin
socket or the registration socket) is re-created within ``watch_interval_s``.

The component reads the cluster through a :class:`~kgpu.store.CachedStore` (it wraps the store
it is given unless that already is one), so drivers can hold informers instead of polling: the
ComputeDomain driver watches the ComputeDomainClique of each domain whose IMEX daemon runs here
and rewrites the daemon's ``hosts`` mapping on the change itself. Drivers with node daemons expose
``sync_daemons()``, which the component also calls on every new view; drivers that follow the
cluster expose ``close()``, called when the component stops.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from kgpu.dra.allocated_shares import ClaimShare, claim_shares
from kgpu.dra.api import RESOURCE_API
from kgpu.dra.shares import DISABLED_POLICY, SharePolicy
from kgpu.drivers.gpu import GpuHandler
from kgpu.drivers.mps import EventSink
from kgpu.drivers.ownership import GpuOwnership
from kgpu.drivers.publish import SlicePublisher, publish_slices
from kgpu.drivers.shares import pod_lookup
from kgpu.hardware.backend import Backend, ComputeModeBackend
from kgpu.hardware.model import Machine
from kgpu.kubelet import nvidia_cdi
from kgpu.kubelet.dra.handler import DriverHandler
from kgpu.kubelet.dra.plugin import DraPlugin
from kgpu.kubelet.dra.server import DriverServer, plugin_dir
from kgpu.kubelet.nvidia_cdi import NodeDriver
from kgpu.node.model import NodeView
from kgpu.store import CachedStore, MemoryStore, NotFound, ObjectStore

log = logging.getLogger(__name__)

#: Builds an extra driver's handler from (node name, store, hardware snapshot, kubelet root), or
#: returns None when the node has nothing for that driver to serve.
DriverFactory = Callable[[str, ObjectStore, Machine, Path], DriverHandler | None]


def publish(store: ObjectStore, handler: DriverHandler, node_name: str) -> int | None:
    """Publish ``handler``'s slices for ``node_name``; the pool generation."""
    return publish_slices(store, handler.driver, node_name, handler.resource_slices(node_name))


class DraComponent:
    """An agent component (``start``/``stop``/``on_view``)."""

    name = "dra"

    def __init__(
        self,
        kubelet_root: Path,
        cdi_root: Path,
        node_name: str,
        backend: Backend,
        store: ObjectStore | None = None,
        *,
        partitionable: bool = False,
        driver_factories: Sequence[DriverFactory] = (),
        watch_interval_s: float = 0.2,
        kubernetes_version: str | None = None,
        node_driver_for: Callable[[Backend], NodeDriver | None] = nvidia_cdi.for_backend,
        ownership: GpuOwnership | None = None,
        shares: SharePolicy = DISABLED_POLICY,
        on_event: EventSink | None = None,
    ) -> None:
        # whole GPUs published for consumable shares (``--consumable-shares``)
        self.shares = shares
        # the Warnings of memory shares' MPS daemons (MpsNotEnforced, ComputeModeNotRestored)
        self.on_event = on_event
        # the node's ledger shared with the device plugin: GPUs it holds are not published,
        # and the slices are republished when that changes
        self.ownership = ownership
        self.kubelet_root = Path(kubelet_root)
        self.cdi_root = Path(cdi_root)
        self.node_name = node_name
        self.backend = backend
        base = store if store is not None else MemoryStore()
        self._owns_cache = not isinstance(base, CachedStore)
        self.store: CachedStore = base if isinstance(base, CachedStore) else CachedStore(base)
        self.partitionable = partitionable
        self.driver_factories = tuple(driver_factories)
        # the API server's version (``v1.35.2``): how partitionable devices fill slices
        self.kubernetes_version = kubernetes_version
        self._node_driver_for = node_driver_for
        self.gpu: GpuHandler | None = None
        self.plugins: dict[str, DraPlugin] = {}
        self.servers: dict[str, DriverServer] = {}
        self._extra: list[DriverHandler] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch_interval = watch_interval_s
        self._watcher: threading.Thread | None = None
        self._republish = threading.Event()  # the ledger changed: check the GPU slices
        self.publisher: SlicePublisher | None = None
        self._first_machine: Machine | None = None  # from a view given before start

    def add_driver(self, handler: DriverHandler) -> None:
        """Serve another driver from this agent (now, if already started)."""
        with self._lock:
            if handler.driver in self.plugins or any(
                h.driver == handler.driver for h in self._extra
            ):
                raise ValueError(f"driver {handler.driver} is already served")
            self._extra.append(handler)
            if self._watcher is not None:
                self._start_driver(handler)

    def _start_driver(self, handler: DriverHandler) -> None:
        plugin = DraPlugin(
            handler,
            plugin_dir(self.kubelet_root, handler.driver),
            self.cdi_root,
            self.store,
        )
        server = DriverServer(plugin, self.kubelet_root)
        server.start()
        self.plugins[handler.driver] = plugin
        self.servers[handler.driver] = server
        self._publish(handler)

    def _publish(self, handler: DriverHandler) -> None:
        if self.publisher is None:
            self.publisher = SlicePublisher(self.store, self.node_name)
        self.publisher.publish(handler.driver, handler.resource_slices(self.node_name))

    def start(self) -> None:
        with self._lock:
            self.gpu = GpuHandler(
                self._first_machine or self.backend.snapshot(),
                self.node_name,
                plugin_dir(self.kubelet_root, "gpu.nvidia.com"),
                partitionable=self.partitionable,
                node_driver=self._node_driver_for(self.backend),
                kubernetes_version=self.kubernetes_version,
                ownership=self.ownership,
                shares=self.shares,
                # a share's pods (their runAsUser picks its MPS server): a get per pod
                pod_lookup=pod_lookup(self.store) if self.shares.enforced else None,
                # memory shares' MPS daemons put their GPUs in EXCLUSIVE_PROCESS through it
                compute_modes=(
                    self.backend if isinstance(self.backend, ComputeModeBackend) else None
                ),
                on_event=self.on_event,
            )
            machine = self.gpu.machine
            for factory in self.driver_factories:
                handler = factory(self.node_name, self.store, machine, self.kubelet_root)
                if handler is not None and not any(h.driver == handler.driver for h in self._extra):
                    self._extra.append(handler)
            try:
                for handler in [self.gpu, *self._extra]:
                    self._start_driver(handler)
            except BaseException:  # leave no half-started sockets behind
                for server in self.servers.values():
                    server.stop()
                self.servers.clear()
                raise
            if self.ownership is not None:
                # republished from the watcher thread: a listener runs inside Allocate and
                # NodePrepareResources, which must not wait on the API server
                self.ownership.subscribe(self._republish.set)
            self._stop.clear()
            self._watcher = threading.Thread(
                target=self._watch, name="dra-registration", daemon=True
            )
            self._watcher.start()

    def _ownership_changed(self) -> None:
        """The ledger or policy changed: republish the GPU slices if what they withhold did."""
        gpu = self.gpu
        if gpu is None or not gpu.ownership_changed():
            return
        try:
            self._publish(gpu)
        except Exception:  # a store error: the next change or view publishes again
            log.exception("republishing %s slices after an ownership change", gpu.driver)

    def on_view(self, view: NodeView) -> None:
        if self.gpu is None:  # not started: start publishes from this view's machine
            self._first_machine = view.machine
            return
        changed = self.gpu.update_machine(view.machine)
        # unhealthy devices are published tainted (NVIDIA's NVMLDeviceHealthCheck)
        if self.gpu.set_health(dict(view.unhealthy)) or changed or self.gpu.ownership_changed():
            self._publish(self.gpu)
        self._sync_logged()

    def sync_daemons(self) -> list[str]:
        """Let every driver with node daemons rewrite their configs from the cluster; returns
        what changed (for the ComputeDomain driver: domain uids). Reads come from the
        drivers' informers, so this costs the API server nothing."""
        changed: list[str] = []
        for plugin in list(self.plugins.values()):
            sync: Callable[[], list[str]] | None = getattr(plugin.handler, "sync_daemons", None)
            if sync is not None:
                changed.extend(sync())
        return changed

    def prepared_shares(self) -> dict[str, tuple[ClaimShare, ...]]:
        """GPU UUID -> the claims prepared here that hold shares of it (consumable capacity),
        each with its pods: the exporter's ``kgpu_dra_share_*`` series. Claims come from the
        driver's checkpoint (what is prepared on this node) and the store (their allocation's
        consumed capacity); the metrics refresh thread calls this, never a scrape."""
        plugin = self.plugins.get(GpuHandler.driver)
        if plugin is None or self.gpu is None or not self.gpu.shares.enabled:
            return {}  # no GPU is published shared: no claim to read
        out: dict[str, list[ClaimShare]] = {}
        for record in plugin.prepared().values():
            try:
                claim = self.store.get(RESOURCE_API, "ResourceClaim", record.name, record.namespace)
            except NotFound:  # being deleted: its share goes with the unprepare
                continue
            if (claim.get("metadata") or {}).get("uid") != record.uid:
                continue
            devices = record.handler_state.get("devices") or {}
            for share in claim_shares([claim], GpuHandler.driver):
                device = devices.get(share.device) or {}
                uuid = device.get("parentUUID") or device.get("uuid")
                if share.pool == self.node_name and uuid:
                    out.setdefault(str(uuid), []).append(share)
        return {uuid: tuple(shares) for uuid, shares in out.items()}

    def _sync_logged(self) -> None:
        try:
            changed = self.sync_daemons()
        except Exception:  # a store or disk error: the next view or event tries again
            log.exception("rewriting node daemon configs failed")
            return
        for uid in changed:
            log.info("ComputeDomain %s: IMEX daemon hosts mapping rewritten", uid)

    def _watch(self) -> None:
        failing: dict[str, str] = {}  # driver -> the error last logged (once, not every tick)
        while not self._stop.wait(self._watch_interval):
            if self._republish.is_set():
                self._republish.clear()
                self._ownership_changed()
            for server in list(self.servers.values()):
                try:
                    redone = server.ensure_serving()
                except Exception as exc:  # tried again next tick
                    if failing.get(server.driver) != str(exc):
                        log.error("%s: cannot re-create its sockets: %s", server.driver, exc)
                        failing[server.driver] = str(exc)
                    continue
                failing.pop(server.driver, None)
                if redone:
                    log.warning("%s: %s removed; re-created", server.driver, " and ".join(redone))

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        with self._lock:
            for server in self.servers.values():
                server.stop()
            self.servers.clear()
            self._watcher = None
            for plugin in self.plugins.values():
                close: Callable[[], None] | None = getattr(plugin.handler, "close", None)
                if close is not None:
                    close()
            if self.publisher is not None:
                self.publisher.close()
                self.publisher = None
            if self._owns_cache:
                self.store.stop_informers()
