"""The MIG manager: applies the node's mig-parted layout to its GPUs (an agent component).

The desired layout is the mig-parted config the node label ``nvidia.com/mig.config`` names,
else the agent's ``--mig-config``, else Helm values' ``migManager.config.default``
(:func:`kgpu.config.loader.select_mig_config`); none of them: the manager has nothing to do.
When the GPUs differ (:func:`kgpu.hardware.migplan.plan_mig`), one reconfiguration runs:

1. ``nvidia.com/mig.config.state=pending``; the GPUs that change are *withheld*
   (:meth:`MigManager.withheld`, :func:`withhold`): the agent stops advertising their devices,
   so no new container gets one;
2. drain: wait until no container holds a device of theirs (PodResources, through the
   ``holders`` callable) and no process runs on them (NVML), up to ``drain_timeout_s``; with
   ``evict_pods`` the pods holding them are evicted first. A GPU still held then fails (its
   reason names the pods) -- the others go on;
3. apply through the backend, GPU by GPU: destroy compute and GPU instances, set the MIG mode,
   create each GPU instance at its planned placement with a full compute instance. A mode
   change the GPU leaves *pending* (it needs a reset) ends as upstream's mig-manager ends it:
   with ``with_reboot``, ``rebooting`` and the ``reboot`` callable; without, ``failed``;
4. read the GPUs again and check each changed GPU now matches;
5. ``success``, or ``failed`` with a reason per GPU (an event, and :meth:`MigManager.status`).
   The withheld GPUs are released (their new devices advertised) either way.

A failure is retried with backoff (``retry_initial_s`` doubling to ``retry_max_s``) when
waiting can help (held devices, a GPU in use, an NVML error); a bad config, a reset nobody will
do, a permission error wait for their input to change. Nothing blocks: :meth:`reconcile` makes
one step of progress and returns (draining spans calls), so the agent runs it on a thread and
the simulator can run it on its own clock. Nothing to do writes nothing (no label churn).

I/O is all behind callables (labels, holders, eviction, reboot, events) and the backend, so
the agent wires it to the API server and the kubelet, the simulator to its store, and
``kgpu mig apply`` to nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from kgpu.config.loader import ConfigSet, select_mig_config
from kgpu.config.migparted import MigConfig, layout_for
from kgpu.errors import FieldError, FieldProblem, KgpuError, join_path
from kgpu.hardware.backend import Backend, BackendError, MigBackend, MigOpError, MigRefusal
from kgpu.hardware.migplan import (
    GpuChange,
    GpuMigState,
    MigPlan,
    StepKind,
    describe_counts,
    plan_mig,
)
from kgpu.hardware.model import Machine
from kgpu.node.model import NodeView
from kgpu.store import ObjectStore

log = logging.getLogger(__name__)

MIG_STATE_LABEL = "nvidia.com/mig.config.state"
PENDING, REBOOTING, SUCCESS, FAILED = "pending", "rebooting", "success", "failed"

#: refusals that waiting will not cure: retried only when the inputs or the hardware change
_FINAL = frozenset({MigRefusal.RESET_REQUIRED, MigRefusal.NO_PERMISSION, MigRefusal.NOT_SUPPORTED})

Inputs = Callable[[], tuple[ConfigSet, Mapping[str, str]]]  # configs, node labels
Holders = Callable[[], Mapping[str, Sequence[str]]]  # GPU/MIG UUID -> pods "namespace/name"
LabelWriter = Callable[[Mapping[str, str]], None]
EventSink = Callable[[str, str, str], None]  # type (Normal/Warning), reason, message


class MigNode(Backend, MigBackend, Protocol):
    """A backend that reads the GPUs and changes their MIG layout (both backends are)."""


@dataclass(frozen=True)
class MigManagerOptions:
    """Settings; the names in brackets are the GPU Operator's mig-manager equivalents."""

    default_config: str | None = None  # --mig-config, over migManager.config.default
    with_reboot: bool = False  # [WITH_REBOOT] reboot when a mode change needs a reset
    evict_pods: bool = False  # evict the pods holding affected GPUs instead of waiting
    drain_timeout_s: float = 300.0  # upstream waits 5 minutes for its GPU clients
    poll_interval_s: float = 1.0  # while draining
    retry_initial_s: float = 5.0
    retry_max_s: float = 300.0
    resync_s: float = 60.0  # look again this often even when nothing was said


# -- reading and applying (the steps, without the manager's bookkeeping) -----------------------


def read_mig_states(ops: MigBackend, machine: Machine) -> tuple[GpuMigState, ...]:
    """Every GPU's MIG state; a GPU that cannot be read carries its error, the others are read."""
    out = []
    for gpu in machine.gpus:
        base = GpuMigState(gpu.index, gpu.uuid, gpu.product_name, gpu.mig_capable)
        if not gpu.mig_capable:
            out.append(base)
            continue
        try:
            mode = ops.mig_mode(gpu.index)
            instances = ops.gpu_instances(gpu.index) if mode.current else ()
            compute = tuple(
                ci for gi in instances for ci in ops.compute_instances(gpu.index, gi.gi_id)
            )
        except BackendError as exc:
            out.append(replace(base, error=f"cannot read its MIG state: {exc}"))
            continue
        out.append(replace(base, mode=mode, instances=instances, compute=compute))
    return tuple(out)


def plan_for(
    mig: MigConfig, machine: Machine, states: Sequence[GpuMigState]
) -> tuple[MigPlan, list[str]]:
    """The plan for ``mig`` on this machine, and the selection's warnings; FieldError naming
    the config's file and entry when it cannot apply."""
    layout, warnings = layout_for(mig, machine.gpus)
    try:
        plan = plan_mig(states, layout, mig.name)
    except FieldError as exc:
        raise FieldError(
            [
                FieldProblem(
                    f"cannot apply mig config {mig.name!r}: {p.message}",
                    p.path or join_path("mig-configs", mig.name),
                    p.file or mig.source,
                    p.entry,
                )
                for p in exc.problems
            ]
        ) from None
    return plan, warnings


@dataclass(frozen=True)
class GpuResult:
    """How one GPU's change ended: ``applied``, ``failed`` or ``needs-reset``."""

    index: int
    uuid: str
    outcome: str
    reason: str = ""
    retry: bool = False  # waiting and trying again may help

    def line(self) -> str:
        return f"GPU {self.index}: {self.reason or self.outcome}"


APPLIED, NEEDS_RESET = "applied", "needs-reset"


def _fail(change: GpuChange, what: str, exc: MigOpError) -> GpuResult:
    return GpuResult(
        change.index,
        change.uuid,
        FAILED,
        f"{what}: {exc}",
        retry=exc.refusal not in _FINAL,
    )


def _clear(ops: MigBackend, index: int) -> None:
    """Best effort: destroy every instance on a GPU whose build failed halfway (as mig-parted
    clears a GPU when no order of its profiles worked)."""
    try:
        for gi in ops.gpu_instances(index):
            for ci in ops.compute_instances(index, gi.gi_id):
                ops.destroy_compute_instance(index, gi.gi_id, ci.ci_id)
            ops.destroy_gpu_instance(index, gi.gi_id)
    except BackendError as exc:
        log.warning("GPU %d: clearing a half-built MIG layout failed: %s", index, exc)


def apply_changes(
    ops: MigBackend,
    changes: Sequence[GpuChange],
    *,
    stop_at_reset: bool = False,
    on_step: Callable[[int, str], None] | None = None,
) -> dict[int, GpuResult]:
    """Run the plan's steps GPU by GPU: first every GPU's destroys and mode change, then every
    GPU's creates (so with ``stop_at_reset`` a reboot comes before anything is built). One GPU's
    failure never stops another's; the result says how each ended (GPUs not reached when
    stopping for a reset are absent)."""
    results: dict[int, GpuResult] = {}
    note = on_step or (lambda _gpu, _what: None)
    for change in changes:
        for step in change.steps:
            if step.kind is StepKind.CREATE:
                continue
            what = step.describe()
            try:
                if step.kind is StepKind.DESTROY_CI:
                    ops.destroy_compute_instance(change.index, step.gi_id, step.ci_id)
                elif step.kind is StepKind.DESTROY_GI:
                    ops.destroy_gpu_instance(change.index, step.gi_id)
                else:
                    mode = ops.set_mig_mode(change.index, step.enabled)
                    if mode.current != step.enabled:
                        why = mode.why or MigRefusal.RESET_REQUIRED
                        results[change.index] = GpuResult(
                            change.index,
                            change.uuid,
                            NEEDS_RESET,
                            f"{what}: the change is pending a GPU reset ({why}); reset the "
                            f"GPU (nvidia-smi -r -i {change.index}) or reboot the node, or let "
                            "the MIG manager reboot it (withReboot)",
                            retry=why is MigRefusal.IN_USE,
                        )
                        break
            except MigOpError as exc:
                results[change.index] = _fail(change, what, exc)
                break
            note(change.index, what)
    if stop_at_reset and any(r.outcome == NEEDS_RESET for r in results.values()):
        return results
    for change in changes:
        if change.index in results:
            continue
        for step in change.steps:
            if step.kind is not StepKind.CREATE:
                continue
            what = step.describe()
            try:
                gi = ops.create_gpu_instance(change.index, step.profile, step.start)
                ops.create_compute_instance(change.index, gi.gi_id)
            except MigOpError as exc:
                results[change.index] = _fail(change, what, exc)
                _clear(ops, change.index)
                break
            note(change.index, what)
        else:
            results[change.index] = GpuResult(change.index, change.uuid, APPLIED)
    return results


def withhold(view: NodeView, gpu_uuids: Collection[str]) -> NodeView:
    """``view`` without the devices of the GPUs being reconfigured. Each resource keeps its
    name with fewer (maybe no) devices, so ListAndWatch reports the drop at once instead of the
    kubelet waiting for a vanished plugin."""
    if not gpu_uuids:
        return view
    wanted = frozenset(gpu_uuids)
    return replace(
        view,
        resources=tuple(
            replace(res, devices=tuple(d for d in res.devices if d.gpu_uuid not in wanted))
            for res in view.resources
        ),
    )


# -- the component ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """What one :meth:`MigManager.reconcile` call found and did.

    ``state`` is the ``nvidia.com/mig.config.state`` value it leaves ("" when no layout is
    asked for); ``again_s`` is when the manager wants to be called next."""

    state: str
    config: str | None
    reason: str = ""
    gpus: tuple[GpuResult, ...] = ()
    retry: bool = False
    again_s: float = 60.0
    plan: MigPlan | None = None
    stage: str = "idle"  # idle | draining | done


def _keys(plan: MigPlan, states: Sequence[GpuMigState]) -> tuple[Any, Any]:
    """What a plan asks for (to notice the desired layout changing) and that with the GPUs'
    state (to notice anything changing: an attempt that failed is not repeated on the same)."""
    desired = (plan.config, tuple((c.index, c.desired) for c in plan.changes))
    return desired, (desired, tuple(states))


@dataclass
class _Job:
    """A reconfiguration in progress (spans calls while draining)."""

    mig: MigConfig
    desired: Any  # the layout it is for
    plan: MigPlan
    deadline: float
    evicted: set[str] = field(default_factory=set)

    @property
    def config(self) -> str:
        return self.mig.name


class MigManager:
    """Applies the desired mig-parted layout to the GPUs; see the module docstring.

    ``inputs`` returns the config set and the node's labels now. ``write_labels`` sets node
    labels (only ``nvidia.com/mig.config.state``). ``holders`` says which pods hold which GPU
    or MIG UUID (None: only NVML's process list is consulted). ``evict`` evicts one pod
    ("namespace/name"), ``reboot`` reboots the node, ``on_event`` records an event,
    ``on_change`` is called when the withheld GPUs or the status change (the agent rebuilds the
    view it serves and rewrites its status file).
    """

    name = "mig-manager"

    def __init__(
        self,
        backend: MigNode,
        inputs: Inputs,
        *,
        write_labels: LabelWriter | None = None,
        holders: Holders | None = None,
        evict: Callable[[str], None] | None = None,
        reboot: Callable[[], None] | None = None,
        on_event: EventSink | None = None,
        on_change: Callable[[], None] | None = None,
        options: MigManagerOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.options = options or MigManagerOptions()
        self._inputs = inputs
        self._write_labels = write_labels
        self._holders = holders
        self._evict = evict
        self._reboot = reboot
        self._on_event = on_event
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.RLock()  # one reconcile at a time
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._withheld: frozenset[str] = frozenset()
        self._job: _Job | None = None
        self._written = ""  # the state label as this manager last wrote it
        self._seen = ""  # ... and as the node's labels showed it
        self._last: Attempt = Attempt("", None, stage="idle")
        self._last_key: Any = None
        self._last_event: tuple[str, str, str] | None = None
        self._backoff = 0.0
        self._retry_at = 0.0
        self._reboot_key: Any = None
        self.attempts = 0

    # -- Component -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="mig-manager", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def on_view(self, view: NodeView) -> None:
        """A new view: labels or configs may have changed; look again soon."""
        self._wake.set()

    # -- what the agent reads -------------------------------------------------------------------

    def withheld(self) -> frozenset[str]:
        """UUIDs of the GPUs under reconfiguration: advertise none of their devices."""
        return self._withheld

    def status(self) -> dict[str, Any]:
        last = self._last
        job = self._job
        return {
            "state": last.state,
            "config": last.config,
            "stage": last.stage,
            "reason": last.reason,
            "withheld": sorted(self._withheld),
            "gpus": [
                {"index": r.index, "uuid": r.uuid, "outcome": r.outcome, "reason": r.reason}
                for r in last.gpus
            ],
            "plan": [f"GPU {s.gpu}: {s.describe()}" for s in (job.plan.steps if job else ())],
            "attempts": self.attempts,
            "retryInS": round(max(self._retry_at - self._clock(), 0.0), 1) if last.retry else None,
        }

    # -- the loop --------------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                wait = self.reconcile().again_s
            except Exception as exc:  # never let the thread die; try again later
                log.exception("MIG manager: %s", exc)
                wait = self.options.retry_initial_s
            self._wake.wait(max(wait, 0.01))
            self._wake.clear()

    def reconcile(self) -> Attempt:
        """One step: look at the inputs and the GPUs, start, continue or finish a
        reconfiguration. Never blocks on the hardware becoming free."""
        with self._lock:
            attempt = self._reconcile()
            self._last = attempt
            return attempt

    def _reconcile(self) -> Attempt:
        opts = self.options
        try:
            configs, labels = self._inputs()
            mig = select_mig_config(configs, labels, opts.default_config)
        except KgpuError as exc:
            reason = f"cannot read the mig-parted config: {exc}"
            if self._last.config is None and self._job is None:
                # a node whose MIG this manager never managed gets no state label for it
                log.error("%s", reason)
                return Attempt("", None, reason, stage="idle", again_s=opts.resync_s)
            return self._failed(self._last.config, reason, key=str(exc))
        self._seen = labels.get(MIG_STATE_LABEL, "")
        if mig is None:
            if self._job is not None:
                self._abandon("no mig-parted config is selected any more")
            return Attempt("", None, stage="idle", again_s=opts.resync_s)
        try:
            machine = self.backend.snapshot()
            states = read_mig_states(self.backend, machine)
        except BackendError as exc:
            return self._failed(mig.name, f"cannot read the GPUs: {exc}", retry=True)
        try:
            plan, notes = plan_for(mig, machine, states)
        except FieldError as exc:
            return self._failed(mig.name, str(exc), key=(mig.name, str(exc)))
        desired, key = _keys(plan, states)
        job = self._job
        if job is not None and job.desired != desired:
            self._abandon(f"the desired layout changed (mig config {mig.name})")
            job = None
        if job is not None:
            return self._drain(job, plan)
        if plan.done:
            self._release()
            self._backoff = 0.0
            self._last_key = key
            if self._set_state(SUCCESS) == "written":
                self._event("Normal", "MigConfigApplied", f"mig config {mig.name} is applied")
            return Attempt(SUCCESS, mig.name, stage="idle", again_s=opts.resync_s, plan=plan)
        last = self._last
        waiting = not last.retry or self._clock() < self._retry_at
        if key == self._last_key and last.state in (FAILED, REBOOTING) and waiting:
            return replace(last, again_s=self._wait_for_retry(last))
        if (self._seen or self._written) == REBOOTING and self._reboot_key != key:
            reset = [c.index for c in plan.changes if c.mode_step is not None]
            if reset:
                return self._failed(
                    mig.name,
                    "MIG mode change did not take effect after rebooting "
                    f"(GPU {', '.join(map(str, reset))})",
                    key=key,
                )
        return self._begin(mig, desired, plan, notes, key)

    # -- stages ---------------------------------------------------------------------------------

    def _begin(
        self, mig: MigConfig, desired: Any, plan: MigPlan, notes: list[str], key: Any
    ) -> Attempt:
        config = mig.name
        self.attempts += 1
        self._last_key = key
        if self._set_state(PENDING) == "error":
            return self._finish(
                config, [], f"cannot set {MIG_STATE_LABEL}={PENDING}; nothing was changed", True
            )
        gpus = ", ".join(
            f"{c.index} ({describe_counts(c.current)} -> {describe_counts(c.desired)})"
            for c in plan.changes
        )
        self._event("Normal", "MigConfigPending", f"applying mig config {config}: GPU {gpus}")
        for note in notes:
            log.warning("mig config %s: %s", config, note)
        self._withhold(frozenset(c.uuid for c in plan.changes))
        self._job = _Job(mig, desired, plan, self._clock() + self.options.drain_timeout_s)
        return self._drain(self._job, plan)

    def _drain(self, job: _Job, plan: MigPlan) -> Attempt:
        """Wait (across calls) until no pod or process holds an affected GPU, then apply."""
        if self._stopping.is_set():
            self._abandon("the agent is stopping")
            return Attempt(PENDING, job.config, reason="stopped while draining", stage="idle")
        blocked = self._blocked(plan)
        if blocked and self.options.evict_pods and self._evict is not None:
            self._evict_holders(job, blocked)
        now = self._clock()
        if blocked and now < job.deadline:
            waiting = "; ".join(f"GPU {i} {self._held(b)}" for i, b in sorted(blocked.items()))
            return Attempt(
                PENDING,
                job.config,
                reason=f"waiting: {waiting}",
                again_s=min(self.options.poll_interval_s, max(job.deadline - now, 0.0)),
                plan=plan,
                stage="draining",
            )
        results: dict[int, GpuResult] = {}
        for change in plan.changes:
            if change.index in blocked:
                why = self._timed_out(blocked[change.index])
                results[change.index] = GpuResult(change.index, change.uuid, FAILED, why, True)
        for state in plan.unreadable:
            results[state.index] = GpuResult(state.index, state.uuid, FAILED, state.error, True)
        todo = [c for c in plan.changes if c.index not in results]
        applied = apply_changes(
            self.backend,
            todo,
            stop_at_reset=self.options.with_reboot,
            on_step=lambda gpu, what: log.info("GPU %d: %s", gpu, what),
        )
        results.update(applied)
        self._job = None
        if self.options.with_reboot and any(r.outcome == NEEDS_RESET for r in applied.values()):
            return self._rebooting(job, plan, results)
        return self._verify(job, plan, results)

    def _evict_holders(
        self, job: _Job, blocked: Mapping[int, tuple[tuple[str, ...], tuple[int, ...]]]
    ) -> None:
        evict = self._evict
        if evict is None:
            return
        for index in sorted(blocked):
            for pod in blocked[index][0]:
                if pod in job.evicted:
                    continue
                job.evicted.add(pod)
                try:
                    evict(pod)
                except Exception as exc:
                    log.warning("cannot evict pod %s: %s", pod, exc)
                    continue
                self._event(
                    "Normal",
                    "MigEvictingPod",
                    f"evicted pod {pod}: it holds GPU {index}, whose MIG layout changes",
                )

    def _blocked(self, plan: MigPlan) -> dict[int, tuple[tuple[str, ...], tuple[int, ...]]]:
        """GPU index -> (pods holding it, processes on it), for affected GPUs still in use."""
        affected = {c.index for c in plan.changes}
        uuids = {
            g.index: {g.uuid, *(m.uuid for m in g.mig_devices)}
            for g in self.backend.snapshot().gpus
            if g.index in affected
        }
        held: Mapping[str, Sequence[str]] = {}
        if self._holders is not None:
            try:
                held = self._holders()
            except Exception as exc:  # the kubelet restarting: processes still tell
                log.warning("cannot tell which pods hold GPUs: %s", exc)
        out: dict[int, tuple[tuple[str, ...], tuple[int, ...]]] = {}
        for index, ids in uuids.items():
            pods = tuple(sorted({pod for uuid in ids for pod in held.get(uuid, ())}))
            try:
                pids = self.backend.gpu_processes(index)
            except BackendError as exc:
                log.warning("GPU %d: cannot list its processes: %s", index, exc)
                pids = ()
            if pods or pids:
                out[index] = (pods, pids)
        return out

    @staticmethod
    def _held(held: tuple[tuple[str, ...], tuple[int, ...]]) -> str:
        pods, pids = held
        if pods:
            return f"is held by pod {', '.join(pods)}"
        return f"runs {len(pids)} process(es) no pod accounts for (PID {', '.join(map(str, pids))})"

    def _timed_out(self, held: tuple[tuple[str, ...], tuple[int, ...]]) -> str:
        waited = f"{self._held(held)} after {self.options.drain_timeout_s:g}s"
        if not held[0]:
            return f"{waited}; stop them: they belong to no pod the MIG manager could evict"
        if self.options.evict_pods and self._evict is not None:
            return f"{waited}; the pods were evicted but have not gone yet"
        return f"{waited}; they must finish first, or set evictPods to evict them"

    def _rebooting(self, job: _Job, plan: MigPlan, results: dict[int, GpuResult]) -> Attempt:
        waiting = sorted(i for i, r in results.items() if r.outcome == NEEDS_RESET)
        reason = (
            f"the MIG mode change of GPU {', '.join(map(str, waiting))} needs a GPU reset: "
            "rebooting the node"
        )
        if self._set_state(REBOOTING) == "error":
            return self._finish(job.config, list(results.values()), reason, True)
        self._read_back(job)
        self._reboot_key = self._last_key
        self._event("Warning", "MigConfigRebooting", reason)
        if self._reboot is None:
            log.warning("%s: no reboot is wired here; reboot the node to finish", reason)
        else:
            try:
                self._reboot()
            except Exception as exc:
                return self._finish(
                    job.config, list(results.values()), f"{reason} failed: {exc}", True
                )
        # the GPUs stay withheld: their layout is half done until the node is back
        return Attempt(
            REBOOTING,
            job.config,
            reason=reason,
            gpus=tuple(sorted(results.values(), key=lambda r: r.index)),
            again_s=self.options.poll_interval_s,
            plan=plan,
            stage="done",
        )

    def _read_back(self, job: _Job) -> tuple[MigPlan | None, dict[int, GpuMigState]]:
        """The GPUs read again, the plan they would need now (None: unreadable), and the
        key an attempt on them would have (an attempt that ended is not repeated on it)."""
        try:
            machine = self.backend.snapshot()
            states = read_mig_states(self.backend, machine)
            plan, _ = plan_for(job.mig, machine, states)
        except (BackendError, FieldError) as exc:
            log.warning("cannot read the GPUs back: %s", exc)
            return None, {}
        self._last_key = _keys(plan, states)[1]
        return plan, {s.index: s for s in states}

    def _verify(self, job: _Job, plan: MigPlan, results: dict[int, GpuResult]) -> Attempt:
        """Read the GPUs again: each GPU applied must now have its layout."""
        now, states = self._read_back(job)
        still = {c.index for c in now.changes} if now is not None else None
        for change in plan.changes:
            result = results.get(change.index)
            if result is None or result.outcome != APPLIED:
                continue
            state = states.get(change.index)
            if still is not None and change.index not in still:
                continue
            shown = (
                describe_counts(state.devices())
                if state is not None and not state.error
                else "an unreadable MIG state"
            )
            results[change.index] = GpuResult(
                change.index,
                change.uuid,
                FAILED,
                f"after applying, the GPU has {shown} instead of {describe_counts(change.desired)}",
                True,
            )
        failed = sorted(
            (r for r in results.values() if r.outcome != APPLIED), key=lambda r: r.index
        )
        reason = "; ".join(r.line() for r in failed)
        return self._finish(
            job.config, list(results.values()), reason, any(r.retry for r in failed)
        )

    def _finish(
        self, config: str | None, results: list[GpuResult], reason: str, retry: bool
    ) -> Attempt:
        self._job = None
        self._release()
        gpus = tuple(sorted(results, key=lambda r: r.index))
        if reason:
            return self._failed(config, reason, gpus=gpus, retry=retry)
        self._backoff = 0.0
        self._set_state(SUCCESS)
        self._event("Normal", "MigConfigApplied", f"mig config {config} is applied")
        return Attempt(SUCCESS, config, gpus=gpus, again_s=self.options.resync_s, stage="done")

    def _failed(
        self,
        config: str | None,
        reason: str,
        *,
        gpus: tuple[GpuResult, ...] = (),
        retry: bool = False,
        key: Any = None,
    ) -> Attempt:
        if key is not None:
            self._last_key = key
        self._job = None
        self._release()
        self._set_state(FAILED)
        self._event("Warning", "MigConfigFailed", f"mig config {config}: {reason}")
        if retry:
            self._backoff = min(
                max(self._backoff * 2, self.options.retry_initial_s), self.options.retry_max_s
            )
            self._retry_at = self._clock() + self._backoff
        attempt = Attempt(FAILED, config, reason, gpus, retry, stage="done")
        return replace(attempt, again_s=self._wait_for_retry(attempt))

    def _wait_for_retry(self, attempt: Attempt) -> float:
        if not attempt.retry:
            return self.options.resync_s
        return min(max(self._retry_at - self._clock(), 0.0), self.options.resync_s)

    def _abandon(self, why: str) -> None:
        log.info("MIG reconfiguration abandoned: %s", why)
        self._job = None
        self._release()

    # -- effects ---------------------------------------------------------------------------------

    def _set_state(self, value: str) -> str:
        """Write the state label unless it already says ``value``: "written", "unchanged" or
        "error" (the writer failed)."""
        shown = self._seen or self._written
        if shown == value and self._written in ("", value):
            self._written = value
            return "unchanged"
        self._written = self._seen = value
        if self._write_labels is not None:
            try:
                self._write_labels({MIG_STATE_LABEL: value})
            except Exception as exc:
                log.error("cannot set %s=%s: %s", MIG_STATE_LABEL, value, exc)
                return "error"
        log.info("%s=%s", MIG_STATE_LABEL, value)
        self._changed()
        return "written"

    def _event(self, kind: str, reason: str, message: str) -> None:
        event = (kind, reason, message)
        if event == self._last_event:
            return
        self._last_event = event
        (log.warning if kind == "Warning" else log.info)("%s: %s", reason, message)
        if self._on_event is not None:
            try:
                self._on_event(kind, reason, message)
            except Exception as exc:
                log.warning("cannot record event %s: %s", reason, exc)
        self._changed()

    def _withhold(self, uuids: frozenset[str]) -> None:
        if uuids != self._withheld:
            self._withheld = uuids
            self._changed()

    def _release(self) -> None:
        self._withhold(frozenset())

    def _changed(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change()
            except Exception as exc:
                log.warning("MIG manager change callback failed: %s", exc)


# -- wiring helpers: what the agent passes in ----------------------------------------------------


def store_label_writer(store: ObjectStore, node_name: str) -> LabelWriter:
    """Set labels on the Node object (a merge patch), as ``kubectl label --overwrite`` does."""

    def write(labels: Mapping[str, str]) -> None:
        store.patch("v1", "Node", node_name, {"metadata": {"labels": dict(labels)}})

    return write


def store_event_sink(
    store: ObjectStore, node_name: str, component: str = "kgpu-mig-manager"
) -> EventSink:
    """Record events on the Node (``kubectl describe node`` shows them)."""
    counter = iter(range(1, 1 << 62))

    def record(kind: str, reason: str, message: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        store.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{node_name}.mig.{int(time.time() * 1000):x}.{next(counter)}",
                    "namespace": "default",
                },
                "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node_name},
                "type": kind,
                "reason": reason,
                "message": message[:1024],
                "source": {"component": component, "host": node_name},
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )

    return record


def store_evictor(store: ObjectStore) -> Callable[[str], None]:
    """Evict a pod by deleting it (its controller makes a new one elsewhere). Deleting does not
    consult PodDisruptionBudgets, as the Eviction API would."""

    def evict(pod: str) -> None:
        namespace, _, name = pod.partition("/")
        store.delete("v1", "Pod", name, namespace)

    return evict


def podresources_holders(kubelet_root: Path, view: Callable[[], NodeView | None]) -> Holders:
    """Which pods hold which GPU or MIG UUID, from the kubelet's PodResources (device-plugin
    ids through the served view, DRA claims by device name)."""
    from kgpu.drivers.attribution import build_attribution
    from kgpu.kubelet.podresources import PodResourcesClient

    def holders() -> Mapping[str, Sequence[str]]:
        client = PodResourcesClient.for_kubelet_root(kubelet_root)
        try:
            pods = client.list()
        finally:
            client.close()
        attribution = build_attribution(pods, view=view())
        return {
            uuid: sorted({f"{ref.namespace}/{ref.name}" for ref in refs})
            for uuid, refs in attribution.holders.items()
        }

    return holders


def mig_manager(
    backend: Backend,
    inputs: Inputs,
    options: MigManagerOptions,
    *,
    node_name: str,
    kubelet_root: Path | None = None,
    view: Callable[[], NodeView | None] = lambda: None,
    store: ObjectStore | None = None,
    reboot: Callable[[], None] | None = None,
    on_change: Callable[[], None] | None = None,
    write_labels: LabelWriter | None = None,
) -> MigManager:
    """The MIG manager as the agent runs it: labels and events through the API server when a
    store is given (``write_labels`` replaces the label writer: without a store the agent
    passes its NFD features' writer), holders from the kubelet's PodResources, eviction by pod
    deletion. A BackendError when the backend cannot change MIG (it always can: both backends
    do)."""
    if not isinstance(backend, MigBackend):
        raise BackendError(f"{type(backend).__name__} cannot change MIG layouts")
    return MigManager(
        backend,
        inputs,
        write_labels=write_labels
        if write_labels is not None
        else (store_label_writer(store, node_name) if store is not None else None),
        holders=podresources_holders(kubelet_root, view) if kubelet_root is not None else None,
        evict=store_evictor(store) if store is not None else None,
        reboot=reboot,
        on_event=store_event_sink(store, node_name) if store is not None else None,
        on_change=on_change,
        options=options,
    )
