"""cluster-autoscaler's decisions for node groups, one scan at a time, as pure code.

Reproduced from kubernetes/autoscaler ``cluster-autoscaler`` (static autoscaler, scale-up
orchestrator, binpacking estimator, expanders, scale-down planner and actuator):

* **Scale up.** Pods the scheduler marked unschedulable, older than ``new-pod-scale-up-delay``
  and not below ``expendable-pods-priority-cutoff``, first go on the nodes already requested but
  not yet Ready (upcoming), so one burst of pods does not trigger two scale-ups. For the rest,
  each node group not at its maximum and not in backoff is tried with a template node built
  from the group (the caller's ``fit`` runs its scheduler filters); pods are binpacked onto as
  many new template nodes as needed (largest first), up to the group's maximum and
  ``max-nodes-total``; the expanders (``random``, ``most-pods``, ``least-waste``,
  ``priority``; a comma list is applied in order) pick one option. Events:
  ``TriggeredScaleUp`` "pod triggered scale-up: [{group 1->2 (max: 3)}]" on each helped pod,
  ``ScaledUpGroup`` on the status ConfigMap, and when nothing helps, ``NotTriggerScaleUp``
  "pod didn't trigger scale-up: <count> <reason>, ..." with the scheduler's reasons per group and
  "max node group size reached" / "in backoff after failed scale-up".
* **Provisioning.** A requested node becomes Ready after the scenario's ``provisioning-delay``;
  one that takes longer than ``max-node-provision-time`` fails (``ScaleUpTimedOut``), the group's
  target shrinks back and the group backs off (5 min, doubling to 30 min).
* **Scale down.** A node of an autoscaled group is unneeded when its utilization (requested /
  allocatable: GPUs alone on GPU nodes, else the larger of CPU and memory) is below the threshold
  and every pod it runs can move — drain rules in :mod:`kgpu.autoscaling.drain`, and each
  movable pod must fit another node (the caller's ``fit``). After ``scale-down-unneeded-time``
  (``scale-down-unready-time`` for NotReady nodes) it is removed, unless the group would go below
  its minimum or scale-down is cooling down (``scale-down-delay-after-add`` /
  ``-after-delete`` / ``-after-failure``); empty nodes first (``max-scale-down-parallelism``),
  then one drained node (``max-drain-parallelism``). Events: ``ScaleDown`` "marked the node as
  toBeDeleted/unschedulable" and "node removed by cluster autoscaler" on the node, "deleting pod
  for node scale down" on each evicted pod.

Not reproduced: cloud providers' own limits and quotas, ``balance-similar-node-groups``,
``enforce-node-group-min-size``, PodDisruptionBudgets, soft taints (``DeletionCandidateOf...``),
the ``price``/``grpc`` expanders, ProvisioningRequests, and NoScaleDown events. Go's map order
makes upstream's NotTriggerScaleUp reason order random; kgpu sorts it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache, partial
from typing import Any

from kgpu.autoscaling.ca_settings import CASettings, go_duration
from kgpu.autoscaling.drain import is_daemonset_pod, is_terminal, pods_to_move
from kgpu.autoscaling.events import Event
from kgpu.regex import Regex
from kgpu.regex import compile as compile_regex

STATUS_CONFIGMAP = "ConfigMap/kube-system/cluster-autoscaler-status"
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
GPU_RESOURCE = "nvidia.com/gpu"
MAX_NODE_GROUP_SIZE_REACHED = "max node group size reached"
IN_BACKOFF = "in backoff after failed scale-up"
MAX_TOTAL_NODES = "max total nodes in cluster reached"
#: Pods younger than this are "very new": cluster-autoscaler waits one loop for more.
UNSCHEDULABLE_POD_TIME_BUFFER = 2.0


@lru_cache(maxsize=256)
def _regex(pattern: str) -> Regex:
    """A priority-expander pattern, compiled once (RE2, unanchored: upstream's
    ``regexp.MatchString``); :func:`~kgpu.autoscaling.ca_settings.parse_settings` checked it."""
    return compile_regex(pattern)


@dataclass(frozen=True)
class NodeGroup:
    """An autoscaled group. ``allocatable`` is its template node's (for least-waste and pod
    ordering); the caller's ``fit`` knows how to build the template node itself."""

    name: str
    min_size: int
    max_size: int
    allocatable: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CAPod:
    key: str  # "namespace/name"
    obj: Mapping[str, Any]
    requests: Mapping[str, int] = field(default_factory=dict)
    created_at: float = 0.0
    priority: int = 0


@dataclass(frozen=True)
class CANode:
    name: str
    group: str | None
    allocatable: Mapping[str, int]
    pods: tuple[CAPod, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeRef:
    """Where a pod is tried: a real node by name, or (``template``) a new node of ``group``."""

    name: str
    group: str = ""
    template: bool = False


#: Pods this simulation put on other nodes (new template nodes of the same estimate, or
#: destinations of a drain), with those nodes: cluster-autoscaler schedules them into one
#: snapshot, so they count for the inter-pod filters (affinity, topology spread). A thunk, so
#: a pod those filters skip costs nothing.
Elsewhere = Callable[[], Sequence[tuple[NodeRef, Sequence[CAPod]]]]
#: ``fit(pod, node, pods placed there by this simulation, elsewhere) -> reasons it does not
#: fit`` (empty: it fits), in kube-scheduler's words (e.g. "Insufficient nvidia.com/gpu").
FitCheck = Callable[[CAPod, NodeRef, Sequence[CAPod], Elsewhere], Sequence[str]]


@dataclass(frozen=True)
class Provision:
    group: str
    requested_at: float
    ready_at: float


@dataclass(frozen=True)
class CAState:
    target_sizes: Mapping[str, int] = field(default_factory=dict)
    provisioning: tuple[Provision, ...] = ()
    unneeded_since: Mapping[str, float] = field(default_factory=dict)
    last_scale_up: float = -math.inf
    last_scale_down_delete: float = -math.inf
    last_scale_down_failure: float = -math.inf
    backoff_until: Mapping[str, float] = field(default_factory=dict)
    backoff_duration: Mapping[str, float] = field(default_factory=dict)
    loops: int = 0


@dataclass(frozen=True)
class Option:
    group: str
    node_count: int
    pods: tuple[CAPod, ...]


@dataclass(frozen=True)
class CADecision:
    """One scan's outcome. The caller evicts ``evict_pods`` and deletes ``delete_nodes``;
    nodes to add come from :func:`provision` when they are due."""

    delete_nodes: tuple[str, ...]
    evict_pods: tuple[str, ...]
    events: tuple[Event, ...]
    state: CAState
    scaled_up: tuple[tuple[str, int, int], ...] = ()  # (group, from, to)
    unneeded: tuple[str, ...] = ()
    unremovable: Mapping[str, str] = field(default_factory=dict)  # node -> why (CA's reason)


def initial_state(groups: Sequence[NodeGroup], nodes: Sequence[CANode]) -> CAState:
    """Target sizes as the cloud reports them: the nodes each group has now."""
    sizes = {g.name: sum(1 for n in nodes if n.group == g.name) for g in groups}
    return CAState(target_sizes=sizes)


def provision(
    settings: CASettings, groups: Sequence[NodeGroup], state: CAState, now: float
) -> tuple[list[str], list[Event], CAState]:
    """The simulated cloud: which requested nodes are Ready now (one group name per node),
    and the scale-ups that timed out (``ScaleUpTimedOut``: target shrinks, group backs off)."""
    ready: list[str] = []
    waiting: list[Provision] = []
    events: list[Event] = []
    sizes = dict(state.target_sizes)
    backoff_until = dict(state.backoff_until)
    backoff_duration = dict(state.backoff_duration)
    timed_out: dict[str, Provision] = {}
    for item in state.provisioning:
        if (
            item.ready_at <= now
            and item.ready_at - item.requested_at <= settings.max_node_provision_time
        ):
            ready.append(item.group)
        elif item.requested_at + settings.max_node_provision_time < now:
            timed_out.setdefault(item.group, item)
            sizes[item.group] = sizes.get(item.group, 0) - 1
        else:
            waiting.append(item)
    for group, item in sorted(timed_out.items()):
        events.append(
            Event(
                "Warning",
                "ScaleUpTimedOut",
                STATUS_CONFIGMAP,
                f"Nodes added to group {group} failed to register within "
                f"{go_duration(now - item.requested_at)}",
            )
        )
        duration = backoff_duration.get(group)
        duration = (
            settings.initial_node_group_backoff_duration
            if duration is None
            else min(duration * 2, settings.max_node_group_backoff_duration)
        )
        backoff_duration[group] = duration
        backoff_until[group] = now + duration
    new_state = replace(
        state,
        provisioning=tuple(waiting),
        target_sizes=sizes,
        backoff_until=backoff_until,
        backoff_duration=backoff_duration,
    )
    return ready, events, new_state


def _score(pod: CAPod, allocatable: Mapping[str, int]) -> float:
    total = 0.0
    for resource in ("cpu", "memory"):
        if allocatable.get(resource):
            total += pod.requests.get(resource, 0) / allocatable[resource]
    return total


def _all_but(
    items: Sequence[tuple[NodeRef, Sequence[CAPod]]], i: int
) -> Sequence[tuple[NodeRef, Sequence[CAPod]]]:
    return [*items[:i], *items[i + 1 :]]


def _binpack(
    group: NodeGroup, pods: Sequence[CAPod], limit: int, fit: FitCheck
) -> tuple[int, list[CAPod]]:
    """How many new nodes of ``group`` the pods need (at most ``limit``), and which pods go."""
    nodes: list[tuple[NodeRef, list[CAPod]]] = []
    placed: list[CAPod] = []
    for pod in sorted(pods, key=lambda p: -_score(p, group.allocatable)):
        for i, (ref, on_node) in enumerate(nodes):
            if not fit(pod, ref, on_node, partial(_all_but, nodes, i)):
                on_node.append(pod)
                placed.append(pod)
                break
        else:
            if len(nodes) >= limit:
                continue
            ref = NodeRef(f"template-node-for-{group.name}-{len(nodes)}", group.name, True)
            if not fit(pod, ref, [], lambda: nodes):
                nodes.append((ref, [pod]))
                placed.append(pod)
    return len(nodes), placed


def _waste(option: Option, group: NodeGroup) -> float:
    score = 0.0
    for resource in ("cpu", "memory"):
        available = group.allocatable.get(resource, 0) * option.node_count
        if available:
            used = sum(p.requests.get(resource, 0) for p in option.pods)
            score += (available - used) / available
    return score


def best_option(
    options: Sequence[Option],
    groups: Mapping[str, NodeGroup],
    settings: CASettings,
    rng: random.Random,
) -> Option:
    """The expanders in order, each keeping its best options; a tie left is broken randomly."""
    remaining = list(options)
    for name in settings.expander:
        if len(remaining) == 1:
            break
        if name == "most-pods":
            most = max(len(o.pods) for o in remaining)
            remaining = [o for o in remaining if len(o.pods) == most]
        elif name == "least-waste":
            scores = {o.group: _waste(o, groups[o.group]) for o in remaining}
            least = min(scores.values())
            remaining = [o for o in remaining if scores[o.group] == least]
        elif name == "priority":
            best_priority: int | None = None
            chosen: list[Option] = []
            for option in remaining:
                for priority, patterns in settings.expander_priorities.items():
                    if not any(_regex(p).search(option.group) for p in patterns):
                        continue
                    if best_priority is None or priority > best_priority:
                        best_priority, chosen = priority, []
                    if priority == best_priority and option not in chosen:
                        chosen.append(option)
            remaining = chosen or remaining
    return remaining[0] if len(remaining) == 1 else rng.choice(remaining)


def _reasons_message(rejected: Mapping[str, Sequence[str]], skipped: Mapping[str, str]) -> str:
    counts: dict[str, int] = {}
    for reasons in rejected.values():
        for reason in reasons:
            counts[reason] = counts.get(reason, 0) + 1
    for reason in skipped.values():
        counts[reason] = counts.get(reason, 0) + 1
    return ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))


def _requested(node: CANode, resource: str, settings: CASettings) -> int:
    total = 0
    for pod in node.pods:
        if is_terminal(pod.obj):
            continue
        if settings.ignore_daemonsets_utilization and is_daemonset_pod(pod.obj):
            continue
        total += pod.requests.get(resource, 0)
    return total


def utilization(node: CANode, settings: CASettings) -> tuple[float, float]:
    """(utilization, the threshold that applies): GPUs alone on a GPU node (as with a GPU
    config), else the larger of CPU and memory."""
    if node.allocatable.get(GPU_RESOURCE, 0) > 0:
        used = _requested(node, GPU_RESOURCE, settings) / node.allocatable[GPU_RESOURCE]
        return used, settings.scale_down_gpu_utilization_threshold
    parts = [
        _requested(node, r, settings) / node.allocatable[r]
        for r in ("cpu", "memory")
        if node.allocatable.get(r)
    ]
    return max(parts, default=0.0), settings.scale_down_utilization_threshold


class _Scan:
    def __init__(
        self,
        settings: CASettings,
        groups: Sequence[NodeGroup],
        state: CAState,
        nodes: Sequence[CANode],
        now: float,
        fit: FitCheck,
        seed: int,
    ) -> None:
        self.settings = settings
        self.groups = {g.name: g for g in groups}
        self.state = state
        self.nodes = list(nodes)
        self.now = now
        self.fit = fit
        self.rng = random.Random(f"{seed}:{state.loops}")
        self.events: list[Event] = []
        self.sizes = dict(state.target_sizes)
        for group in groups:
            self.sizes.setdefault(group.name, sum(1 for n in nodes if n.group == group.name))
        self.provisioning = list(state.provisioning)
        self.last_scale_up = state.last_scale_up
        self.scaled_up: list[tuple[str, int, int]] = []
        self.skip_scale_down = False
        # pods this scan's removal simulation has moved, by destination node
        self.moved_to: dict[str, list[CAPod]] = {}
        self.groups_of = {n.name: n.group or "" for n in self.nodes}
        # where moved pods may go: Ready, schedulable nodes, by name
        self.destinations = sorted(
            (n for n in self.nodes if n.ready and not n.unschedulable), key=lambda n: n.name
        )

    # -- scale up --------------------------------------------------------------------------
    def upcoming(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for item in self.provisioning:
            counts[item.group] = counts.get(item.group, 0) + 1
        return counts

    def fits_upcoming(self, pods: Sequence[CAPod]) -> list[CAPod]:
        """The pods left after filling the upcoming nodes (first fit, in order)."""
        slots: list[tuple[NodeRef, list[CAPod]]] = [
            (NodeRef(f"template-node-for-{group}-upcoming-{i}", group, True), [])
            for group, count in sorted(self.upcoming().items())
            for i in range(count)
        ]
        left = []
        for pod in pods:
            for i, (ref, placed) in enumerate(slots):
                if not self.fit(pod, ref, placed, partial(_all_but, slots, i)):
                    placed.append(pod)
                    break
            else:
                left.append(pod)
        return left

    def scale_up(self, unschedulable: Sequence[CAPod]) -> None:
        settings = self.settings
        pods = [
            p
            for p in unschedulable
            if self.now - p.created_at >= settings.new_pod_scale_up_delay
            and p.priority >= settings.expendable_pods_priority_cutoff
        ]
        if not pods:
            return
        if all(self.now - p.created_at < UNSCHEDULABLE_POD_TIME_BUFFER for p in pods):
            self.skip_scale_down = True  # very new pods: wait one loop for more
            return
        pods = self.fits_upcoming(pods)
        if not pods:
            return
        if (
            settings.max_nodes_total
            and sum(1 for n in self.nodes if n.ready) >= settings.max_nodes_total
        ):
            self.events.append(
                Event(
                    "Warning",
                    "MaxNodesTotalReached",
                    STATUS_CONFIGMAP,
                    f"Max total nodes in cluster reached: {settings.max_nodes_total}",
                )
            )
            for pod in pods:
                self.events.append(
                    Event(
                        "Normal",
                        "NotTriggerScaleUp",
                        f"Pod/{pod.key}",
                        f"pod didn't trigger scale-up: {MAX_TOTAL_NODES}",
                    )
                )
            return
        skipped: dict[str, str] = {}
        rejected: dict[str, dict[str, list[str]]] = {p.key: {} for p in pods}
        options: list[Option] = []
        total = len(self.nodes) + len(self.provisioning)
        for name, group in sorted(self.groups.items()):
            size = self.sizes.get(name, 0)
            if size >= group.max_size:
                skipped[name] = MAX_NODE_GROUP_SIZE_REACHED
                continue
            if self.state.backoff_until.get(name, -math.inf) > self.now:
                skipped[name] = IN_BACKOFF
                continue
            eligible = []
            for pod in pods:
                reasons = list(
                    self.fit(pod, NodeRef(f"template-node-for-{name}-0", name, True), [], list)
                )
                if reasons:
                    rejected[pod.key][name] = reasons
                else:
                    eligible.append(pod)
            if not eligible:
                continue
            limit = group.max_size - size
            if settings.max_nodes_total:
                limit = min(limit, settings.max_nodes_total - total)
            count, placed = _binpack(group, eligible, limit, self.fit)
            if count > 0:
                options.append(Option(name, count, tuple(placed)))
        if not options:
            for pod in pods:
                message = _reasons_message(rejected[pod.key], skipped)
                self.events.append(
                    Event(
                        "Normal",
                        "NotTriggerScaleUp",
                        f"Pod/{pod.key}",
                        f"pod didn't trigger scale-up: {message}",
                    )
                )
            return
        option = best_option(options, self.groups, settings, self.rng)
        group = self.groups[option.group]
        current = self.sizes[option.group]
        new_size = current + option.node_count
        self.sizes[option.group] = new_size
        for _ in range(option.node_count):
            self.provisioning.append(
                Provision(option.group, self.now, self.now + settings.provisioning_delay)
            )
        self.last_scale_up = self.now
        self.scaled_up.append((option.group, current, new_size))
        self.events.append(
            Event(
                "Normal",
                "ScaledUpGroup",
                STATUS_CONFIGMAP,
                f"Scale-up: setting group {option.group} size to {new_size} instead of {current} "
                f"(max: {group.max_size})",
            )
        )
        info = f"[{{{option.group} {current}->{new_size} (max: {group.max_size})}}]"
        for pod in option.pods:
            self.events.append(
                Event(
                    "Normal",
                    "TriggeredScaleUp",
                    f"Pod/{pod.key}",
                    f"pod triggered scale-up: {info}",
                )
            )

    # -- scale down ------------------------------------------------------------------------
    def removable(self, node: CANode, excluded: set[str]) -> tuple[str, str, list[CAPod]]:
        """("", "", pods to move) when ``node`` may go, else (reason, detail, [])."""
        if node.group not in self.groups:
            return "NotAutoscaled", "node is not in an autoscaled node group", []
        if node.annotations.get(SCALE_DOWN_DISABLED) == "true":
            return "ScaleDownDisabledAnnotation", f"{SCALE_DOWN_DISABLED} is true", []
        used, threshold = utilization(node, self.settings)
        if used >= threshold:
            return "NotUnderutilized", f"utilization {used:.2f} is not below {threshold:g}", []
        objs = [p.obj for p in node.pods]
        move, _, blocking = pods_to_move(
            objs,
            self.settings.skip_nodes_with_system_pods,
            self.settings.skip_nodes_with_local_storage,
            self.now,
        )
        if blocking is not None:
            return "BlockedByPod", blocking.message, []
        movable = [p for p in node.pods if any(p.obj is m for m in move)]
        placed: dict[str, list[CAPod]] = {}  # destination -> pods moved there, this node's too
        for pod in movable:
            for dest in self.destinations:
                if dest.name == node.name or dest.name in excluded:
                    continue
                on_dest = placed.get(dest.name)
                if on_dest is None:
                    on_dest = placed[dest.name] = list(self.moved_to.get(dest.name, []))
                if not self.fit(
                    pod,
                    NodeRef(dest.name, dest.group or ""),
                    on_dest,
                    partial(self._moved_elsewhere, dest.name, placed),
                ):
                    on_dest.append(pod)
                    break
            else:
                return "NoPlaceToMovePods", f"no place to move pod {pod.key}", []
        self.moved_to.update(placed)
        return "", "", movable

    def _moved_elsewhere(
        self, name: str, placed: Mapping[str, Sequence[CAPod]]
    ) -> list[tuple[NodeRef, Sequence[CAPod]]]:
        """The pods this scan's removal simulation moved onto nodes other than ``name``."""
        return [
            (NodeRef(other, self.groups_of.get(other, "")), moved)
            for other, moved in {**self.moved_to, **placed}.items()
            if other != name and moved
        ]

    def scale_down(
        self,
    ) -> tuple[list[str], list[str], dict[str, float], dict[str, str], list[str]]:
        settings = self.settings
        previous = self.state.unneeded_since
        candidates = sorted(self.nodes, key=lambda n: (previous.get(n.name, math.inf), n.name))
        unneeded: dict[str, float] = {}
        moves: dict[str, list[CAPod]] = {}
        unremovable: dict[str, str] = {}
        for node in candidates:
            reason, detail, movable = self.removable(node, set(unneeded))
            if reason:
                unremovable[node.name] = f"{reason}: {detail}"
                continue
            unneeded[node.name] = previous.get(node.name, self.now)
            moves[node.name] = movable
        deleted: list[str] = []
        evicted: list[str] = []
        in_cooldown = (
            self.skip_scale_down
            or bool(self.scaled_up)
            or self.last_scale_up + settings.scale_down_delay_after_add > self.now
            or self.state.last_scale_down_delete + settings.delay_after_delete > self.now
            or self.state.last_scale_down_failure + settings.scale_down_delay_after_failure
            > self.now
        )
        if in_cooldown or not settings.scale_down_enabled:
            return deleted, evicted, unneeded, unremovable, list(unneeded)
        nodes = {n.name: n for n in self.nodes}
        drained = 0
        ordered = sorted(unneeded, key=lambda name: (bool(moves[name]), unneeded[name], name))
        for name in ordered:
            node = nodes[name]
            wait = (
                settings.scale_down_unneeded_time
                if node.ready
                else settings.scale_down_unready_time
            )
            if self.now - unneeded[name] < wait:
                unremovable.setdefault(
                    name, "NotUnneededLongEnough: unneeded for less than " + go_duration(wait)
                )
                continue
            assert node.group is not None
            group = self.groups[node.group]
            if self.sizes[node.group] <= group.min_size:
                unremovable[name] = (
                    f"NodeGroupMinSizeReached: node group {group.name} is at its minimum size "
                    f"{group.min_size}"
                )
                continue
            if len(deleted) >= settings.max_scale_down_parallelism:
                break
            if moves[name]:
                if drained >= settings.max_drain_parallelism:
                    continue
                drained += 1
            self.sizes[node.group] -= 1
            deleted.append(name)
            self.events.append(
                Event(
                    "Normal",
                    "ScaleDown",
                    f"Node/{name}",
                    "marked the node as toBeDeleted/unschedulable",
                )
            )
            for pod in moves[name]:
                evicted.append(pod.key)
                self.events.append(
                    Event(
                        "Normal", "ScaleDown", f"Pod/{pod.key}", "deleting pod for node scale down"
                    )
                )
            self.events.append(
                Event("Normal", "ScaleDown", f"Node/{name}", "node removed by cluster autoscaler")
            )
        for name in deleted:
            unneeded.pop(name, None)
        return deleted, evicted, unneeded, unremovable, list(unneeded)


def run_once(
    settings: CASettings,
    groups: Sequence[NodeGroup],
    state: CAState,
    nodes: Sequence[CANode],
    unschedulable: Sequence[CAPod],
    now: float,
    fit: FitCheck,
    seed: int = 0,
) -> CADecision:
    """One scan (every ``scan-interval``): scale up for ``unschedulable`` pods, then track and
    remove unneeded nodes. ``nodes`` are the registered nodes (Ready or not)."""
    scan = _Scan(settings, groups, state, nodes, now, fit, seed)
    scan.scale_up(unschedulable)
    deleted, evicted, unneeded, unremovable, unneeded_names = scan.scale_down()
    new_state = replace(
        state,
        target_sizes=scan.sizes,
        provisioning=tuple(scan.provisioning),
        unneeded_since=unneeded,
        last_scale_up=scan.last_scale_up,
        last_scale_down_delete=now if deleted else state.last_scale_down_delete,
        loops=state.loops + 1,
    )
    return CADecision(
        delete_nodes=tuple(deleted),
        evict_pods=tuple(evicted),
        events=tuple(scan.events),
        state=new_state,
        scaled_up=tuple(scan.scaled_up),
        unneeded=tuple(unneeded_names),
        unremovable=unremovable,
    )
