"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

Why: several controller replicas may run (a standby takes over in seconds when the leader's
node dies), but two that both write would fight over every domain. The Lease is the lock:

- a candidate tries every ``retry_period_s`` (stretched by up to 120 % at random, client-go's
  JitterFactor 1.2) to take the Lease: it creates it when absent, or takes it when the holder
  is empty or has not renewed for ``lease_duration_s`` *as this candidate observed it* (the
  time it last saw the Lease record change, on its own monotonic clock, so clock skew between
  machines does not matter);
- the leader renews every ``retry_period_s``, first with the copy it holds (one PUT, no GET),
  and if no renewal has succeeded for ``renew_deadline_s`` it gives up leadership: it stops
  writing (see :class:`~kgpu.controller.fence.FencedStore`) before anyone else may take over,
  because ``renew_deadline_s < lease_duration_s``;
- every write is a PUT with the ``resourceVersion`` read, so two candidates racing for one
  Lease cannot both win: the second gets a Conflict;
- on a clean stop the leader releases the Lease (empty holder, duration 1 s) so a standby takes
  over at its next try instead of after the lease duration.

The defaults are client-go's (15 s, 10 s, 2 s), and the same checks on them apply.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kgpu.errors import FieldError, FieldProblem
from kgpu.store import AlreadyExists, Conflict, NotFound, ObjectStore

log = logging.getLogger(__name__)

LEASE_API = "coordination.k8s.io/v1"
JITTER_FACTOR = 1.2

Obj = dict[str, Any]


@dataclass(frozen=True)
class LeaseConfig:
    """Where the lock is and how long it holds (client-go's LeaderElectionConfig)."""

    name: str
    namespace: str
    identity: str
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    release_on_stop: bool = True

    def check(self) -> None:
        """client-go's checks, as field errors naming the option."""
        problems = []
        if self.lease_duration_s <= self.renew_deadline_s:
            problems.append(
                FieldProblem(
                    f"{self.lease_duration_s:g}s must be greater than the renew deadline "
                    f"({self.renew_deadline_s:g}s)",
                    "--leader-elect-lease-duration",
                )
            )
        if self.renew_deadline_s <= JITTER_FACTOR * self.retry_period_s:
            problems.append(
                FieldProblem(
                    f"{self.renew_deadline_s:g}s must be greater than {JITTER_FACTOR:g} x the "
                    f"retry period ({self.retry_period_s:g}s)",
                    "--leader-elect-renew-deadline",
                )
            )
        if self.retry_period_s <= 0:
            problems.append(
                FieldProblem("must be greater than zero", "--leader-elect-retry-period")
            )
        if not self.identity:
            problems.append(
                FieldProblem("must not be empty (POD_NAME or the hostname)", "--identity")
            )
        if problems:
            raise FieldError(problems)


def micro_time(when: datetime) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(lease: Obj | None) -> tuple[str, Any, Any, Any, Any]:
    """What identifies a Lease record for change detection (holder, duration, times, count)."""
    spec = (lease or {}).get("spec") or {}
    return (
        str(spec.get("holderIdentity") or ""),
        spec.get("leaseDurationSeconds"),
        spec.get("acquireTime"),
        spec.get("renewTime"),
        spec.get("leaseTransitions"),
    )


class LeaderElector:
    """Runs the election loop for one candidate; see the module docstring."""

    def __init__(
        self,
        store: ObjectStore,
        config: LeaseConfig,
        *,
        on_started_leading: Callable[[], None] = lambda: None,
        on_stopped_leading: Callable[[], None] = lambda: None,
        on_new_leader: Callable[[str], None] = lambda _: None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        rand: Callable[[], float] = random.random,
    ) -> None:
        config.check()
        self.store = store
        self.config = config
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._clock = clock
        self._now = now
        self._rand = rand
        self._lock = threading.Lock()
        self._leading = False
        self._observed: Obj | None = None  # the last Lease object read or written
        self._observed_at = 0.0  # when its record last changed, on our clock
        self._last_renew = 0.0  # when we last renewed successfully, on our clock
        self._leader = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.attempts = 0
        self.last_attempt = 0.0

    # -- state -------------------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """True while this candidate holds the Lease and has renewed it within the renew
        deadline; checked before every write by the fenced store."""
        with self._lock:
            if not self._leading:
                return False
            return self._clock() - self._last_renew < self.config.renew_deadline_s

    @property
    def leader(self) -> str:
        """The holder this candidate last saw ("" before the first read)."""
        with self._lock:
            return self._leader

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the loop ----------------------------------------------------------------------------
    def start(self) -> LeaderElector:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self.run, name="leader election", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """End the loop; a leader releases the Lease (``release_on_stop``)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def run(self) -> None:
        """Acquire, then renew until leadership is lost or :meth:`stop` is called."""
        if not self._acquire():
            return
        self._renew_loop()

    def _acquire(self) -> bool:
        cfg = self.config
        while not self._stop.is_set():
            if self.try_acquire_or_renew():
                log.info("%s: became leader (Lease %s/%s)", cfg.identity, cfg.namespace, cfg.name)
                self._call(self._on_started)
                return True
            self._stop.wait(cfg.retry_period_s * (1.0 + JITTER_FACTOR * self._rand()))
        return False

    def _renew_loop(self) -> None:
        cfg = self.config
        while not self._stop.is_set():
            deadline = self._clock() + cfg.renew_deadline_s
            renewed = False
            while not self._stop.is_set() and self._clock() < deadline:
                if self.try_acquire_or_renew():
                    renewed = True
                    break
                self._stop.wait(min(cfg.retry_period_s, max(0.0, deadline - self._clock())))
            if self._stop.is_set():
                break
            if not renewed:
                self._lose(f"no renewal succeeded for {cfg.renew_deadline_s:g}s")
                return
            self._stop.wait(cfg.retry_period_s)
        self._lose("stopped")  # stop writing first, then let the Lease go
        if cfg.release_on_stop:
            self.release()

    def _lose(self, why: str) -> None:
        with self._lock:
            was = self._leading
            self._leading = False
        if was:
            log.warning("%s: leadership lost: %s", self.config.identity, why)
            self._call(self._on_stopped)

    def _call(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:  # a callback that raises must not kill the election loop
            log.exception("leader election callback failed")

    # -- one attempt -------------------------------------------------------------------------
    def try_acquire_or_renew(self) -> bool:
        """One attempt to take or renew the Lease (client-go's tryAcquireOrRenew)."""
        cfg = self.config
        self.attempts += 1
        self.last_attempt = self._clock()
        now = self._now()
        with self._lock:
            leading, observed = self._leading, self._observed
        # fast path: the leader renews from the copy it holds, one PUT
        if leading and observed is not None:
            updated = self._write(self._renewed(observed, now, same_holder=True), create=False)
            if updated is not None:
                return True
        try:
            current: Obj | None = self.store.get(LEASE_API, "Lease", cfg.name, cfg.namespace)
        except NotFound:
            current = None
        except Exception as exc:  # the server is away: this attempt failed
            log.info("%s: cannot read Lease %s: %s", cfg.identity, cfg.name, exc)
            return False
        if current is None:
            lease = {
                "apiVersion": LEASE_API,
                "kind": "Lease",
                "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                "spec": {},
            }
            return (
                self._write(self._renewed(lease, now, same_holder=False), create=True) is not None
            )
        self._observe(current)
        holder = _record(current)[0]
        with self._lock:
            expired = self._clock() - self._observed_at >= self._duration(current)
        if holder and holder != cfg.identity and not expired:
            return False
        return (
            self._write(
                self._renewed(current, now, same_holder=holder == cfg.identity), create=False
            )
            is not None
        )

    def _duration(self, lease: Obj) -> float:
        seconds = ((lease.get("spec") or {}).get("leaseDurationSeconds")) or 0
        return float(seconds) if seconds else self.config.lease_duration_s

    def _renewed(self, lease: Obj, now: datetime, *, same_holder: bool) -> Obj:
        cfg = self.config
        spec = dict(lease.get("spec") or {})
        transitions = int(spec.get("leaseTransitions") or 0)
        if not same_holder:
            if spec.get("holderIdentity"):
                transitions += 1
            spec["acquireTime"] = micro_time(now)
        spec.update(
            holderIdentity=cfg.identity,
            leaseDurationSeconds=max(1, round(cfg.lease_duration_s)),
            renewTime=micro_time(now),
            leaseTransitions=transitions,
        )
        spec.setdefault("acquireTime", micro_time(now))
        return {**lease, "spec": spec}

    def _write(self, lease: Obj, *, create: bool) -> Obj | None:
        try:
            written = self.store.create(lease) if create else self.store.update(lease)
        except (AlreadyExists, Conflict, NotFound):
            return None  # someone else wrote first: read again next time
        except Exception as exc:
            log.info("%s: cannot write Lease %s: %s", self.config.identity, self.config.name, exc)
            return None
        self._observe(written)
        with self._lock:
            self._leading = True
            self._last_renew = self._clock()
        return written

    def _observe(self, lease: Obj) -> None:
        with self._lock:
            changed = self._observed is None or _record(self._observed) != _record(lease)
            self._observed = lease
            if changed:
                self._observed_at = self._clock()
            holder = _record(lease)[0]
            new_leader = holder != self._leader
            self._leader = holder
        if new_leader and holder:
            self._call(lambda: self._on_new_leader(holder))

    def release(self) -> bool:
        """Give the Lease up (holder empty, duration 1 s) if this candidate holds it; called
        after leadership ended, so nothing of this process writes any more."""
        with self._lock:
            observed, self._leading = self._observed, False
        if observed is None:
            return False
        spec = dict(observed.get("spec") or {})
        if spec.get("holderIdentity") != self.config.identity:
            return False
        now = micro_time(self._now())
        spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=now, acquireTime=now)
        try:
            self.store.update({**observed, "spec": spec})
        except Exception as exc:
            log.info("%s: could not release the Lease: %s", self.config.identity, exc)
            return False
        log.info("%s: released Lease %s", self.config.identity, self.config.name)
        return True
