"""The parts a scenario is made of, parsed and checked: node groups, references to objects,
manifests to apply (files or inline), durations, node labels and taints.

Shared by the scenario loader (:mod:`kgpu.sim.scenario`) and the step types
(:mod:`kgpu.sim.steps`), which read the same parts in the same words. Every problem is added to
an :class:`Errors` with the field path, so a scenario reports all of them at once.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgpu.config.fields import is_dns_subdomain
from kgpu.errors import FieldError, FieldProblem, join_path, shown
from kgpu.node.label_syntax import label_key_problem, label_value_problem
from kgpu.node.selectors import TAINT_EFFECTS
from kgpu.sim.manifests import Manifest, check, check_documents
from kgpu.sim.mig_settings import MigManagerSettings, parse_mig_manager
from kgpu.sim.quantity import QuantityError, to_units
from kgpu.userfiles import file_problem, read_yaml, shown_path

NODE_KEYS = (
    "name",
    "count",
    "machine",
    "labels",
    "taints",
    "clique",
    "cpu",
    "memory",
    "pods",
    "unschedulable",
    "autoscale",
    "migManager",
)
# Bounds on what a scenario may ask for, checked while it loads (before any node or pod exists).
#: Nodes in one scenario, all groups (an autoscaled group at its ``autoscale.max``) and
#: addNodes steps together: kgpu sim's limit (its benchmark runs 12,500; Kubernetes itself is
#: tested to 5,000 nodes per cluster).
MAX_NODES = 20_000
#: The largest ``autoscale.max`` a group may have (the size a scenario's node group may have).
MAX_AUTOSCALE = MAX_NODES
#: Pods one scenario may ask for: every workload's replicas, parallelism and completions and
#: every scale step together (the API's own bound on each of these int32 fields is 2147483647;
#: Kubernetes is tested to 150,000 pods per cluster). 100,000 simulated pods take ~1.3 GB.
MAX_PODS = 100_000
#: The longest duration (advance, runtimes, periods): Go's time.Duration, in which Kubernetes
#: and its controllers measure time, ends at 2562047h47m16.854775807s.
MAX_DURATION_SECONDS = (2**63 - 1) / 1e9
#: The kinds a ``traffic`` step may name: what owns pods, and a Pod itself.
TRAFFIC_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "MPIJob", "Pod")
SCALABLE = ("Deployment", "ReplicaSet", "StatefulSet", "Job", "MPIJob")
DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    count: int = 1
    machine: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()
    clique: str | None = None
    cpu: int | None = None  # millicores
    memory: int | None = None  # bytes
    pods: int | None = None
    unschedulable: bool = False
    autoscale: tuple[int, int] | None = None  # (min, max): cluster-autoscaler resizes the group
    # given fields override the scenario's migManager
    mig_manager: MigManagerSettings = field(default_factory=MigManagerSettings)

    def names(self) -> list[str]:
        """The group's starting nodes: ``name`` alone, or ``name-0``, ``name-1``... when there
        are several or the group autoscales (its new nodes continue the numbering)."""
        if self.count == 1 and self.autoscale is None:
            return [self.name]
        return [self.node_name(i) for i in range(self.count)]

    def node_name(self, index: int) -> str:
        return f"{self.name}-{index}"

    def most_nodes(self) -> int:
        """The most nodes the group can have: its count, or its ``autoscale.max``."""
        return max(self.count, self.autoscale[1] if self.autoscale else 0)


@dataclass(frozen=True)
class ObjectRef:
    """What a ``delete`` or ``scale`` step names."""

    kind: str
    name: str
    namespace: str = "default"
    api_version: str = ""


class Errors:
    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[FieldProblem] = []

    def add(self, message: str, path: str, entry: str = "") -> None:
        self.problems.append(FieldProblem(message, path, self.file, entry))

    def absorb(self, exc: FieldError) -> None:
        self.problems.extend(exc.problems)


def parse_duration(value: object) -> float:
    """Seconds from ``90``, ``"90s"``, ``"5m"``, ``"1h"``, ``"500ms"``: finite, not negative,
    at most :data:`MAX_DURATION_SECONDS`."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{shown(value)} is not a duration (e.g. 30, 30s, 5m, 1h)")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{shown(value)} must not be negative")
        return _bounded(value, value)
    match = DURATION_RE.match(value.strip())
    if not match:
        raise ValueError(f"{shown(value)} is not a duration (e.g. 30, 30s, 5m, 1h)")
    number = float(match.group(1))
    unit = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]
    return _bounded(number * unit, value)


def _bounded(seconds: float, given: object) -> float:
    """``seconds`` as a float, when it is a real duration kgpu sim can move its clock by."""
    try:
        value = float(seconds)
    except OverflowError:  # an int of 400 digits
        value = float("inf")
    if value != value:
        raise ValueError(f"{str(given)[:40]!r} is not a number of seconds")
    if value > MAX_DURATION_SECONDS:  # inf, 400 digits
        raise ValueError(
            f"{str(given)[:40]!r} is too long: at most {MAX_DURATION_SECONDS:.0f} seconds "
            "(2562047h, the largest Go time.Duration)"
        )
    return value


def parse_labels(value: object, path: str, err: Errors, allow_null: bool = False) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        err.add("must be a map of label names to values", path)
        return {}
    out: dict[str, Any] = {}
    for k, v in value.items():
        # the API server's rules: a node with such a label could not exist
        if key_problem := label_key_problem(k):
            err.add(key_problem, path)
        elif allow_null and v is None:
            out[k] = None
        elif isinstance(v, bool) or not isinstance(v, (str, int, float)):
            err.add(f"a label value must be a string, not {shown(v)}", join_path(path, k))
        elif value_problem := label_value_problem(k, str(v)):
            err.add(value_problem, path)
        else:
            out[k] = str(v)
    return out


def parse_taint_list(raw: object, path: str, err: Errors) -> list[dict[str, str]]:
    taints: list[dict[str, str]] = []
    if raw is None:
        return taints
    if not isinstance(raw, list):
        err.add("must be a list of {key, value, effect}", path)
        return taints
    for i, t in enumerate(raw):
        where = join_path(path, i)
        if not isinstance(t, Mapping) or not isinstance(t.get("key"), str):
            err.add("must be a map with key, value, effect", where)
            continue
        if t.get("effect") not in TAINT_EFFECTS:
            allowed = ", ".join(TAINT_EFFECTS)
            err.add(f"{shown(t.get('effect'))}: allowed: {allowed}", join_path(where, "effect"))
            continue
        taints.append(
            {"key": str(t["key"]), "value": str(t.get("value") or ""), "effect": str(t["effect"])}
        )
    return taints


def parse_node_spec(raw: object, path: str, err: Errors) -> NodeSpec | None:
    from kgpu.hardware.profiles import load_machine, parse_clique, profile_names

    if not isinstance(raw, Mapping):
        err.add("must be a map (a node group)", path)
        return None
    for key in raw:
        if key not in NODE_KEYS:
            err.add(
                f"unknown field {key!r}; allowed: {', '.join(NODE_KEYS)}", join_path(path, str(key))
            )
    name = raw.get("name")
    if not isinstance(name, str) or not is_dns_subdomain(name):
        given = (
            f"{name[:60]!r}... ({len(name)} characters)"
            if isinstance(name, str) and len(name) > 60
            else shown(name)
        )
        err.add(
            f"{given}: a node name must be a lowercase DNS name (at most 253 characters)",
            join_path(path, "name"),
        )
        return None
    autoscale = _autoscale(raw.get("autoscale"), join_path(path, "autoscale"), err)
    count = raw.get("count", 1 if autoscale is None else autoscale[0])
    if autoscale is not None:
        low, high = autoscale
        if isinstance(count, bool) or not isinstance(count, int) or not low <= count <= high:
            err.add(
                f"{shown(count)}: the starting size of an autoscaled group must be between "
                f"autoscale.min ({low}) and autoscale.max ({high})",
                join_path(path, "count"),
            )
            count = low
    elif isinstance(count, bool) or not isinstance(count, int) or count < 1:
        err.add(f"{shown(count, 40)}: must be a positive integer", join_path(path, "count"))
        count = 1
    elif count > MAX_NODES:
        err.add(
            f"{count}: at most {MAX_NODES} nodes (kgpu sim's limit for one scenario)",
            join_path(path, "count"),
        )
        count = 1
    most = max(count, autoscale[1] if autoscale else 0)
    if (most > 1 or autoscale is not None) and not is_dns_subdomain(f"{name}-{most - 1}"):
        err.add(
            f"{name[:60]}...-{most - 1}: the node names of this group would be longer than 253 "
            "characters (a DNS name): shorten the name",
            join_path(path, "name"),
        )
        return None
    machine = raw.get("machine")
    if machine is not None and (not isinstance(machine, str) or machine not in profile_names()):
        err.add(
            f"unknown machine profile {shown(machine)}; known profiles: "
            f"{', '.join(profile_names())}",
            join_path(path, "machine"),
        )
    clique = raw.get("clique")
    if clique is not None:
        try:
            parse_clique(str(clique))
            if machine in profile_names():
                load_machine(str(machine), hostname=name, clique=str(clique))
        except FieldError as exc:
            for p in exc.problems:
                err.add(p.message, join_path(path, "clique"))
    taints = parse_taint_list(raw.get("taints"), join_path(path, "taints"), err)
    amounts: dict[str, int | None] = {}
    for key in ("cpu", "memory", "pods"):
        value = raw.get(key)
        if value is None:
            amounts[key] = None
            continue
        try:
            amounts[key] = to_units(key, value)
        except QuantityError as exc:
            err.add(str(exc), join_path(path, key))
            amounts[key] = None
    unschedulable = raw.get("unschedulable", False)
    if not isinstance(unschedulable, bool):
        err.add("must be true or false", join_path(path, "unschedulable"))
        unschedulable = False
    return NodeSpec(
        name=name,
        count=count,
        machine=str(machine) if machine is not None else None,
        labels=parse_labels(raw.get("labels"), join_path(path, "labels"), err),
        taints=tuple(taints),
        clique=str(clique) if clique is not None else None,
        cpu=amounts["cpu"],
        memory=amounts["memory"],
        pods=amounts["pods"],
        unschedulable=unschedulable,
        autoscale=autoscale,
        mig_manager=parse_mig_manager(
            raw.get("migManager"), join_path(path, "migManager"), err, parse_duration
        ),
    )


def _autoscale(raw: object, path: str, err: Errors) -> tuple[int, int] | None:
    """A node group's ``autoscale: {min, max}``: the sizes cluster-autoscaler keeps it
    between (``--nodes=min:max:group`` on a real cluster)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        err.add("must be a map with min and max (the group's smallest and largest size)", path)
        return None
    for key in raw:
        if key not in ("min", "max"):
            err.add(f"unknown field {key!r}; allowed: min, max", join_path(path, str(key)))
    sizes: list[int] = []
    for key in ("min", "max"):
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            err.add(f"{shown(value, 40)}: must be a non-negative integer", join_path(path, key))
            return None
        sizes.append(value)
    low, high = sizes
    if high > MAX_AUTOSCALE:
        err.add(
            f"{high}: at most {MAX_AUTOSCALE:,} nodes per group (kgpu sim's limit for one "
            "scenario)",
            join_path(path, "max"),
        )
        return None
    if high < 1 or high < low:
        err.add(f"{high}: must be at least 1 and at least min ({low})", join_path(path, "max"))
        return None
    return low, high


def resolve(base: Path, value: str) -> Path:
    p = Path(value)
    with contextlib.suppress(RuntimeError):  # ~user with no such user: taken literally
        p = p.expanduser()
    return p if p.is_absolute() else base / p


def unreadable(path: Path) -> str:
    """Why ``path`` cannot be read (with the path it resolved to), or "" (never opens it: a
    FIFO would wait for a writer)."""
    problem = file_problem(path)
    if not problem:
        return ""
    if problem.startswith("is a directory"):
        return f"{shown_path(path)} is a directory; list the files in it"
    return f"cannot read {shown_path(path)}: {problem.removeprefix('cannot read: ')}"


CONFIG_KINDS = {
    "plugin-config": "a device-plugin config",
    "mig-parted": "a mig-parted config",
    "operator-values": "GPU Operator Helm values",
}


def config_hint(doc: object, inline: bool = False) -> str:
    from kgpu.config.loader import classify

    what = CONFIG_KINDS.get(classify(doc))
    if what is None:
        return ""
    where = "put it in a file and list that" if inline else "list it"
    return f"this is {what}, not a Kubernetes object: {where} under configs:, not apply:"


def config_not_manifest(docs: list[Any]) -> str:
    """A hint when a file under ``apply`` is a config file (which belongs under ``configs``):
    without it the user sees "kind: Required value" for a file that was never a manifest."""
    hints = [config_hint(d) for d in docs]
    return hints[0] if hints and all(hints) else ""


def parse_objects(value: object, path: str, base: Path, err: Errors) -> list[Manifest]:
    """``apply`` entries: file paths (every document) or inline objects."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out: list[Manifest] = []
    for i, item in enumerate(items):
        where = join_path(path, i) if isinstance(value, list) else path
        if isinstance(item, str):
            resolved = resolve(base, item)
            problem = unreadable(resolved)
            if problem:
                err.add(problem, where)
                continue
            try:
                docs = read_yaml(resolved, shown=item)  # read and parsed once
                misplaced = config_not_manifest(docs)
                if misplaced:
                    err.add(f"{item}: {misplaced}", where)
                    continue
                out.extend(check_documents(docs, item))
            except FieldError as exc:
                err.absorb(exc)
        elif isinstance(item, Mapping):
            misplaced = config_hint(dict(item), inline=True)
            if misplaced:
                err.add(misplaced, where)
                continue
            try:
                m = check(dict(item), err.file, 0)
                out.append(Manifest(m.obj, "", 0))
            except FieldError as exc:
                for p in exc.problems:
                    err.add(p.message, join_path(where, p.path) if p.path else where)
        else:
            err.add("must be a file path or an inline Kubernetes object", where)
    for m in out:
        for at, count in pod_counts(m.obj):
            if count > MAX_PODS:
                message = f"{count}: at most {MAX_PODS} pods (kgpu sim's limit for one scenario)"
                if m.file:
                    err.problems.append(FieldProblem(message, at, m.file, f"document {m.index}"))
                else:
                    err.add(message, join_path(path, at))
    return out


def pod_counts(obj: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(field path, value) of the integers that say how many pods a workload makes."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    found = [(f"spec.{key}", spec.get(key)) for key in ("replicas", "parallelism", "completions")]
    roles = spec.get("mpiReplicaSpecs")
    if isinstance(roles, Mapping):
        found += [
            (f"spec.mpiReplicaSpecs.{role}.replicas", rs.get("replicas"))
            for role, rs in roles.items()
            if isinstance(rs, Mapping)
        ]
    return [(at, v) for at, v in found if isinstance(v, int) and not isinstance(v, bool)]


def manifest_pods(m: Manifest) -> int:
    """The most pods one applied workload asks for (a Job makes ``completions`` pods,
    ``parallelism`` at a time: the larger is its count)."""
    counts = [n for _, n in pod_counts(m.obj)]
    return max(counts, default=0) if m.kind == "Job" else sum(counts)


def parse_ref(raw: object, path: str, err: Errors, default_kind: str = "") -> ObjectRef | None:
    if not isinstance(raw, Mapping):
        err.add("must be a map with kind, name and optionally namespace", path)
        return None
    kind = raw.get("kind", default_kind)
    name = raw.get("name")
    if not isinstance(kind, str) or not kind:
        err.add("Required value", join_path(path, "kind"))
        return None
    if not isinstance(name, str) or not name:
        err.add("Required value", join_path(path, "name"))
        return None
    return ObjectRef(
        kind, name, str(raw.get("namespace") or "default"), str(raw.get("apiVersion") or "")
    )
