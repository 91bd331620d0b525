"""The ``kgpu controller`` process: informers, leader election, sync workers, the admission
webhook and the health endpoint, wired together.

On every replica: the informers (ComputeDomains, Nodes, Pods, the domains' claim templates,
DaemonSets and ComputeDomainCliques, DeviceClasses) and their indexes, the admission webhook,
the health endpoint, and the leader election loop. On the leader only: the sync workers,
which take keys from one rate-limited work queue (:class:`~kgpu.controller.workqueue.WorkQueue`)
and write through a :class:`~kgpu.controller.fence.FencedStore`. A replica that becomes
leader queues every domain, every orphan and the DeviceClasses once, then syncs only what
events queue. A replica that loses leadership stops its workers and :meth:`Controller.wait`
returns, so the process exits and is restarted as a fresh candidate (client-go's controllers
do the same).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kgpu.computedomain.admission import Mutation, mutate_pod
from kgpu.computedomain.api import ComputeDomain, parse_compute_domain
from kgpu.computedomain.objects import DAEMON_IMAGE
from kgpu.controller.deviceclasses import GROUPS, KEY, DeviceClassKeeper
from kgpu.controller.domains import DomainController
from kgpu.controller.fence import FencedStore, NotLeader
from kgpu.controller.health import HealthServer
from kgpu.controller.index import ClusterIndex, Touched
from kgpu.controller.leaderelection import LeaderElector, LeaseConfig
from kgpu.controller.webhook import AdmissionServer
from kgpu.controller.workqueue import WorkQueue
from kgpu.dra.api import RESOURCE_API
from kgpu.errors import FieldError
from kgpu.store import Backoff, CachedStore, NotFound, ObjectStore, SharedInformers

log = logging.getLogger(__name__)

Key = tuple[str, ...]
LEASE_NAME = "kgpu-controller"
#: A key that keeps failing is retried with backoff this many times, then dropped until its
#: next event (client-go controllers' usual bound).
MAX_RETRIES = 15


@dataclass
class ControllerOptions:
    namespace: str
    identity: str
    lease_name: str = LEASE_NAME
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    workers: int = 2
    device_classes: tuple[str, ...] = GROUPS
    health_address: tuple[str, int] | None = None
    webhook_address: tuple[str, int] | None = None
    webhook_cert_dir: Path | None = None
    webhook_client_ca: Path | None = None  # require the API server's client certificate
    record_events: bool = True
    informer_backoff: Backoff | None = None
    daemon_image: str = DAEMON_IMAGE  # the IMEX DaemonSets' image

    def lease(self) -> LeaseConfig:
        return LeaseConfig(
            self.lease_name,
            self.namespace,
            self.identity,
            self.lease_duration_s,
            self.renew_deadline_s,
            self.retry_period_s,
        )


class Controller:
    """One replica of ``kgpu controller`` over ``store`` (a KubeStore on a cluster)."""

    def __init__(
        self,
        store: ObjectStore,
        options: ControllerOptions,
        *,
        elector_factory: Callable[..., LeaderElector] = LeaderElector,
        lease_store: ObjectStore | None = None,
        webhook_store: ObjectStore | None = None,
    ) -> None:
        """``lease_store`` and ``webhook_store``: clients of their own (own rate limiter and
        connections) for the Lease and for the webhook's reads, so a flood of admission
        reviews can neither delay a renewal (and lose leadership) nor throttle reconciles;
        both default to ``store``."""
        self.options = options
        self.store = store
        self.webhook_store = webhook_store or store
        self.informers = SharedInformers(store, backoff=options.informer_backoff)
        self.elector = elector_factory(
            lease_store or store,
            options.lease(),
            on_started_leading=self._started_leading,
            on_stopped_leading=self._stopped_leading,
            on_new_leader=lambda who: log.info("the leader is %s", who),
        )
        # reads come from the informers where one covers them (as client-go's listers): a
        # create that finds its object already there reads it back from the cache, not the API
        # server (no `get` verb needed; a cache that lags says NotFound and the informer's add
        # event requeues the domain)
        self.fenced = FencedStore(
            CachedStore(store, self.informers), lambda: self.elector.is_leader
        )
        self.index = ClusterIndex(self.informers, options.namespace)
        self.domains = DomainController(
            self.fenced,
            self.index,
            options.namespace,
            identity=options.identity,
            record_events=options.record_events,
            daemon_image=options.daemon_image,
        )
        self.classes = DeviceClassKeeper(self.fenced, self.informers, options.device_classes)
        self.queue: WorkQueue[Key] = WorkQueue()
        self.webhook: AdmissionServer | None = None
        if options.webhook_address is not None:
            cert_dir = options.webhook_cert_dir or Path(".")
            self.webhook = AdmissionServer(
                options.webhook_address,
                cert_dir / "tls.crt",
                cert_dir / "tls.key",
                self.admit,
                client_ca=options.webhook_client_ca,
            )
        self.health: HealthServer | None = None
        if options.health_address is not None:
            self.health = HealthServer(options.health_address, self.healthz, self.readyz)
        self._workers: list[threading.Thread] = []
        self._leading = threading.Event()
        self._done = threading.Event()  # leadership lost, or stopped
        self._stopping = False
        self.lost_leadership = False

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Controller:
        """Start everything but the workers (they start when this replica leads)."""
        if self.health is not None:
            self.health.start()
        self.index.start(self._touched)
        self.classes.start(self.queue.add)
        if self.webhook is not None:
            self.webhook.start()
        self.elector.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Block until leadership is lost or :meth:`stop`; True when that happened."""
        return self._done.wait(timeout)

    def stop(self) -> None:
        """Stop working and leave: a leader releases the Lease after its workers stopped."""
        self._stopping = True
        self.elector.stop()  # calls _stopped_leading when leading, then releases
        self._stop_workers()
        if self.webhook is not None:
            self.webhook.stop()
        if self.health is not None:
            self.health.stop()
        self.classes.stop()
        self.index.stop()
        self.informers.stop()
        self._done.set()

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    # -- leadership --------------------------------------------------------------------------
    def _started_leading(self) -> None:
        self._leading.set()
        for key in [*self.domains.all_keys(), KEY]:
            self.queue.add(key)
        self._workers = [
            threading.Thread(target=self._work, name=f"sync worker {i}", daemon=True)
            for i in range(max(1, self.options.workers))
        ]
        for thread in self._workers:
            thread.start()

    def _stopped_leading(self) -> None:
        self._leading.clear()
        self._stop_workers()
        if not self._stopping:
            self.lost_leadership = True
            log.error("%s lost the leader Lease: stopping", self.options.identity)
            self._done.set()

    def _stop_workers(self) -> None:
        self._leading.clear()
        self.queue.shut_down()
        for thread in self._workers:
            if thread is not threading.current_thread():
                thread.join(timeout=10)
        self._workers = []

    # -- the workers -------------------------------------------------------------------------
    def _touched(self, touched: Touched) -> None:
        for key in self.domains.keys(touched):
            self.queue.add(key)

    def _work(self) -> None:
        while self._leading.is_set():
            key = self.queue.get(timeout=0.5)
            if key is None:
                if self.queue.shutting_down:
                    return
                continue
            try:
                self._sync(key)
                self.queue.forget(key)
            except NotLeader:
                pass  # leadership ended mid-sync: the next leader redoes it
            except Exception as exc:
                if self.queue.retries(key) < MAX_RETRIES:
                    log.info("sync %s failed (%s); retrying", "/".join(key), exc)
                    self.queue.add_rate_limited(key)
                else:
                    log.error(
                        "sync %s failed %d times, dropped: %s", "/".join(key), MAX_RETRIES, exc
                    )
                    self.queue.forget(key)
            finally:
                self.queue.done(key)

    def _sync(self, key: Key) -> None:
        if key == KEY:
            self.classes.sync()
        else:
            self.domains.sync(key)

    # -- admission ---------------------------------------------------------------------------
    def admit(self, pod: dict[str, object], namespace: str) -> Mutation:
        """The webhook's decision for one pod, from this replica's informers."""
        domains: list[ComputeDomain] = []
        for raw in self.index.domains(namespace):
            try:
                domains.append(parse_compute_domain(raw))
            except FieldError:
                continue

        def claim(name: str) -> dict[str, object] | None:
            try:
                return self.webhook_store.get(RESOURCE_API, "ResourceClaim", name, namespace)
            except NotFound:
                return None

        return mutate_pod(
            pod,
            namespace,
            domains,
            claim=claim,
            siblings=self.index.workload_pods,
            nodes=self.index.nodes,
            pods_by_node=self.index.pods_by_node,
        )

    # -- health ------------------------------------------------------------------------------
    def _role(self) -> str:
        leader = self.elector.leader or "unknown"
        role = "leader" if self.elector.is_leader else "standby"
        return f"{role} (identity {self.options.identity}, leader {leader})\n"

    def healthz(self) -> tuple[bool, str]:
        problems = []
        if not self.elector.running and not self._done.is_set():
            problems.append("the leader election loop is not running")
        if self.leading and not any(t.is_alive() for t in self._workers):
            problems.append("this replica leads but no sync worker runs")
        return not problems, self._role() + "".join(f"{p}\n" for p in problems)

    def readyz(self) -> tuple[bool, str]:
        problems = []
        if not self.index.synced:
            problems.append("informers have not listed yet")
        if self.webhook is not None and not self.webhook.serving:
            problems.append("the admission webhook is not serving")
        return not problems, self._role() + "".join(f"{p}\n" for p in problems)
