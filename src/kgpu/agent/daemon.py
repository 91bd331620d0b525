"""The node agent daemon: a thin shell that keeps the served node view current.

State is two values: the *base* view (hardware + configs + labels, from ``build_node_view``)
and the *health* state (:mod:`kgpu.node.health`). The view served to the kubelet is
``base.with_health(health.unhealthy)``. Threads only feed inputs in and publish the result:

* health: ``backend.wait_events`` -> ``on_event`` -> publish (Unhealthy reaches ListAndWatch
  as soon as the stream thread wakes, well within 100 ms);
* probe: every ``probe_interval_s`` each GPU is probed -> ``on_probe`` (a GPU not answering is
  Unhealthy; an Unhealthy one that answers with no critical XID within the quiet period
  recovers);
* watch (every ``watch_interval_s``): our sockets (kubelet restart deletes them -> serve and
  register again), ``kubelet.sock`` (a new one -> register again), config and labels files
  (changed -> reload), SIGHUP requests, pending registrations, the fault directory.

A reload that fails keeps the last good base view serving and logs each field problem. A new
base view restarts only the servers whose resource changed; the others keep their streams.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgpu.agent import components as comps
from kgpu.agent.faults import process_fault_dir
from kgpu.agent.inputs import fingerprint, read_labels_file
from kgpu.agent.nfd import write_features
from kgpu.drivers.component import Component
from kgpu.drivers.mps import MpsManager
from kgpu.errors import FieldError, KgpuError
from kgpu.hardware.backend import Backend, XidEvent
from kgpu.hardware.model import Machine
from kgpu.kubelet.cdi import write_atomic
from kgpu.kubelet.deviceplugin.registration import (
    DEVICE_PLUGINS_DIR,
    KUBELET_SOCKET,
    RegistrationError,
)
from kgpu.kubelet.deviceplugin.server import PluginServer
from kgpu.node import health
from kgpu.node.model import NodeView
from kgpu.store import ObjectStore

log = logging.getLogger(__name__)

DEFAULT_KUBELET_ROOT = Path("/var/lib/kubelet")
DEFAULT_CDI_ROOT = Path("/var/run/cdi")
STATUS_FILE = Path("kgpu") / "agent-status.json"


@dataclass
class AgentOptions:
    machine: str = "nvml"
    config_files: tuple[Path, ...] = ()
    config_name: str | None = None
    mig_config_name: str | None = None
    node_name: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    labels_file: Path | None = None
    kubelet_root: Path = DEFAULT_KUBELET_ROOT
    nfd_features_dir: Path | None = None
    metrics_address: str | None = None
    clique: str | None = None  # built-in profiles only: their NVLink fabric clique
    # the Kubernetes API server: a kubeconfig file, the pod's service account, or neither (an
    # in-memory store: ResourceSlices stay in the agent and claims cannot be read)
    kubeconfig: Path | None = None
    in_cluster: bool = False
    hostname_label: str = "Hostname"  # dcgm-exporter releases; its main branch says "hostname"
    cdi_root: Path = DEFAULT_CDI_ROOT
    dra: bool | None = None  # None: on when the DRA module is installed
    health_quiet_period_s: float = health.DEFAULT_QUIET_PERIOD_S
    health_probe_interval_s: float = 5.0
    ignore_xids: frozenset[int] = frozenset()
    fault_dir: Path | None = None
    status_file: Path | None = None
    watch_interval_s: float = 0.2

    @property
    def status_path(self) -> Path:
        return self.status_file or self.kubelet_root / STATUS_FILE


def merge_machines(old: Machine | None, new: Machine) -> Machine:
    """A fresh snapshot, keeping GPUs that vanished from it (a GPU that fell off the bus stays
    advertised, Unhealthy, instead of silently disappearing from the kubelet's list)."""
    if old is None:
        return new
    present = {g.uuid for g in new.gpus}
    kept = [g for g in old.gpus if g.uuid not in present]
    if not kept:
        return new
    return new.with_gpus(tuple(sorted([*new.gpus, *kept], key=lambda g: g.index)))


class Agent:
    """One node's agent. ``start()`` serves, ``stop()`` removes every socket."""

    def __init__(
        self,
        options: AgentOptions,
        backend: Backend | None = None,
        store: ObjectStore | None = None,
    ) -> None:
        self.options = options
        self._backend = backend
        self._store = store
        self._owns_store = False  # a store passed in stays open: its owner closes it
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._reload_requested = threading.Event()
        self._threads: list[threading.Thread] = []
        self._machine: Machine | None = None
        self._base: NodeView | None = None
        self._served: NodeView | None = None
        self._health = health.HealthState()
        self._servers: dict[str, PluginServer] = {}
        self._pending: set[str] = set()  # resources serving but not yet registered
        self._kubelet_sock_inode: int | None = None
        self._fingerprint: tuple[tuple[str, str], ...] = ()
        self.components: list[Component] = []
        self.mps = MpsManager(use_binary=options.machine == "nvml")
        self.last_error: str = ""
        self.reloads = 0
        self.registrations = 0

    # -- public surface ----------------------------------------------------------------------

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            from kgpu.hardware import open_backend

            self._backend = open_backend(
                self.options.machine, hostname=self.options.node_name, clique=self.options.clique
            )
        return self._backend

    def cluster_store(self) -> ObjectStore | None:
        """The Kubernetes API the DRA drivers publish to and read claims from: the store given
        to the constructor, else one built from ``--kubeconfig`` / ``--in-cluster``, else None
        (the DRA component then keeps an in-memory store of its own)."""
        if self._store is None and (self.options.kubeconfig or self.options.in_cluster):
            from kgpu.cluster.kube import KubeStore

            kubeconfig = self.options.kubeconfig
            self._store = KubeStore.from_config(None if kubeconfig is None else str(kubeconfig))
            self._owns_store = True
            log.info("talking to the Kubernetes API at %s", self._store.host)
        return self._store

    def view(self) -> NodeView:
        """The view served right now (health applied)."""
        served = self._served
        if served is None:
            raise RuntimeError("the agent has not started")
        return served

    def start(self) -> None:
        """Build the first view (FieldError if the inputs are bad) and start serving."""
        self._machine = self.backend.snapshot()
        self._fingerprint = self._input_fingerprint()
        base = self._build_view()
        with self._lock:
            self._base = base
            self._served = base
            self._apply(None, base)
        self._start_components()
        for target, name in (
            (self._health_loop, "health"),
            (self._probe_loop, "probe"),
            (self._watch_loop, "watch"),
        ):
            thread = threading.Thread(target=target, name=f"agent-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._write_status()

    def request_reload(self) -> None:
        """Ask for a reload (SIGHUP): the watch thread rebuilds the view."""
        self._reload_requested.set()

    def stop(self) -> None:
        self._stopping.set()
        for component in reversed(self.components):
            try:
                component.stop()
            except Exception as exc:  # a component's failure must not keep sockets around
                log.error("stopping %s failed: %s", type(component).__name__, exc)
        with self._lock:
            for server in self._servers.values():
                server.stop()
            self._servers.clear()
            self.mps.stop_all()
        for thread in self._threads:
            thread.join(timeout=2)
        try:
            self.backend.close()
        except Exception as exc:
            log.debug("closing backend: %s", exc)
        close_store = getattr(self._store, "close", None)
        if self._owns_store and close_store is not None:
            close_store()
        self._write_status(stopped=True)

    # -- building views ----------------------------------------------------------------------

    def _labels(self) -> dict[str, str]:
        labels = dict(self.options.labels)
        if self.options.labels_file is not None:
            labels.update(read_labels_file(self.options.labels_file))
        return labels

    def _input_fingerprint(self) -> tuple[tuple[str, str], ...]:
        paths = list(self.options.config_files)
        if self.options.labels_file is not None:
            paths.append(self.options.labels_file)
        return fingerprint(paths)

    def _build_view(self) -> NodeView:
        from kgpu.config import load_config_files
        from kgpu.node.view import build_node_view

        assert self._machine is not None
        configs = load_config_files(self.options.config_files)
        return build_node_view(
            self._machine,
            configs,
            self._labels(),
            config_name=self.options.config_name,
            mig_config_name=self.options.mig_config_name,
        )

    def reload(self, reason: str) -> bool:
        """Rebuild the base view; on bad input keep the last good one. True if it changed."""
        try:
            self._machine = merge_machines(self._machine, self.backend.snapshot())
            base = self._build_view()
        except FieldError as exc:
            self.last_error = str(exc)
            for problem in exc.problems:
                log.error("%s: keeping the last good config: %s", reason, problem)
            self._write_status()
            return False
        except KgpuError as exc:
            self.last_error = str(exc)
            log.error("%s: keeping the last good config: %s", reason, exc)
            self._write_status()
            return False
        self.last_error = ""
        self.reloads += 1
        with self._lock:
            old = self._base
            if base == old:
                log.info("%s: node view unchanged", reason)
                self._write_status()
                return False
            self._base = base
            self._health = health.forget_missing(self._health, base.machine)
            log.info("%s: new node view (%s)", reason, ", ".join(self._counts(base)))
            for refusal in base.refused:
                log.error("not serving %s: %s", refusal.resource, refusal.reason)
            if base.mig_pending:
                log.warning("%s", base.mig_pending)
            self._apply(old, base)
        self._write_status()
        return True

    @staticmethod
    def _counts(view: NodeView) -> list[str]:
        return [f"{name}={count}" for name, count in view.counts().items()]

    # -- publishing ----------------------------------------------------------------------------

    def _apply(self, old: NodeView | None, base: NodeView) -> None:
        """Serve ``base`` (with current health): restart only the servers whose resource
        changed, wake every stream, refresh MPS, labels and components. Lock held."""
        served = base.with_health(self._health.unhealthy) if self._health.problems else base
        self._served = served
        old_resources = {r.name: r for r in old.resources} if old is not None else {}
        new_resources = {r.name: r for r in base.resources}
        for name in list(self._servers):
            if name not in new_resources or old_resources.get(name) != new_resources[name]:
                self._servers.pop(name).stop()
                self._pending.discard(name)
        self.mps.sync(served)
        for name in new_resources:
            if name not in self._servers:
                self._serve(name)
        for server in self._servers.values():
            server.notify()
        self._write_labels(served)
        self._notify_components(served)

    def _update_health(
        self, update: Callable[[NodeView, health.HealthState], health.HealthState]
    ) -> None:
        """Apply ``update`` to the health state atomically and publish a change."""
        with self._lock:
            if self._base is None:
                return
            before = self._health
            state = update(self._base, before)
            if state == before:
                return
            self._health = state
            served = self._base.with_health(state.unhealthy)
            self._served = served
            for server in self._servers.values():
                server.notify()
        for uuid in sorted(state.unhealthy - before.unhealthy):
            log.warning("marked Unhealthy: %s (%s)", uuid, state.problems[uuid].reason)
        for uuid in sorted(before.unhealthy - state.unhealthy):
            log.warning("marked Healthy again: %s", uuid)
        self._notify_components(served)
        self._write_status()

    def _serve(self, name: str) -> None:
        server = PluginServer(name, self.view, self.options.kubelet_root)
        try:
            server.start()
        except Exception as exc:
            log.error("cannot serve %s on %s: %s", name, server.socket_path, exc)
            return
        self._servers[name] = server
        self._register(server)

    def _register(self, server: PluginServer) -> None:
        kubelet_sock = server.plugin_dir / KUBELET_SOCKET
        if not kubelet_sock.exists():
            self._pending.add(server.resource)
            return
        try:
            server.register(timeout_s=2.0)
        except RegistrationError as exc:
            log.warning("%s; will retry", exc)
            self._pending.add(server.resource)
            return
        self._pending.discard(server.resource)
        self.registrations += 1

    def _write_labels(self, view: NodeView) -> None:
        directory = self.options.nfd_features_dir
        if directory is None:
            return
        try:
            if write_features(directory, view.labels):
                log.info("wrote %d labels to %s", len(view.labels), directory)
        except OSError as exc:
            log.warning("cannot write NFD features to %s: %s", directory, exc)

    def _notify_components(self, view: NodeView) -> None:
        for component in self.components:
            try:
                component.on_view(view)
            except Exception as exc:
                log.error("%s.on_view failed: %s", type(component).__name__, exc)

    def _start_components(self) -> None:
        opts = self.options
        node = opts.node_name
        wanted: list[Callable[[], Component | None]] = []
        if opts.metrics_address:
            address = opts.metrics_address
            wanted.append(
                lambda: comps.load_metrics(
                    address, self.backend, opts.kubelet_root, node, opts.hostname_label
                )
            )
        if opts.dra is not False:
            wanted.append(
                lambda: comps.load_dra(
                    opts.kubelet_root,
                    opts.cdi_root,
                    node,
                    self.backend,
                    store=self.cluster_store(),
                )
            )
        for make in wanted:
            try:
                component = make()
                if component is None:
                    continue
                component.start()
                component.on_view(self.view())
            except Exception as exc:
                log.error("component failed to start: %s", exc)
                continue
            self.components.append(component)
            log.info("started component %s", type(component).__name__)

    # -- threads -------------------------------------------------------------------------------

    def _health_loop(self) -> None:
        ignored = self.options.ignore_xids
        while not self._stopping.is_set():
            try:
                events = self.backend.wait_events(0.5)
            except Exception as exc:
                log.error("waiting for GPU events failed: %s", exc)
                self._stopping.wait(1.0)
                continue
            for event in events:
                log.warning(
                    "XID %d on %s%s: %s",
                    event.xid,
                    event.gpu_uuid,
                    f" (GI {event.gi_id} CI {event.ci_id})" if event.gi_id is not None else "",
                    "critical" if health.is_critical(event.xid, ignored) else "application error",
                )
            if not events:
                continue
            now = time.monotonic()

            def update(
                base: NodeView,
                state: health.HealthState,
                events: list[XidEvent] = events,
                now: float = now,
            ) -> health.HealthState:
                for event in events:
                    state = health.on_event(state, base.machine, event, now, ignored)
                return state

            self._update_health(update)

    def _probe_loop(self) -> None:
        quiet = self.options.health_quiet_period_s
        while not self._stopping.wait(self.options.health_probe_interval_s):
            with self._lock:
                machine = self._base.machine if self._base is not None else None
            if machine is None:
                continue
            for gpu in machine.gpus:
                try:
                    answered = self.backend.probe(gpu.uuid)
                except Exception:
                    answered = False
                now = time.monotonic()
                uuid = gpu.uuid

                def update(
                    base: NodeView,
                    state: health.HealthState,
                    uuid: str = uuid,
                    answered: bool = answered,
                    now: float = now,
                ) -> health.HealthState:
                    return health.on_probe(state, uuid, answered, now, quiet)

                self._update_health(update)
            # A running daemon's clients come and go without any event: ask every probe round.
            if self.mps.running and self.mps.refresh_clients():
                self._write_status()

    def _watch_loop(self) -> None:
        while not self._stopping.wait(self.options.watch_interval_s):
            try:
                self._watch_once()
            except Exception as exc:  # never let the watcher die
                log.exception("agent watch loop: %s", exc)

    def _watch_once(self) -> None:
        opts = self.options
        if opts.fault_dir is not None and opts.fault_dir.is_dir():
            process_fault_dir(opts.fault_dir, self.backend)
        kubelet_sock = opts.kubelet_root / DEVICE_PLUGINS_DIR / KUBELET_SOCKET
        try:
            inode: int | None = kubelet_sock.stat().st_ino
        except FileNotFoundError:
            inode = None
        with self._lock:
            if self._stopping.is_set():
                return
            restarted = inode is not None and inode != self._kubelet_sock_inode
            first = self._kubelet_sock_inode is None
            self._kubelet_sock_inode = inode
            for name, server in list(self._servers.items()):
                if not server.socket_intact():
                    log.warning(
                        "socket %s was removed (kubelet restart?): serving again", server.endpoint
                    )
                    server.stop()
                    del self._servers[name]
                    self._serve(name)
                elif restarted and not first and name not in self._pending:
                    log.warning("kubelet.sock is new: registering %s again", name)
                    self._register(server)
            if self._base is not None:
                for res in self._base.resources:
                    if res.name not in self._servers:  # failed to serve earlier: try again
                        self._serve(res.name)
            if inode is not None:
                for name in sorted(self._pending):
                    if name in self._servers:
                        self._register(self._servers[name])
        current = self._input_fingerprint()
        if current != self._fingerprint:
            self._fingerprint = current
            self.reload("config or labels changed")
        if self._reload_requested.is_set():
            self._reload_requested.clear()
            self.reload("SIGHUP")

    # -- status ----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self._lock:
            served = self._served
            servers = dict(self._servers)
            pending = set(self._pending)
            problems = self._health.describe()
            mps = self.mps.status()
        resources = {}
        if served is not None:
            for res in served.resources:
                server = servers.get(res.name)
                resources[res.name] = {
                    "socket": str(server.socket_path) if server else None,
                    "registered": bool(server) and res.name not in pending,
                    "devices": res.count,
                    "healthy": res.healthy_count,
                    "sharing": str(res.sharing),
                }
        return {
            "pid": os.getpid(),
            "node": self.options.node_name,
            "machine": self.options.machine,
            "config": served.config_name if served else None,
            "migConfig": served.mig_config_name if served else None,
            # what the device plugin refuses to serve and why, and a MIG layout real GPUs lack
            "refused": {r.resource: r.reason for r in served.refused} if served else {},
            "migPending": served.mig_pending if served else "",
            "resources": resources,
            "unhealthy": problems,
            "mps": mps,
            "components": [type(c).__name__ for c in self.components],
            "lastError": self.last_error,
            "reloads": self.reloads,
            "updated": time.time(),
        }

    def _write_status(self, stopped: bool = False) -> None:
        path = self.options.status_path
        try:
            data = self.status()
            data["state"] = "stopped" if stopped else "running"
            # the health, probe and watch threads all write it: one temporary file each
            write_atomic(path, json.dumps(data, indent=2, default=str) + "\n", mode=0o644)
        except OSError as exc:
            log.debug("cannot write status file %s: %s", path, exc)
