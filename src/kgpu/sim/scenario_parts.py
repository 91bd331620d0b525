"""The parts a scenario is made of, parsed and checked: node groups, references to objects,
manifests to apply (files or inline), durations, node labels and taints.

Shared by the scenario loader (:mod:`kgpu.sim.scenario`) and the step types
(:mod:`kgpu.sim.steps`), which read the same parts in the same words. Every problem is added to
an :class:`Errors` with the field path, so a scenario reports all of them at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.node.label_syntax import label_key_problem, label_value_problem
from kgpu.node.selectors import TAINT_EFFECTS
from kgpu.sim.manifests import Manifest, check, load_manifest_file
from kgpu.sim.mig_settings import MigManagerSettings, parse_mig_manager
from kgpu.sim.quantity import QuantityError, to_units

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
#: The largest ``autoscale.max`` a group may have (the size a scenario's node group may have).
MAX_AUTOSCALE = 20_000
#: The kinds a ``traffic`` step may name: what owns pods, and a Pod itself.
TRAFFIC_KINDS = ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet", "Job", "MPIJob", "Pod")
SCALABLE = ("Deployment", "ReplicaSet", "StatefulSet", "Job", "MPIJob")
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
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
    """Seconds from ``90``, ``"90s"``, ``"5m"``, ``"1h"``, ``"500ms"``."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{value!r} must not be negative")
        return float(value)
    match = DURATION_RE.match(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a duration (e.g. 30, 30s, 5m, 1h)")
    number = float(match.group(1))
    return number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]


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
            err.add(f"{v!r}: a label value must be a string", join_path(path, k))
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
            err.add(f"{t.get('effect')!r}: allowed: {allowed}", join_path(where, "effect"))
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
    if not isinstance(name, str) or not NAME_RE.match(name):
        err.add(f"{name!r}: a node name must be a lowercase DNS name", join_path(path, "name"))
        return None
    autoscale = _autoscale(raw.get("autoscale"), join_path(path, "autoscale"), err)
    count = raw.get("count", 1 if autoscale is None else autoscale[0])
    if autoscale is not None:
        low, high = autoscale
        if isinstance(count, bool) or not isinstance(count, int) or not low <= count <= high:
            err.add(
                f"{count!r}: the starting size of an autoscaled group must be between "
                f"autoscale.min ({low}) and autoscale.max ({high})",
                join_path(path, "count"),
            )
            count = low
    elif isinstance(count, bool) or not isinstance(count, int) or count < 1:
        err.add(f"{count!r}: must be a positive integer", join_path(path, "count"))
        count = 1
    machine = raw.get("machine")
    if machine is not None and machine not in profile_names():
        err.add(
            f"unknown machine profile {machine!r}; known profiles: {', '.join(profile_names())}",
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
            err.add(f"{value!r}: must be a non-negative integer", join_path(path, key))
            return None
        sizes.append(value)
    low, high = sizes
    if high > MAX_AUTOSCALE:
        err.add(f"{high}: at most {MAX_AUTOSCALE:,} nodes per group", join_path(path, "max"))
        return None
    if high < 1 or high < low:
        err.add(
            f"{high}: must be at least 1 and at least min ({low})", join_path(path, "max")
        )
        return None
    return low, high


def resolve(base: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def unreadable(path: Path) -> str:
    """Why ``path`` cannot be read (with the path it resolved to), or ""."""
    if path.is_dir():
        return f"{path} is a directory; list the files in it"
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    return ""


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


def config_not_manifest(path: Path) -> str:
    """A hint when a file under ``apply`` is a config file (which belongs under ``configs``):
    without it the user sees "kind: Required value" for a file that was never a manifest."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return ""  # load_manifest_file reports it
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
            misplaced = config_not_manifest(resolved)
            if misplaced:
                err.add(f"{item}: {misplaced}", where)
                continue
            try:
                out.extend(load_manifest_file(resolved, shown=item))
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
    return out


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
