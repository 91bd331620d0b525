"""The device-plugin side of the agent: one gRPC server per advertised resource, registered
with the kubelet and kept registered through kubelet restarts, as a component.

Two paths, never waiting on each other:

* **Views** (``on_view``, called on the agent's health and reload threads): the new view is
  stored and every ListAndWatch stream woken, so a health change reaches the kubelet in the
  time a stream takes to wake, whatever the kubelet's registration service is doing. A view
  whose resources differ in more than health wakes the reconciler.
* **The reconciler** (one thread, every ``poll_s`` or when woken) makes the sockets match the
  view: a server whose resource went away or changed is stopped, a missing one served, a
  socket that vanished (the kubelet wipes ``device-plugins/`` when it restarts) served again.
  Registrations it hands to a small pool, one call in flight per resource, all resources in
  parallel, outside every lock. A failed attempt is retried after an exponential backoff with
  jitter (:class:`~kgpu.kubelet.deviceplugin.registration.Backoff`); a hung ``Register`` ends at
  its timeout, or at once when the component stops (its channel is closed).

A kubelet restart is noticed three ways, whichever comes first: ``kubelet.sock`` is a new file
(its identity: device, inode *and* change time, since ext4 hands the old inode to the new
socket), our own socket vanished, or the kubelet closed every ListAndWatch stream of a
registered resource and opened none for ``DROP_GRACE_S`` (it dropped us while our socket
survived). Each resource is then registered again at once, its backoff reset.

Logging follows states, not attempts: a resource logs when it is registered, when it starts
failing (with the reason) and when it waits for a kubelet, never once per retry.

With a :class:`~kgpu.drivers.ownership.GpuOwnership` (the node's one ledger, shared with the
DRA driver) the servers list and allocate from the ledger's view (devices of GPUs a DRA claim
holds, and free devices the ``gpuOwnership`` policy gives to DRA, are dropped from
ListAndWatch), Allocate holds its ids in the ledger before answering, the kubelet's device
checkpoint rebuilds those holdings at start, and a background thread asks PodResources, only
while the device plugin holds something, which of them the kubelet still has (the device-plugin
API has no release call). A ledger change wakes every ListAndWatch stream; the reconciler
compares only the unfiltered view, so no server restarts when a claim comes or goes.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import grpc

from kgpu.drivers.ownership import GpuOwnership
from kgpu.kubelet.deviceplugin.registration import (
    DEVICE_PLUGINS_DIR,
    KUBELET_SOCKET,
    Backoff,
    RegistrationError,
    register,
)
from kgpu.kubelet.deviceplugin.server import PluginServer
from kgpu.kubelet.nvidia_cdi import NodeDriver, write_device_plugin_spec
from kgpu.kubelet.podresources import PodResources, PodResourcesClient, read_device_checkpoint
from kgpu.kubelet.sockets import Identity, identity, unix_target
from kgpu.node.model import NodeView, ResourceView

log = logging.getLogger(__name__)

#: How long a registered resource may have no ListAndWatch stream before it counts as dropped.
DROP_GRACE_S = 1.0

# Registration states (what ``status()`` reports per resource).
WAITING = "waiting for kubelet.sock"
REGISTERING = "registering"
REGISTERED = "registered"
RETRYING = "retrying"


def shape(res: ResourceView) -> ResourceView:
    """A resource without its devices' health: what decides whether its server restarts."""
    return replace(res, devices=tuple(replace(d, healthy=True) for d in res.devices))


@dataclass(eq=False)
class _Entry:
    """One resource's server and where its registration stands."""

    server: PluginServer
    shape: ResourceView
    state: str = REGISTERING
    needs: bool = True  # a registration is due (now or after the backoff)
    in_flight: bool = False
    due: float = 0.0
    backoff: Backoff = field(default_factory=Backoff)
    registered_at: float | None = None
    error: str = ""
    attempts: int = 0
    target: Identity | None = None  # the kubelet.sock the call in flight went to


class DevicePluginComponent:
    """Serves every resource of the current view over the kubelet's device-plugin API."""

    name = "device-plugin"

    def __init__(
        self,
        kubelet_root: Path,
        *,
        poll_s: float = 0.1,
        register_timeout_s: float = 5.0,
        on_change: Callable[[], None] | None = None,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        cdi_root: Path | None = None,
        driver: Callable[[], NodeDriver | None] | None = None,
        ownership: GpuOwnership | None = None,
        pod_resources: Callable[[], Sequence[PodResources]] | None = None,
        release_poll_s: float = 5.0,
    ) -> None:
        self.kubelet_root = Path(kubelet_root)
        # the node's ledger shared with the DRA driver (None: this component owns every GPU)
        self.ownership = ownership
        self._pod_resources = pod_resources
        self._pr_client: PodResourcesClient | None = None
        self.release_poll_s = release_poll_s
        self._release_thread: threading.Thread | None = None
        # the CDI spec behind cdi-annotations/cdi-cri names goes here (None: not written)
        self.cdi_root = Path(cdi_root) if cdi_root is not None else None
        self._driver = driver or (lambda: None)
        self._cdi_error = ""
        self.cdi_spec: Path | None = None
        self.plugin_dir = self.kubelet_root / DEVICE_PLUGINS_DIR
        self.kubelet_socket = self.plugin_dir / KUBELET_SOCKET
        self.poll_s = poll_s
        self.register_timeout_s = register_timeout_s
        self._on_change = on_change or (lambda: None)
        self._backoff = backoff or Backoff()
        self._rng = rng or random.Random()
        self._view: NodeView | None = None
        self._entries: dict[str, _Entry] = {}
        self._servers: tuple[PluginServer, ...] = ()  # what on_view wakes, swapped whole
        self._lock = threading.Lock()  # entries and their states; never held across a call
        # one reconciliation at a time (the thread's ticks and a changed view's), each from the
        # view current when it starts
        self._reconciling = threading.RLock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._channels: set[grpc.Channel] = set()  # of the Register calls in flight
        self._kubelet: Identity | None = None
        self._waiting_logged = False
        self._serve_errors: dict[str, str] = {}
        self.registrations = 0  # successful Register calls, for status and tests

    # -- Component protocol --------------------------------------------------------------------

    def on_view(self, view: NodeView) -> None:
        if self.ownership is not None:
            self.ownership.set_view(view)
        self._write_cdi_spec(view)  # before any Allocate can hand out a name it defines
        old = self._view
        changed = old is None or [shape(r) for r in old.resources] != [
            shape(r) for r in view.resources
        ]
        if changed and self._thread is not None:
            with self._reconciling:
                # a changed resource's server goes before anyone sees the new view through
                # it: the kubelet learns the new devices from the new server's registration
                self._retire({r.name: shape(r) for r in view.resources})
                self._view = view
                self._reconcile()  # serve the new ones now; registering stays in the background
        else:
            self._view = view
        for server in self._servers:
            server.notify()

    def _write_cdi_spec(self, view: NodeView) -> None:
        """The spec the ``cdi-annotations``/``cdi-cri`` strategies' device names resolve
        against (a runtime refuses a container whose CDI device has no spec); rewritten only
        when it changes. A failure is logged once per distinct reason; Allocate still answers."""
        if self.cdi_root is None:
            return
        try:
            self.cdi_spec = write_device_plugin_spec(view, self.cdi_root, self._driver())
        except (OSError, ValueError) as exc:
            if str(exc) != self._cdi_error:
                log.error(
                    "cannot write the device plugin's CDI spec under %s: %s", self.cdi_root, exc
                )
                self._cdi_error = str(exc)
            return
        if self._cdi_error:
            log.info("wrote the device plugin's CDI spec %s", self.cdi_spec)
        self._cdi_error = ""

    def start(self) -> None:
        """Serve every resource now (registration follows in the background)."""
        self._stopping.clear()
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="dp-register")
        if self.ownership is not None:
            self._start_ownership(self.ownership)
        self._reconcile()
        self._thread = threading.Thread(target=self._run, name="dp-reconcile", daemon=True)
        self._thread.start()

    # -- the shared ledger ---------------------------------------------------------------------

    def _start_ownership(self, ownership: GpuOwnership) -> None:
        """Holdings from the kubelet's checkpoint, streams woken on every ledger change, and
        the thread that releases what PodResources no longer lists."""
        view = self._view
        if view is not None:
            ownership.restore_device_plugin(read_device_checkpoint(self.kubelet_root), view)
        ownership.subscribe(self._notify_streams)
        self._release_thread = threading.Thread(
            target=self._release_loop, name="dp-podresources", daemon=True
        )
        self._release_thread.start()

    def _notify_streams(self) -> None:
        for server in self._servers:
            server.notify()

    def _offered(self) -> NodeView:
        """What the servers list and allocate from: the view less what the ledger withholds."""
        view = self._current()
        return view if self.ownership is None else self.ownership.device_plugin_view(view)

    def _list_pods(self) -> Sequence[PodResources]:
        if self._pod_resources is not None:
            return self._pod_resources()
        if self._pr_client is None:
            self._pr_client = PodResourcesClient.for_kubelet_root(self.kubelet_root)
        return self._pr_client.list()

    def release_once(self) -> bool:
        """One PodResources round (the thread's, callable from tests); True if it answered."""
        ownership = self.ownership
        if ownership is None or not ownership.device_plugin_holdings():
            return False
        started = ownership.now()
        try:
            pods = self._list_pods()
        except Exception as exc:  # the kubelet restarting: keep the holdings, ask again
            log.debug("PodResources List failed: %s", exc)
            return False
        ownership.observe_pod_resources(pods, started)
        return True

    def _release_loop(self) -> None:
        while not self._stopping.wait(self.release_poll_s):
            try:
                self.release_once()
            except Exception:  # never let it die: the next round tries again
                log.exception("releasing device-plugin holdings")

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self._release_thread is not None:
            self._release_thread.join(timeout=5)
            self._release_thread = None
        if self._pr_client is not None:
            self._pr_client.close()
            self._pr_client = None
        with self._lock:
            channels = list(self._channels)
        for channel in channels:  # a hung Register returns at once
            channel.close()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
            self._servers = ()
        for entry in entries:
            entry.server.stop()

    # -- what the agent reports ----------------------------------------------------------------

    def status(self) -> dict[str, dict[str, Any]]:
        """Per resource: its socket, whether the kubelet took it, and the registration state."""
        with self._lock:
            return {
                name: {
                    "socket": str(e.server.socket_path),
                    "registered": e.state == REGISTERED,
                    "registration": e.state,
                    "registrationError": e.error,
                }
                for name, e in self._entries.items()
            }

    def servers(self) -> dict[str, PluginServer]:
        with self._lock:
            return {name: e.server for name, e in self._entries.items()}

    # -- the reconciler ------------------------------------------------------------------------

    def _current(self) -> NodeView:
        view = self._view
        if view is None:
            raise RuntimeError("the device-plugin component has no view yet")
        return view

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.poll_s)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self._reconcile()
            except Exception:  # never let the reconciler die: the next tick tries again
                log.exception("device-plugin reconciler")

    def _reconcile(self) -> None:
        with self._reconciling:
            self._reconcile_locked()

    def _reconcile_locked(self) -> None:
        view = self._view
        if view is None:
            return
        now = time.monotonic()
        kubelet = identity(self.kubelet_socket)
        new_kubelet = kubelet is not None and kubelet != self._kubelet
        restarted = new_kubelet and self._kubelet is not None
        self._kubelet = kubelet
        wanted = {r.name: shape(r) for r in view.resources}
        changed = self._retire(wanted)
        with self._lock:
            for name in sorted(wanted):
                if name not in self._entries:
                    changed |= self._serve(name, wanted[name], now)
            if restarted:
                log.warning(
                    "kubelet.sock is new (kubelet restart): registering %d resources again",
                    len(self._entries),
                )
            for name, entry in self._entries.items():
                if new_kubelet:  # a kubelet appeared or came back: everyone, right away
                    entry.needs, entry.due = True, now
                    entry.backoff.reset()
                elif self._dropped(entry, now):
                    log.warning(
                        "%s: the kubelet closed its ListAndWatch stream and opened none for "
                        "%.1f s: registering again",
                        name,
                        DROP_GRACE_S,
                    )
                    entry.needs, entry.due = True, now
            due = [e for e in self._entries.values() if e.needs and not e.in_flight]
            if kubelet is None:
                for entry in due:
                    changed |= self._set_state(entry, WAITING, "")
                if due and not self._waiting_logged:
                    log.info(
                        "no %s yet: %d resources wait for the kubelet",
                        self.kubelet_socket,
                        len(due),
                    )
                    self._waiting_logged = True
                due = []
            else:
                self._waiting_logged = False
                due = [e for e in due if e.due <= now]
            for entry in due:
                entry.in_flight = True
                entry.target = kubelet
                entry.attempts += 1
                if entry.state not in (RETRYING,):
                    changed |= self._set_state(entry, REGISTERING, entry.error)
            self._servers = tuple(e.server for e in self._entries.values())
        for entry in due:
            assert self._pool is not None
            self._pool.submit(self._register, entry)
        if changed:
            self._on_change()

    def _retire(self, wanted: dict[str, ResourceView]) -> bool:
        """Stop the servers whose resource went away or changed, or whose socket vanished;
        True if any was stopped."""
        retired = False
        with self._lock:
            for name, entry in list(self._entries.items()):
                if name not in wanted or entry.shape != wanted[name]:
                    log.info("%s changed: stopping its server", name)
                elif not entry.server.socket_intact():
                    log.warning(
                        "socket %s was removed (kubelet restart?): serving again",
                        entry.server.endpoint,
                    )
                else:
                    continue
                del self._entries[name]
                entry.server.stop()
                retired = True
            self._servers = tuple(e.server for e in self._entries.values())
        return retired

    def _dropped(self, entry: _Entry, now: float) -> bool:
        idle = entry.server.servicer.idle_since
        return (
            entry.state == REGISTERED
            and not entry.needs
            and idle is not None
            and entry.registered_at is not None
            and idle > entry.registered_at
            and now - idle >= DROP_GRACE_S
        )

    def _serve(self, name: str, resource: ResourceView, now: float) -> bool:
        """Serve ``name`` (lock held); False when it could not be (tried again next tick)."""
        server = PluginServer(
            name, self._offered, self.kubelet_root, driver=self._driver, guard=self.ownership
        )
        try:
            server.start()
        except Exception as exc:
            message = str(exc)
            if self._serve_errors.get(name) != message:
                log.error("cannot serve %s on %s: %s", name, server.socket_path, message)
                self._serve_errors[name] = message
            return False
        self._serve_errors.pop(name, None)
        self._entries[name] = _Entry(
            server, resource, due=now, backoff=replace(self._backoff, failures=0)
        )
        return True

    def _set_state(self, entry: _Entry, state: str, error: str) -> bool:
        if entry.state == state and entry.error == error:
            return False
        entry.state, entry.error = state, error
        return True

    def _register(self, entry: _Entry) -> None:
        """One Register call, on a pool thread, no lock held while it runs."""
        server = entry.server
        channel = grpc.insecure_channel(unix_target(self.kubelet_socket))
        with self._lock:
            self._channels.add(channel)
        error = ""
        started = time.monotonic()
        try:
            register(
                self.kubelet_socket,
                server.endpoint,
                server.resource,
                timeout_s=self.register_timeout_s,
                channel=channel,
            )
        except RegistrationError as exc:
            error = str(exc)
        finally:
            with self._lock:
                self._channels.discard(channel)
            channel.close()
        with self._lock:
            entry.in_flight = False
            if self._entries.get(server.resource) is not entry or self._stopping.is_set():
                return  # replaced or stopping meanwhile: its successor registers
            if not error and entry.target != self._kubelet:
                entry.due = time.monotonic()  # a kubelet that is gone now took it: again
            elif not error:
                entry.needs = False
                entry.registered_at = time.monotonic()
                entry.backoff.reset()
                server.registered = True
                self.registrations += 1
                was = entry.state
                self._set_state(entry, REGISTERED, "")
                log.info(
                    "registered %s with the kubelet (%.0f ms%s)",
                    server.resource,
                    (entry.registered_at - started) * 1000,
                    f", after {entry.attempts} attempts" if was == RETRYING else "",
                )
                entry.attempts = 0
            else:
                delay = entry.backoff.next_delay(self._rng)
                entry.due = time.monotonic() + delay
                if entry.state != RETRYING:
                    log.warning(
                        "%s; retrying with backoff (next in %.2f s, at most %.0f s apart)",
                        error,
                        delay,
                        entry.backoff.maximum_s,
                    )
                else:
                    log.debug("%s; next try in %.2f s", error, delay)
                self._set_state(entry, RETRYING, error)
        self._wake.set()
        self._on_change()
