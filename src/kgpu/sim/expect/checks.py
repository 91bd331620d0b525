"""The assertions an expect file makes, one type per key of a block (``workloads``, ``pods``,
``nodes``, ``resources``, ``events``, ``computeDomains``).

Each type parses its entry (problems go to an :class:`~kgpu.sim.scenario_parts.Errors` with the
entry's field path) and checks it against an :class:`Observed` cluster, returning what did not
hold as :class:`Miss` values (the field, what was expected, what the cluster had). The checks
read the simulator's records and the object store as ``kgpu sim -o json`` shows them; nothing
here changes the cluster.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from kgpu.errors import join_path, shown
from kgpu.quantity import QuantityError
from kgpu.regex import Regex, RegexError
from kgpu.regex import compile as compile_regex
from kgpu.sim.plugins import Event
from kgpu.sim.quantity import format_units, to_units
from kgpu.sim.scenario_parts import Errors
from kgpu.sim.state import PodRecord, SimNode
from kgpu.store import NotFound, ObjectStore

CLIQUE_LABEL = "nvidia.com/gpu.clique"
CD_API, CD_KIND = "resource.nvidia.com/v1beta1", "ComputeDomain"
PHASES = ("Pending", "Running", "Succeeded", "Failed")
COMPARE_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<)?\s*(\S+)\s*$")
OPERATORS: dict[str, Callable[[int, int], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
}


@dataclass(frozen=True)
class Miss:
    """One part of an assertion that did not hold."""

    field: str  # "running", "status", "allocatable.nvidia.com/gpu"
    expected: str
    got: str


@dataclass(frozen=True)
class Amount:
    """An expected number or quantity: ``4``, ``"4"``, ``">=2"``, ``"<=64Gi"``, ``"!=0"``."""

    op: str
    units: int
    resource: str = ""  # for quantities: how to parse and print them (cpu in millicores)

    @classmethod
    def parse(cls, value: object, path: str, err: Errors, resource: str = "") -> Amount | None:
        what = "a quantity" if resource else "a count"
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            err.add(f"{value!r}: must be {what}, optionally after >=, <=, >, <, == or !=", path)
            return None
        match = COMPARE_RE.match(str(value))
        if match is None:
            err.add(f"{value!r}: must be {what}, optionally after >=, <=, >, <, == or !=", path)
            return None
        op, number = match.group(1) or "==", match.group(2)
        if not resource:
            # ASCII digits only (int() refuses '²', which isdigit() accepts), within int64
            if (
                not (number.isascii() and number.isdigit())
                or len(number) > 19
                or int(number) > 2**63 - 1
            ):
                err.add(
                    f"{shown(value)}: must be a whole number >= 0 (at most {2**63 - 1}), "
                    "optionally after an operator (>=2, <3, !=0)",
                    path,
                )
                return None
            return cls(op, int(number))
        try:
            return cls(op, to_units(resource, number), resource)
        except QuantityError as exc:
            err.add(f"{value!r}: {exc}", path)
            return None

    def holds(self, units: int) -> bool:
        return OPERATORS[self.op](units, self.units)

    def show(self, units: int | None = None) -> str:
        shown = format_units(self.resource, self.units if units is None else units)
        return shown if units is not None or self.op == "==" else f"{self.op} {shown}"


class Cluster(Protocol):
    """What the checks read of a simulated cluster (:class:`kgpu.sim.context.SimContext`)."""

    @property
    def store(self) -> ObjectStore: ...
    @property
    def pods(self) -> Mapping[str, PodRecord]: ...
    @property
    def nodes(self) -> Sequence[SimNode]: ...
    @property
    def node_by_name(self) -> Mapping[str, SimNode]: ...
    @property
    def events(self) -> Sequence[Event]: ...
    @property
    def event_log(self) -> Sequence[Event]: ...


class Observed:
    """The cluster as one block of an expect file sees it: the simulator's state now, and the
    events that block is about (a step's own events, or every event for ``final``)."""

    def __init__(self, ctx: Cluster, events: Sequence[Event]) -> None:
        self.ctx = ctx
        self.events = events
        self._parents: dict[tuple[str, str, str], tuple[str, str, str] | None] = {}

    def chain(self, rec: PodRecord) -> list[tuple[str, str, str]]:
        """``(kind, namespace, name)`` of the pod and of every controller above it, in order:
        a Deployment's pod gives Pod, ReplicaSet, Deployment."""
        out: list[tuple[str, str, str]] = [("Pod", rec.namespace, rec.name)]
        ref = _controller(rec.obj)
        while ref is not None and len(out) < 8:
            api, kind, name = ref
            key = (kind, rec.namespace, name)
            out.append(key)
            if key not in self._parents:
                try:
                    owner = self.ctx.store.get(api, kind, name, rec.namespace)
                except NotFound:
                    owner = None
                self._parents[key] = None
                if owner is not None:
                    parent = _controller(owner)
                    self._parents[key] = (parent[0], parent[1], parent[2]) if parent else None
            ref = self._parents[key]
        return out

    def workload_pods(self, ref: WorkloadRef) -> list[PodRecord]:
        pods = sorted(self.ctx.pods.values(), key=lambda r: r.seq)
        return [
            r
            for r in pods
            if r.namespace == ref.namespace
            and any(ref.matches(kind, name) for kind, _, name in self.chain(r))
        ]

    def node(self, name: str) -> SimNode | None:
        return self.ctx.node_by_name.get(name)

    def clique(self, node_name: str) -> str:
        node = self.node(node_name)
        return node.labels.get(CLIQUE_LABEL, "") if node is not None else ""


def _controller(obj: Mapping[str, Any]) -> tuple[str, str, str] | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("apiVersion", "")), str(ref.get("kind", "")), str(ref.get("name"))
    return None


@dataclass(frozen=True)
class WorkloadRef:
    """``Deployment/web`` (that object), or ``web`` (whatever controller, or bare pod, has that
    name), in a namespace."""

    kind: str
    name: str
    namespace: str

    @classmethod
    def parse(cls, value: object, namespace: object, path: str, err: Errors) -> WorkloadRef | None:
        if not isinstance(value, str) or not value or value.count("/") > 1:
            err.add(f"{value!r}: must be KIND/NAME (Deployment/web) or a NAME", path)
            return None
        if namespace is not None and (not isinstance(namespace, str) or not namespace):
            err.add(
                f"{namespace!r}: must be a namespace name", path.rsplit(".", 1)[0] + ".namespace"
            )
            return None
        kind, _, name = value.rpartition("/")
        return cls(kind, name, str(namespace or "default"))

    def matches(self, kind: str, name: str) -> bool:
        return name == self.name and (not self.kind or kind == self.kind)

    def __str__(self) -> str:
        return f"{self.kind + '/' if self.kind else ''}{self.namespace}/{self.name}"


class Check:
    """One entry of a block; ``key`` is the block key its entries sit under."""

    key: ClassVar[str]
    fields: ClassVar[tuple[str, ...]]
    path: str

    @classmethod
    def parse(cls, raw: Mapping[str, Any], path: str, err: Errors) -> Check | None:
        raise NotImplementedError

    def subject(self) -> str:
        raise NotImplementedError

    def evaluate(self, seen: Observed) -> list[Miss]:
        raise NotImplementedError


def _int_field(raw: Mapping[str, Any], key: str, path: str, err: Errors) -> Amount | None:
    return None if raw.get(key) is None else Amount.parse(raw[key], join_path(path, key), err)


def _bool_field(raw: Mapping[str, Any], key: str, path: str, err: Errors) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        err.add(f"{value!r}: must be true or false", join_path(path, key))
        return False
    return value


def _str_field(raw: Mapping[str, Any], key: str, path: str, err: Errors) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        err.add(f"{value!r}: must be a non-empty string", join_path(path, key))
        return None
    return value


def _count_miss(name: str, want: Amount | None, got: int) -> list[Miss]:
    if want is None or want.holds(got):
        return []
    return [Miss(name, want.show(), str(got))]


@dataclass(frozen=True)
class WorkloadCheck(Check):
    """``{workload: Deployment/web, running: 4, pending: 1}``: how many of its pods are in each
    phase (``pods``: how many there are)."""

    key: ClassVar[str] = "workloads"
    fields: ClassVar[tuple[str, ...]] = (
        "workload",
        "namespace",
        "running",
        "pending",
        "succeeded",
        "failed",
        "pods",
    )
    path: str
    workload: WorkloadRef
    counts: tuple[tuple[str, Amount], ...]  # (phase or "pods", expected)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], path: str, err: Errors) -> Check | None:
        ref = WorkloadRef.parse(
            raw.get("workload"), raw.get("namespace"), join_path(path, "workload"), err
        )
        keys = ("running", "pending", "succeeded", "failed", "pods")
        if not any(k in raw for k in keys):
            err.add("needs a count: running, pending, succeeded, failed or pods", path)
            return None
        counts = [(k, a) for k in keys if (a := _int_field(raw, k, path, err)) is not None]
        return cls(path, ref, tuple(counts)) if ref is not None else None

    def subject(self) -> str:
        return str(self.workload)

    def evaluate(self, seen: Observed) -> list[Miss]:
        pods = seen.workload_pods(self.workload)
        phases = Counter(r.phase for r in pods)
        misses: list[Miss] = []
        for key, want in self.counts:
            got = len(pods) if key == "pods" else phases.get(key.capitalize(), 0)
            misses += _count_miss(key, want, got)
        return misses


@dataclass(frozen=True)
class PodCheck(Check):
    """``{pod: default/x, phase: Running, node: n, clique: c}``, or the same of every pod of a
    ``workload`` (``sameNode``/``sameClique``: all on one node / in one NVLink clique)."""

    key: ClassVar[str] = "pods"
    fields: ClassVar[tuple[str, ...]] = (
        "pod",
        "workload",
        "namespace",
        "phase",
        "node",
        "clique",
        "sameNode",
        "sameClique",
    )
    path: str
    pod: str | None
    workload: WorkloadRef | None
    phase: str | None
    node: str | None
    clique: str | None
    same_node: bool = False
    same_clique: bool = False

    @classmethod
    def parse(cls, raw: Mapping[str, Any], path: str, err: Errors) -> Check | None:
        if ("pod" in raw) == ("workload" in raw):
            err.add("needs exactly one of pod (NAMESPACE/NAME or NAME) or workload", path)
            return None
        pod = _str_field(raw, "pod", path, err)
        if pod is not None and "/" not in pod:
            namespace = raw.get("namespace") or "default"
            pod = f"{namespace}/{pod}"
        workload = None
        if "workload" in raw:
            workload = WorkloadRef.parse(
                raw["workload"], raw.get("namespace"), join_path(path, "workload"), err
            )
        phase = _str_field(raw, "phase", path, err)
        if phase is not None and phase not in PHASES:
            err.add(f"{phase!r}: allowed: {', '.join(PHASES)}", join_path(path, "phase"))
        check = cls(
            path,
            pod,
            workload,
            phase,
            _str_field(raw, "node", path, err),
            _str_field(raw, "clique", path, err),
            _bool_field(raw, "sameNode", path, err),
            _bool_field(raw, "sameClique", path, err),
        )
        wanted = (check.phase, check.node, check.clique)
        if all(w is None for w in wanted) and not (check.same_node or check.same_clique):
            err.add("needs what to check: phase, node, clique, sameNode or sameClique", path)
            return None
        return check if pod is not None or workload is not None else None

    def subject(self) -> str:
        return self.pod or str(self.workload)

    def evaluate(self, seen: Observed) -> list[Miss]:
        if self.pod is not None:
            rec = seen.ctx.pods.get(self.pod)
            if rec is None:
                return [Miss("pod", "to exist", "no such pod")]
            pods = [rec]
        else:
            assert self.workload is not None
            pods = seen.workload_pods(self.workload)
            if not pods:
                return [Miss("pods", "at least one", "none")]
        misses: list[Miss] = []

        def node_of(r: PodRecord) -> str:
            return r.node or "(none)"

        def clique_of(r: PodRecord) -> str:
            return seen.clique(r.node) or "(none)"

        def phase_of(r: PodRecord) -> str:
            return r.phase

        wanted: list[tuple[str, str | None, Callable[[PodRecord], str]]] = [
            ("phase", self.phase, phase_of),
            ("node", self.node, node_of),
            ("clique", self.clique, clique_of),
        ]
        for name, want, got_of in wanted:
            if want is None:
                continue
            wrong = [r for r in pods if got_of(r) != want]
            if wrong:
                misses.append(Miss(name, want, _per_pod(wrong, got_of, len(pods))))
        same: list[tuple[str, bool, Callable[[PodRecord], str]]] = [
            ("sameNode", self.same_node, node_of),
            ("sameClique", self.same_clique, clique_of),
        ]
        for name, on, key_of in same:
            values = sorted({key_of(r) for r in pods})
            if on and len(values) != 1:
                misses.append(Miss(name, "one for every pod", ", ".join(values)))
        return misses


def _per_pod(pods: list[PodRecord], got_of: Callable[[PodRecord], str], total: int) -> str:
    shown = ", ".join(f"{r.key}: {got_of(r)}" for r in pods[:5])
    more = f" (+{len(pods) - 5} more)" if len(pods) > 5 else ""
    return shown + more if total > 1 or len(pods) > 1 else got_of(pods[0])


@dataclass(frozen=True)
class NodeCheck(Check):
    """``{group: gpu, labels: {k: v}, count: 3, ready: 3}``: how many nodes (of a node group,
    with these labels; all nodes without either) there are and how many are Ready."""

    key: ClassVar[str] = "nodes"
    fields: ClassVar[tuple[str, ...]] = ("group", "labels", "count", "ready", "notReady")
    path: str
    group: str | None
    labels: tuple[tuple[str, str], ...]
    count: Amount | None
    ready: Amount | None
    not_ready: Amount | None

    @classmethod
    def parse(cls, raw: Mapping[str, Any], path: str, err: Errors) -> Check | None:
        from kgpu.sim.scenario_parts import parse_labels

        labels = parse_labels(raw.get("labels"), join_path(path, "labels"), err)
        check = cls(
            path,
            _str_field(raw, "group", path, err),
            tuple(sorted(labels.items())),
            _int_field(raw, "count", path, err),
            _int_field(raw, "ready", path, err),
            _int_field(raw, "notReady", path, err),
        )
        if not any(k in raw for k in ("count", "ready", "notReady")):
            err.add("needs a count: count, ready or notReady", path)
            return None
        return check

    def subject(self) -> str:
        parts = [f"group {self.group}"] if self.group else []
        parts += [f"{k}={v}" for k, v in self.labels]
        return ", ".join(parts) or "all nodes"

    def evaluate(self, seen: Observed) -> list[Miss]:
        nodes = [
            n
            for n in seen.ctx.nodes
            if (self.group is None or n.group == self.group)
            and all(n.labels.get(k) == v for k, v in self.labels)
        ]
        ready = sum(1 for n in nodes if n.ready)
        return (
            _count_miss("count", self.count, len(nodes))
            + _count_miss("ready", self.ready, ready)
            + _count_miss("notReady", self.not_ready, len(nodes) - ready)
        )


@dataclass(frozen=True)
class ResourceCheck(Check):
    """``{node: n, allocatable: {nvidia.com/gpu: 3}, allocated: {nvidia.com/gpu: ">=1"}}``."""

    key: ClassVar[str] = "resources"
    fields: ClassVar[tuple[str, ...]] = ("node", "capacity", "allocatable", "allocated")
    path: str
    node: str
    amounts: tuple[tuple[str, str, Amount], ...]  # (capacity|allocatable|allocated, resource, ..)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], path: str, err: Errors) -> Check | None:
        node = _str_field(raw, "node", path, err)
        if node is None and "node" not in raw:
            err.add("Required value (the node's name)", join_path(path, "node"))
        amounts = []
        for what in ("capacity", "allocatable", "allocated"):
            values = raw.get(what)
            if values is None:
                continue
            if not isinstance(values, Mapping) or not values:
                err.add("must be a map of resource names to quantities", join_path(path, what))
                continue
            for resource, value in values.items():
                at = join_path(path, what, str(resource))
                amount = Amount.parse(value, at, err, resource=str(resource))
                if amount is not None:
                    amounts.append((what, str(resource), amount))
        if not any(k in raw for k in ("capacity", "allocatable", "allocated")):
            err.add("needs capacity, allocatable or allocated", path)
            return None
        return cls(path, node, tuple(amounts)) if node is not None else None

    def subject(self) -> str:
        return f"node {self.node}"

    def evaluate(self, seen: Observed) -> list[Miss]:
        node = seen.node(self.node)
        if node is None:
            return [Miss("node", "to exist", "no such node")]
        misses: list[Miss] = []
        for what, resource, want in self.amounts:
            values = {
                "capacity": node.capacity,
                "allocatable": node.allocatable,
                "allocated": node.requested,
            }[what]
            got = values.get(resource, 0)
            if not want.holds(got):
                misses.append(Miss(f"{what}.{resource}", want.show(), want.show(got)))
        return misses


@dataclass(frozen=True)
class EventCheck(Check):
    """``{reason, type?, object?, message? (substring), messageRegex?, absent?, count?}``: an
    event like this happened (``count`` times), or with ``absent: true`` none did."""

    key: ClassVar[str] = "events"
    fields: ClassVar[tuple[str, ...]] = (
        "type",
        "reason",
        "object",
        "message",
        "messageRegex",
        "absent",
        "count",
    )
    path: str
    type: str | None
    reason: str | None
    object: str | None
    message: str | None
    regex: Regex | None  # RE2, unanchored (a search), as Go's regexp.MatchString
    absent: bool
    count: Amount | None = field(default=None)

    @classmethod
    def parse(cls, raw: Mapping[str, Any], path: str, err: Errors) -> Check | None:
        regex = None
        pattern = _str_field(raw, "messageRegex", path, err)
        if pattern is not None:
            try:
                regex = compile_regex(pattern)
            except RegexError as exc:
                err.add(
                    f"{pattern!r} is not a regular expression: {exc}",
                    join_path(path, "messageRegex"),
                )
        type_ = _str_field(raw, "type", path, err)
        if type_ is not None and type_ not in ("Normal", "Warning"):
            err.add(f"{type_!r}: allowed: Normal, Warning", join_path(path, "type"))
        check = cls(
            path,
            type_,
            _str_field(raw, "reason", path, err),
            _str_field(raw, "object", path, err),
            _str_field(raw, "message", path, err),
            regex,
            _bool_field(raw, "absent", path, err),
            _int_field(raw, "count", path, err),
        )
        if not any(k in raw for k in ("reason", "object", "message", "messageRegex")):
            err.add("needs what to look for: reason, object, message or messageRegex", path)
            return None
        if check.absent and check.count is not None:
            err.add("absent: true and count exclude each other (absent is count 0)", path)
            return None
        return check

    def subject(self) -> str:
        parts = [p for p in (self.type, self.reason, self.object) if p]
        if self.message:
            parts.append(f"message containing {self.message!r}")
        if self.regex is not None:
            parts.append(f"message matching /{self.regex.pattern}/")
        return "event " + " ".join(parts)

    def matches(self, e: Event) -> bool:
        return (
            (self.type is None or e.type == self.type)
            and (self.reason is None or e.reason == self.reason)
            and (self.object is None or e.object == self.object)
            and (self.message is None or self.message in e.message)
            and (self.regex is None or self.regex.search(e.message))
        )

    def evaluate(self, seen: Observed) -> list[Miss]:
        found = [e for e in seen.events if self.matches(e)]
        if self.absent:
            if not found:
                return []
            return [Miss("absent", "no such event", f"{len(found)}, first: {_event(found[0])}")]
        if self.count is not None:  # an entry the recorder counted n times is n events
            return _count_miss("count", self.count, sum(e.count for e in found))
        if found:
            return []
        near = [e for e in seen.events if self.reason is not None and e.reason == self.reason]
        got = "none" + (
            f"; {len(near)} other {self.reason}, last: {_event(near[-1])}" if near else ""
        )
        return [Miss("present", "at least one", got)]


def _event(e: Event) -> str:
    return f"{e.type} {e.reason} {e.object}: {e.message}"


@dataclass(frozen=True)
class ComputeDomainCheck(Check):
    """``{name, namespace?, status?: Ready|NotReady, nodes?: N}``: the domain's status and how
    many nodes its status lists."""

    key: ClassVar[str] = "computeDomains"
    fields: ClassVar[tuple[str, ...]] = ("name", "namespace", "status", "nodes")
    path: str
    name: str
    namespace: str
    status: str | None
    nodes: Amount | None

    @classmethod
    def parse(cls, raw: Mapping[str, Any], path: str, err: Errors) -> Check | None:
        name = _str_field(raw, "name", path, err)
        if "name" not in raw:
            err.add("Required value (the ComputeDomain's name)", join_path(path, "name"))
        namespace = _str_field(raw, "namespace", path, err) or "default"
        status = _str_field(raw, "status", path, err)
        if status is not None and status not in ("Ready", "NotReady"):
            err.add(f"{status!r}: allowed: Ready, NotReady", join_path(path, "status"))
        nodes = _int_field(raw, "nodes", path, err)
        if status is None and nodes is None and "nodes" not in raw:
            err.add("needs what to check: status or nodes", path)
            return None
        return cls(path, name, namespace, status, nodes) if name is not None else None

    def subject(self) -> str:
        return f"ComputeDomain {self.namespace}/{self.name}"

    def evaluate(self, seen: Observed) -> list[Miss]:
        try:
            domain = seen.ctx.store.get(CD_API, CD_KIND, self.name, self.namespace)
        except NotFound:
            return [Miss("computeDomain", "to exist", "no such ComputeDomain")]
        status = domain.get("status") or {}
        misses: list[Miss] = []
        got = str(status.get("status") or "(no status)")
        if self.status is not None and got != self.status:
            conditions = [c for c in status.get("conditions") or () if isinstance(c, Mapping)]
            reason = conditions[0].get("message") if conditions else None
            misses.append(Miss("status", self.status, got + (f" ({reason})" if reason else "")))
        return misses + _count_miss("nodes", self.nodes, len(status.get("nodes") or ()))


#: block key -> check type, in the order docs and error messages list them.
CHECK_TYPES: dict[str, type[Check]] = {
    cls.key: cls
    for cls in (
        WorkloadCheck,
        PodCheck,
        NodeCheck,
        ResourceCheck,
        EventCheck,
        ComputeDomainCheck,
    )
}

__all__ = ["CHECK_TYPES", "Amount", "Check", "Cluster", "Miss", "Observed", "WorkloadRef"]
