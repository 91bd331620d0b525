"""The node agent daemon: keeps the node view current and hands it to its components.

State is two values: the *base* view (hardware + configs + labels, from ``build_node_view``)
and the *health* state (:mod:`kgpu.node.health`). The view served is
``base.with_health(health.unhealthy)``, less the GPUs the MIG manager is reconfiguring
(``withhold``); every new one goes to each component (:mod:`kgpu.agent.components`: MPS
daemons, device-plugin servers, NFD labels, metrics, DRA, the MIG manager), in order.
The agent itself talks to no kubelet: its threads only feed inputs in:

* health: ``backend.wait_events`` -> ``on_event`` -> publish (the device-plugin component
  wakes its ListAndWatch streams in the publishing thread, registration never in the way);
* probe: every ``probe_interval_s`` each GPU is probed -> ``on_probe`` (a GPU not answering is
  Unhealthy; an Unhealthy one that answers with no critical XID within the quiet period
  recovers);
* watch (every ``watch_interval_s``): the fault directory, config and labels files (changed ->
  reload), SIGHUP requests, the Node's config labels (with an API server: its informer says
  when they changed), the MIG manager's changes. Each step fails alone: a bad fault file or
  config is reported for itself (``<name>.error``, the status file, a log line) and the other
  steps go on.

With ``--kubeconfig``/``--in-cluster`` the agent builds one store for all its components, a
:class:`~kgpu.store.CachedStore` over a :class:`~kgpu.cluster.kube.KubeStore`, so they share
informers: the agent's own Node (:mod:`kgpu.agent.node_watch`) is watched once.
``/healthz`` (:mod:`kgpu.agent.health`) answers from :meth:`Agent.health_check`.

A reload that fails keeps the last good base view serving and logs each field problem. The
agent holds an exclusive lock on its kubelet root (:mod:`kgpu.agent.rootlock`) from before the
first socket to after the last.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kgpu import __version__, releases
from kgpu.agent import components as comps
from kgpu.agent import settings
from kgpu.agent.faults import FaultDir
from kgpu.agent.health import HealthServer
from kgpu.agent.inputs import fingerprint, read_labels_file
from kgpu.agent.nfd import FeaturesComponent
from kgpu.agent.node_watch import NodeWatch
from kgpu.agent.options import AgentOptions
from kgpu.agent.rootlock import RootLock
from kgpu.config.loader import ConfigSet
from kgpu.drivers.component import Component
from kgpu.drivers.deviceplugin import DevicePluginComponent
from kgpu.drivers.dra import DraComponent
from kgpu.drivers.migmanager import MigManager, withhold
from kgpu.drivers.mps import MpsComponent
from kgpu.drivers.ownership import GpuOwnership
from kgpu.errors import FieldError, KgpuError
from kgpu.hardware.backend import Backend, BackendError, XidEvent
from kgpu.hardware.events import Subscription
from kgpu.hardware.model import NVML_SOURCE, Machine
from kgpu.kubelet.cdi import write_atomic
from kgpu.kubelet.nvidia_cdi import NodeDriver
from kgpu.node import health
from kgpu.node.model import NodeView
from kgpu.store import CachedStore, ObjectStore, StoreError

log = logging.getLogger(__name__)

__all__ = ["Agent", "AgentOptions", "merge_machines"]


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
        factories: Sequence[comps.ComponentFactory] = comps.FACTORIES,
    ) -> None:
        self.options = options
        self._backend = backend
        # one store for every component, so they share informers; a store passed in stays
        # open (its owner closes it), only the informers the agent started stop with it
        self._store: CachedStore | None = (
            store if store is None or isinstance(store, CachedStore) else CachedStore(store)
        )
        self._owns_store = False
        self._owns_cache = store is not None and not isinstance(store, CachedStore)
        self._factories = tuple(factories)
        self._lock = threading.RLock()  # base, health, served; never held while publishing
        self._stopping = threading.Event()
        self._started = threading.Event()  # components started, loops running
        self._reload_requested = threading.Event()
        self._node_changed = threading.Event()  # the Node's config labels changed
        self._refresh_requested = threading.Event()  # the MIG manager changed something
        self._threads: list[threading.Thread] = []
        self._ticks: dict[str, float] = {}  # loop -> when it last ran (monotonic)
        self._machine: Machine | None = None
        self._base: NodeView | None = None
        self._served: NodeView | None = None
        self._configs: ConfigSet | None = None  # what the base view was built from
        self._health = health.HealthState()
        self._fingerprint: tuple[tuple[str, str], ...] = ()
        self._root_lock = RootLock(options.lock_path, options.kubelet_root)
        self._faults = (
            FaultDir(options.fault_dir, self, self._served_machine)
            if options.fault_dir is not None
            else None
        )
        # views go to each component in order; a newer view never overtakes an older one
        self._sequence = 0
        self._delivered: dict[int, int] = {}
        self._component_locks: dict[int, threading.Lock] = {}
        self.components: list[Component] = []
        self.device_plugin: DevicePluginComponent | None = None
        self.mps: MpsComponent | None = None
        self.mig_manager: MigManager | None = None
        self.features: FeaturesComponent | None = None
        # one owner per GPU: the ledger both kubelet APIs share, when both run
        self.ownership: GpuOwnership | None = (
            GpuOwnership() if options.device_plugin and options.dra is not False else None
        )
        self.node_watch: NodeWatch | None = None
        self.health_server: HealthServer | None = None
        self.kubernetes_version: str | None = None
        #: the supported release whose behaviour the agent gives its API server (kgpu.releases)
        self.release: str | None = None
        self.driver: NodeDriver | None = None
        self._driver_key: tuple[object, ...] | None = None
        self._status_lock = threading.Lock()  # computed and written together: newest wins
        self.last_error: str = ""
        # NVML could not start and failOnInitError is false: serving nothing, and why
        self.init_error: str = ""
        self.reloads = 0

    # -- public surface ----------------------------------------------------------------------

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            from kgpu.hardware import open_backend

            self._backend = open_backend(
                self.options.machine, hostname=self.options.node_name, clique=self.options.clique
            )
        return self._backend

    def cluster_store(self) -> CachedStore | None:
        """The Kubernetes API every component talks to: the store given to the constructor,
        else one built from ``--kubeconfig`` / ``--in-cluster`` (user agent
        ``kgpu-agent/<version>``, ``--kube-qps``/``--kube-burst``), else None (the DRA component
        then keeps an in-memory store of its own)."""
        if self._store is None and self.options.store_configured:
            from kgpu.cluster.kube import KubeStore

            kubeconfig = self.options.kubeconfig
            kube = KubeStore.from_config(
                None if kubeconfig is None else str(kubeconfig),
                user_agent=f"kgpu-agent/{__version__}",
                qps=self.options.kube_qps,
                burst=self.options.kube_burst,
            )
            self._store = CachedStore(kube)
            self._owns_store = True
            log.info("talking to the Kubernetes API at %s", kube.host)
        return self._store

    def view(self) -> NodeView:
        """The view served right now (health applied)."""
        served = self._served
        if served is None:
            raise RuntimeError("the agent has not started")
        return served

    def health_check(self) -> tuple[bool, str]:
        """What ``/healthz`` answers: healthy once the components have started and while the
        agent's loops keep running (each within ``health_stall_s``); else why not."""
        if self._stopping.is_set():
            return False, "stopping"
        if not self._started.is_set():
            return False, "starting: reading the GPUs, building the node view, starting components"
        now = time.monotonic()
        for loop, last in sorted(self._ticks.items()):
            if now - last > self.options.health_stall_s:
                return False, (
                    f"the agent's {loop} loop has not run for {now - last:.1f} s "
                    f"(more than {self.options.health_stall_s:g} s): it is stuck"
                )
        if self.init_error:
            return True, f"ok, serving no devices: {self.init_error}"
        return True, "ok"

    def start(self) -> None:
        """Build the first view (FieldError if the inputs are bad; KgpuError when another
        agent serves the kubelet root or the GPUs cannot be read) and start serving."""
        self._root_lock.acquire()
        try:
            if self.options.health_address is not None:  # probes get "starting" from now on
                self.health_server = HealthServer(self.options.health_address, self.health_check)
                self.health_server.start()
            store = self.cluster_store()
            if store is not None:
                self._watch_node(store)
            self._machine = self._first_snapshot()
            self._fingerprint = self._input_fingerprint()
            base, configs = self._build_view()
        except BaseException:
            self._close_edges()
            self._root_lock.release()
            raise
        with self._lock:
            self._base = base
            self._configs = configs
            self._update_driver(base, configs)
            self._served = base
            sequence = self._next_sequence()
        self._start_components(base, sequence)
        for target, name in (
            (self._health_loop, "health"),
            (self._probe_loop, "probe"),
            (self._watch_loop, "watch"),
        ):
            if name != "probe":  # the probe loop sleeps for its interval: never "stuck"
                self._ticks[name] = time.monotonic()
            thread = threading.Thread(target=target, name=f"agent-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._started.set()
        self._write_status()

    def request_reload(self) -> None:
        """Ask for a reload (SIGHUP): the watch thread rebuilds the view."""
        self._reload_requested.set()

    def request_refresh(self) -> None:
        """Something the served view depends on changed (the MIG manager withheld or released
        GPUs, or changed their layout): the watch thread re-reads the GPUs and re-serves."""
        self._refresh_requested.set()

    def stop(self) -> None:
        """Stop every component and thread; the status file and the root lock only when this
        agent held the root (a second agent that was refused leaves the first one's alone)."""
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=2)
        for component in reversed(self.components):
            try:
                component.stop()
            except Exception as exc:  # a component's failure must not keep sockets around
                log.error("stopping %s failed: %s", type(component).__name__, exc)
        try:
            if self._backend is not None:  # never opened (a refused start): nothing to close
                self._backend.close()
        except Exception as exc:
            log.debug("closing backend: %s", exc)
        self._close_edges()
        if self._root_lock.held:
            self._write_status(stopped=True)
            self._root_lock.release()

    def _close_edges(self) -> None:
        """The health endpoint, the Node watch and the store (idempotent)."""
        if self.node_watch is not None:
            self.node_watch.stop()
            self.node_watch = None
        if self._store is not None:
            if self._owns_store:
                self._store.close()
                self._store, self._owns_store = None, False
            elif self._owns_cache:  # a CachedStore passed in keeps its informers: its owner's
                self._store.stop_informers()
        if self.health_server is not None:
            self.health_server.stop()
            self.health_server = None

    # -- the cluster -------------------------------------------------------------------------

    def _watch_node(self, store: CachedStore) -> None:
        version = getattr(store.store, "server_version", None)
        if version is not None:
            try:
                self.kubernetes_version = str(version()) or None
            except StoreError as exc:  # the DRA slices then take the newest shape
                log.warning("cannot read the API server's version: %s", exc)
        if self.kubernetes_version is not None:
            # the start-up check: outside the supported window, say so and act as the
            # nearest supported release (never stop: the node's GPUs still need serving)
            minor, problem = releases.server_release(self.kubernetes_version)
            self.release = f"1.{minor}"
            if problem:
                log.warning("API server %s: %s", self.kubernetes_version, problem)
            else:
                window = releases.window()
                log.info("API server %s: supported (%s)", self.kubernetes_version, window)
        self.node_watch = NodeWatch(
            store,
            self.options.node_name,
            self._node_changed.set,
            sync_timeout_s=self.options.kube_sync_timeout_s,
        )
        self.node_watch.start()

    def _node_uid(self) -> str | None:
        watch = self.node_watch
        return watch.uid() if watch is not None else None

    # -- the fault directory's view of the backend ---------------------------------------------

    def inject_xid(self, gpu: int | str, xid: int, **where: Any) -> Any:
        inject: Callable[..., Any] | None = getattr(self.backend, "inject_xid", None)
        if inject is None:
            raise BackendError("faults apply to simulated machines only")
        return inject(gpu, xid, **where)

    def set_nvml_failure(self, gpu: int | str, failing: bool) -> None:
        fail: Callable[..., None] | None = getattr(self.backend, "set_nvml_failure", None)
        if fail is None:
            raise BackendError("faults apply to simulated machines only")
        fail(gpu, failing)

    def _served_machine(self) -> Machine | None:
        served = self._served
        return served.machine if served is not None else None

    # -- building views ----------------------------------------------------------------------

    def _labels(self) -> dict[str, str]:
        """The node's labels: its Node object's (with an API server), then ``--label``, then
        the labels file (later ones win)."""
        labels = self.node_watch.labels() if self.node_watch is not None else {}
        labels.update(self.options.labels)
        if self.options.labels_file is not None:
            labels.update(read_labels_file(self.options.labels_file))
        return labels

    def inputs(self) -> tuple[ConfigSet, dict[str, str]]:
        """The configs the served view was built from and the node's labels now (the MIG
        manager's inputs: a bad new config file leaves it the last good one too)."""
        from kgpu.config.loader import EMPTY

        configs = self._configs
        return (configs if configs is not None else EMPTY), self._labels()

    def _input_fingerprint(self) -> tuple[tuple[str, str], ...]:
        paths = list(self.options.config_files)
        if self.options.labels_file is not None:
            paths.append(self.options.labels_file)
        return fingerprint(paths)

    def _first_snapshot(self) -> Machine:
        """The GPUs at start. Without NVML the agent exits, unless failOnInitError is false:
        then, as upstream's plugin does, it serves no devices and keeps running, saying why."""
        try:
            return self.backend.snapshot()
        except BackendError as exc:
            error = f"--machine {self.options.machine}: {exc}"
            configs = None
            try:
                from kgpu.config import load_config_files

                configs = load_config_files(self.options.config_files)
            except KgpuError:
                pass
            if settings.fail_on_init_error(self.options, configs, self._labels()):
                raise KgpuError(error) from None
        from kgpu.hardware.simulated import SimulatedBackend

        self.init_error = error
        self.last_error = error
        log.error(
            "%s; failOnInitError is false: serving no devices and waiting (restart the agent "
            "once the driver is there)",
            error,
        )
        self._backend = SimulatedBackend(
            Machine(
                profile=self.options.machine,
                driver_version="",
                cuda_driver_version=(0, 0),
                hostname=self.options.node_name,
                source=NVML_SOURCE,  # nothing simulated: no MIG layout is made up either
            )
        )
        return self._backend.snapshot()

    def _build_view(self) -> tuple[NodeView, ConfigSet]:
        from kgpu.config import load_config_files
        from kgpu.node.view import build_node_view

        assert self._machine is not None
        configs = load_config_files(self.options.config_files)
        view = build_node_view(
            self._machine,
            configs,
            self._labels(),
            config_name=self.options.config_name,
            mig_config_name=self.options.mig_config_name,
            mig_strategy=self.options.mig_strategy,
            flags=self.options.plugin_flags,
        )
        return view, configs

    def _update_driver(self, view: NodeView, configs: ConfigSet) -> None:
        """The node's driver for CDI specs and device specs: on real GPUs only (a simulated
        node has no driver to carry), rebuilt when the selected config's driver flags change."""
        if type(self.backend).__name__ != "NvmlBackend":
            self.driver = None
            return
        try:
            config = settings.plugin_config(self.options, configs, self._labels(), view.config_name)
        except KgpuError as exc:  # the labels changed under us: the next reload decides
            log.debug("keeping the node's driver settings: %s", exc)
            return
        key = settings.driver_key(self.options, config)
        if key != self._driver_key:
            self.driver = settings.node_driver(self.options, config)
            self._driver_key = key
            log.info("driver root for CDI and device specs: %s", self.driver.root)

    def reload(self, reason: str, *, quiet: bool = False) -> bool:
        """Rebuild the base view; on bad input keep the last good one. True if the served
        view changed. ``quiet``: no log line when nothing changed."""
        try:
            self._machine = merge_machines(self._machine, self.backend.snapshot())
            base, configs = self._build_view()
        except FieldError as exc:
            self.last_error = str(exc)
            for problem in exc.problems:
                log.error("%s: keeping the last good config: %s", reason, problem)
            self._write_status()
            return False
        except (KgpuError, BackendError, OSError) as exc:
            self.last_error = str(exc)
            log.error("%s: keeping the last good config: %s", reason, exc)
            self._write_status()
            return False
        self.last_error = self.init_error
        self.reloads += 1
        with self._lock:
            self._configs = configs
            self._update_driver(base, configs)
            if base != self._base:
                self._base = base
                self._health = health.forget_missing(self._health, base.machine)
            candidate = self._serve_base()
            served: NodeView | None = None
            if candidate != self._served:
                served = self._served = candidate
                sequence = self._next_sequence()
        if served is None:
            (log.debug if quiet else log.info)("%s: node view unchanged", reason)
        else:
            log.info("%s: new node view (%s)", reason, ", ".join(self._counts(served)))
            for refusal in base.refused:
                log.error("not serving %s: %s", refusal.resource, refusal.reason)
            if base.mig_pending:
                log.warning("%s", base.mig_pending)
            self._publish(served, sequence)
        self._write_status()
        return served is not None

    @staticmethod
    def _counts(view: NodeView) -> list[str]:
        return [f"{name}={count}" for name, count in view.counts().items()]

    # -- publishing ----------------------------------------------------------------------------

    def _serve_base(self) -> NodeView:
        """The view to serve (lock held): the base view with current health, less the GPUs
        the MIG manager is reconfiguring."""
        assert self._base is not None
        served = (
            self._base.with_health(
                self._health.unhealthy,
                {u: p.reason for u, p in self._health.problems.items()},
            )
            if self._health.problems
            else self._base
        )
        manager = self.mig_manager
        if manager is not None and manager.withheld():
            served = withhold(served, manager.withheld())
        return served

    def _next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence

    def _publish(self, view: NodeView, sequence: int) -> None:
        """Hand ``view`` to every component in order, each under its own lock, skipping a
        component that already has a newer view (threads publish concurrently). The
        components after the MPS daemons get the view less the MPS replicas of GPUs whose daemon
        failed (:func:`kgpu.drivers.mps.withhold_failed`): a share nothing enforces is not
        offered."""
        for component in list(self.components):
            key = id(component)
            with self._component_locks.setdefault(key, threading.Lock()):
                if self._delivered.get(key, 0) >= sequence:
                    continue
                self._delivered[key] = sequence
                try:
                    component.on_view(view)
                except Exception as exc:
                    log.error("%s.on_view failed: %s", type(component).__name__, exc)
            if isinstance(component, MpsComponent):
                view = component.served(view)

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
            served = self._serve_base()
            self._served = served
            sequence = self._next_sequence()
        self._publish(served, sequence)
        for uuid in sorted(state.unhealthy - before.unhealthy):
            log.warning("marked Unhealthy: %s (%s)", uuid, state.problems[uuid].reason)
        for uuid in sorted(before.unhealthy - state.unhealthy):
            log.warning("marked Healthy again: %s", uuid)
        self._write_status()

    def _start_components(self, view: NodeView, sequence: int) -> None:
        context = comps.AgentContext(
            options=self.options,
            backend=self.backend,
            store=self.cluster_store,
            on_change=self._write_status,
            driver=lambda: self.driver,
            kubernetes_version=self.release,
            namespace=settings.agent_namespace(self.options),
            node_uid=self._node_uid,
            inputs=self.inputs,
            view=lambda: self._served,
            refresh=self.request_refresh,
            components=lambda: list(self.components),
            ownership=self.ownership,
        )
        started = view
        for make in self._factories:
            try:
                component = make(context)
                if component is None:
                    continue
                component.on_view(view)  # a component starts from the view it will serve
                component.start()
            except Exception as exc:
                log.error("component %s failed to start: %s", getattr(make, "__name__", make), exc)
                continue
            self._delivered[id(component)] = sequence
            self.components.append(component)
            if isinstance(component, DevicePluginComponent):
                self.device_plugin = component
            elif isinstance(component, MpsComponent):
                self.mps = component
                view = component.served(view)  # the device plugin must not offer failed GPUs
            elif isinstance(component, MigManager):
                self.mig_manager = component
            elif isinstance(component, FeaturesComponent):
                self.features = component
            log.info("started component %s", type(component).__name__)
        served = self._served
        if served is not None and served is not started:  # health changed while they started
            self._publish(served, self._sequence)

    # -- threads -------------------------------------------------------------------------------

    def _health_loop(self) -> None:
        ignored = self.options.ignore_xids
        # The process's one event reader (the exporter reads the same one's last XIDs): its
        # tick, not this loop's, says whether events are still being read.
        subscription = self.backend.events().subscribe()
        try:
            self._health_events(subscription, ignored)
        finally:
            subscription.close()

    def _health_events(self, subscription: Subscription, ignored: frozenset[int]) -> None:
        while not self._stopping.is_set():
            self._ticks["health"] = subscription.hub.last_tick
            events = subscription.wait(0.5)
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

    def _watch_loop(self) -> None:
        steps: tuple[tuple[str, Callable[[], None]], ...] = (
            ("fault directory", self._watch_faults),
            ("configs and labels", self._watch_inputs),
        )
        failing: dict[str, str] = {}
        while not self._stopping.wait(self.options.watch_interval_s):
            self._ticks["watch"] = time.monotonic()
            for name, step in steps:  # one step's failure never skips the others
                try:
                    step()
                    failing.pop(name, None)
                except Exception as exc:
                    if failing.get(name) != str(exc):  # once per distinct failure
                        log.error("watching the %s: %s", name, exc)
                        failing[name] = str(exc)

    def _watch_faults(self) -> None:
        if self._faults is None:
            return
        errors = len(self._faults.errors)
        self._faults.poll()
        if len(self._faults.errors) != errors:
            self._write_status()

    def _watch_inputs(self) -> None:
        current = self._input_fingerprint()
        if current != self._fingerprint:
            self._fingerprint = current
            self.reload("config or labels changed")
        if self._node_changed.is_set():
            self._node_changed.clear()
            self.reload("Node labels changed")
        if self._reload_requested.is_set():
            self._reload_requested.clear()
            self.reload("SIGHUP")
        if self._refresh_requested.is_set():
            self._refresh_requested.clear()
            self.reload("MIG manager", quiet=True)

    # -- status ----------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self._lock:
            served = self._served
            problems = self._health.describe()
        plugin = self.device_plugin.status() if self.device_plugin is not None else {}
        resources = {}
        if served is not None:
            for res in served.resources:
                serving = plugin.get(res.name, {})
                resources[res.name] = {
                    "socket": serving.get("socket"),
                    "registered": bool(serving.get("registered")),
                    "registration": serving.get("registration", "not served"),
                    "registrationError": serving.get("registrationError", ""),
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
            "mps": self.mps.status() if self.mps is not None else [],
            # DRA memory shares: per GPU its MPS daemon, server, ceiling and shares
            "memoryShares": self._memory_shares(),
            "migManager": self.mig_manager.status() if self.mig_manager is not None else None,
            "nodeFeatures": self.features.target if self.features is not None else None,
            "cdiSpec": str(spec) if (spec := self._cdi_spec()) is not None else None,
            "kubernetesVersion": self.kubernetes_version,
            "release": self.release,
            # one owner per GPU: per GPU, its policy, the APIs offering it and its holder
            "gpuOwnership": self._ownership_status(served),
            # upstream environment variables that set something, and those kgpu does not use
            "environment": dict(self.options.environment),
            "environmentUnused": list(self.options.environment_notes),
            "components": [type(c).__name__ for c in self.components],
            "lastError": self.last_error,
            "initError": self.init_error,
            "health": self.health_check()[1],
            "faultErrors": dict(self._faults.errors) if self._faults is not None else {},
            "reloads": self.reloads,
            "updated": time.time(),
        }

    def _memory_shares(self) -> list[dict[str, object]]:
        """The DRA driver's memory-share daemons (:meth:`ShareDaemons.status`): each GPU's
        server and its ``ceilingMiB``, the most a client that drops kgpu's env may use."""
        dra = next((c for c in self.components if isinstance(c, DraComponent)), None)
        if dra is None or dra.gpu is None:
            return []
        return dra.gpu.share_daemons.status()

    def _ownership_status(self, served: NodeView | None) -> list[dict[str, Any]]:
        ownership = self.ownership
        if ownership is None or served is None:
            return []
        from kgpu.node.ownership import offers

        return [
            {
                "gpu": o.index,
                "uuid": o.uuid,
                "policy": o.mode,
                "offeredBy": list(o.offered_by),
                "heldBy": o.holder,
            }
            for o in offers(served, ownership.ledger(), ownership.policy())
        ]

    def _cdi_spec(self) -> Path | None:
        return self.device_plugin.cdi_spec if self.device_plugin is not None else None

    def _write_status(self, stopped: bool = False) -> None:
        path: Path = self.options.status_path
        try:
            # the health, probe, watch and component threads all write it: one at a time, so
            # an older state never lands after a newer one
            with self._status_lock:
                data = self.status()
                data["state"] = "stopped" if stopped else "running"
                write_atomic(path, json.dumps(data, indent=2, default=str) + "\n", mode=0o644)
        except OSError as exc:
            log.debug("cannot write status file %s: %s", path, exc)
