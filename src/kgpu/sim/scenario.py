"""The scenario file: a cluster, the configs its device plugin reads, what to apply, then steps.

Other tools write these files, so the keys of the issue are fixed (``nodes``, ``configs``,
``defaultConfig``, ``devicePlugin``, ``apply``, ``steps``); the rest sits beside them. Loading
validates everything a run will touch (node specs, machine profiles, every config and manifest,
every step) so that a bad scenario fails before the first pod is created, with the file, the
document index and the field path. Relative paths resolve against the scenario's folder.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kgpu.config.plugin import MIG_STRATEGIES
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.node.label_syntax import label_key_problem, label_value_problem
from kgpu.node.selectors import TAINT_EFFECTS
from kgpu.sim.manifests import Manifest, check, load_manifest_file
from kgpu.sim.quantity import QuantityError, to_units

TOP_KEYS = (
    "name",
    "description",
    "nodes",
    "configs",
    "defaultConfig",
    "migStrategy",
    "devicePlugin",
    "draDriver",
    "apply",
    "steps",
    "runtimes",
    "seed",
)
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
)
STEP_ACTIONS = (
    "apply",
    "delete",
    "label",
    "xid",
    "advance",
    "failNode",
    "recoverNode",
    "deleteNode",
    "addNodes",
    "scale",
    "cordon",
    "uncordon",
    "taint",
    "devicePlugin",
)
SCALABLE = ("Deployment", "ReplicaSet", "StatefulSet", "Job", "MPIJob")
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")


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

    def names(self) -> list[str]:
        return [self.name] if self.count == 1 else [f"{self.name}-{i}" for i in range(self.count)]


@dataclass(frozen=True)
class ObjectRef:
    """What a ``delete`` or ``scale`` step names."""

    kind: str
    name: str
    namespace: str = "default"
    api_version: str = ""


@dataclass(frozen=True)
class Step:
    """One step: ``action`` is one of :data:`STEP_ACTIONS`; ``value`` its parsed argument."""

    action: str
    value: Any
    title: str = ""
    index: int = 0

    def describe(self) -> str:
        if self.title:
            return self.title
        v = self.value
        if self.action in ("apply", "delete"):
            return f"{self.action} " + ", ".join(
                m.name if isinstance(m, Manifest) else f"{m.kind}/{m.name}" for m in v
            )
        if self.action == "advance":
            return f"advance the clock {v:g}s"
        if self.action == "label":
            pairs = ", ".join(f"{k}={'-' if val is None else val}" for k, val in v[1].items())
            return f"label {v[0]} {pairs}"
        if self.action == "xid":
            return f"XID {v['xid']} on {v['node']} GPU {v['gpu']}"
        if self.action == "scale":
            ref, replicas = v
            return f"scale {ref.kind}/{ref.name} to {replicas}"
        if self.action == "taint":
            shown = ", ".join(f"{t['key']}={t['value']}:{t['effect']}" for t in v[1]) or "none"
            return f"taint {v[0]}: {shown}"
        if self.action == "devicePlugin":
            return "start the device plugin" if v else "stop the device plugin"
        if self.action == "addNodes":
            return "add nodes " + ", ".join(n for spec in v for n in spec.names())
        return f"{self.action} {v}"


@dataclass(frozen=True)
class Scenario:
    file: str
    base: Path
    name: str = ""
    description: str = ""
    nodes: tuple[NodeSpec, ...] = ()
    configs: tuple[Path, ...] = ()
    default_config: str | None = None
    mig_strategy: str | None = None
    device_plugin: bool = True
    dra_driver: bool = True
    apply: tuple[Manifest, ...] = ()
    steps: tuple[Step, ...] = ()
    runtimes: dict[str, float] = field(default_factory=dict)
    seed: int = 0


class _Errors:
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
    match = _DURATION_RE.match(str(value).strip())
    if not match:
        raise ValueError(f"{value!r} is not a duration (e.g. 30, 30s, 5m, 1h)")
    number = float(match.group(1))
    return number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]


def _labels(value: object, path: str, err: _Errors, allow_null: bool = False) -> dict[str, Any]:
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


def _taints(raw: object, path: str, err: _Errors) -> list[dict[str, str]]:
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


def _node_spec(raw: object, path: str, err: _Errors) -> NodeSpec | None:
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
    if not isinstance(name, str) or not _NAME_RE.match(name):
        err.add(f"{name!r}: a node name must be a lowercase DNS name", join_path(path, "name"))
        return None
    count = raw.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
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
    taints = _taints(raw.get("taints"), join_path(path, "taints"), err)
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
        labels=_labels(raw.get("labels"), join_path(path, "labels"), err),
        taints=tuple(taints),
        clique=str(clique) if clique is not None else None,
        cpu=amounts["cpu"],
        memory=amounts["memory"],
        pods=amounts["pods"],
        unschedulable=unschedulable,
    )


def _resolve(base: Path, value: str) -> Path:
    p = Path(value).expanduser()
    return p if p.is_absolute() else base / p


def _unreadable(path: Path) -> str:
    """Why ``path`` cannot be read (with the path it resolved to), or ""."""
    if path.is_dir():
        return f"{path} is a directory; list the files in it"
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    return ""


_CONFIG_KINDS = {
    "plugin-config": "a device-plugin config",
    "mig-parted": "a mig-parted config",
    "operator-values": "GPU Operator Helm values",
}


def _config_hint(doc: object, inline: bool = False) -> str:
    from kgpu.config.loader import classify

    what = _CONFIG_KINDS.get(classify(doc))
    if what is None:
        return ""
    where = "put it in a file and list that" if inline else "list it"
    return f"this is {what}, not a Kubernetes object: {where} under configs:, not apply:"


def _config_not_manifest(path: Path) -> str:
    """A hint when a file under ``apply`` is a config file (which belongs under ``configs``):
    without it the user sees "kind: Required value" for a file that was never a manifest."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return ""  # load_manifest_file reports it
    hints = [_config_hint(d) for d in docs]
    return hints[0] if hints and all(hints) else ""


def _objects(value: object, path: str, base: Path, err: _Errors) -> list[Manifest]:
    """``apply`` entries: file paths (every document) or inline objects."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out: list[Manifest] = []
    for i, item in enumerate(items):
        where = join_path(path, i) if isinstance(value, list) else path
        if isinstance(item, str):
            resolved = _resolve(base, item)
            problem = _unreadable(resolved)
            if problem:
                err.add(problem, where)
                continue
            misplaced = _config_not_manifest(resolved)
            if misplaced:
                err.add(f"{item}: {misplaced}", where)
                continue
            try:
                out.extend(load_manifest_file(resolved, shown=item))
            except FieldError as exc:
                err.absorb(exc)
        elif isinstance(item, Mapping):
            misplaced = _config_hint(dict(item), inline=True)
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


def _ref(raw: object, path: str, err: _Errors, default_kind: str = "") -> ObjectRef | None:
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


def _step(raw: object, index: int, base: Path, err: _Errors, node_names: set[str]) -> Step | None:
    path = join_path("steps", index)
    if not isinstance(raw, Mapping):
        err.add(f"must be a map with one of: {', '.join(STEP_ACTIONS)}", path)
        return None
    title = raw.get("name", "")
    actions = [k for k in raw if k != "name"]
    unknown = [k for k in actions if k not in STEP_ACTIONS]
    if unknown or len(actions) != 1:
        what = f"unknown action {unknown[0]!r}" if unknown else "needs exactly one action"
        err.add(f"{what}; allowed: {', '.join(STEP_ACTIONS)}", path)
        return None
    action = str(actions[0])
    value = raw[action]
    where = join_path(path, action)

    def known_node(name: object, at: str) -> str | None:
        if not isinstance(name, str) or name not in node_names:
            err.add(f"{name!r}: no such node; nodes: {', '.join(sorted(node_names)) or 'none'}", at)
            return None
        return name

    parsed: Any = None
    if action == "apply":
        parsed = _objects(value, where, base, err)
    elif action == "delete":
        items = value if isinstance(value, list) else [value]
        refs: list[ObjectRef | Manifest] = []
        for i, item in enumerate(items):
            at = join_path(where, i) if isinstance(value, list) else where
            if isinstance(item, str):
                refs.extend(_objects(item, at, base, err))
            else:
                ref = _ref(item, at, err)
                if ref:
                    refs.append(ref)
        parsed = refs
    elif action == "label":
        if not isinstance(value, Mapping):
            err.add("must be a map with node and labels", where)
            return None
        node = known_node(value.get("node"), join_path(where, "node"))
        labels = _labels(value.get("labels"), join_path(where, "labels"), err, allow_null=True)
        parsed = (node, labels)
    elif action == "xid":
        if not isinstance(value, Mapping):
            err.add("must be a map with node, gpu and xid", where)
            return None
        node = known_node(value.get("node"), join_path(where, "node"))
        gpu = value.get("gpu", 0)
        if isinstance(gpu, bool) or not isinstance(gpu, (int, str)):
            err.add("must be a GPU index or UUID", join_path(where, "gpu"))
        xid = value.get("xid", 79)
        if isinstance(xid, bool) or not isinstance(xid, int) or xid < 0:
            err.add(f"{xid!r}: must be an XID number", join_path(where, "xid"))
        for key in ("gi", "ci"):  # NVML's GPU-instance / compute-instance ids of a MIG device
            ident = value.get(key)
            if ident is not None and (
                isinstance(ident, bool) or not isinstance(ident, int) or ident < 0
            ):
                err.add(
                    f"{ident!r}: must be a non-negative integer (the MIG device's "
                    f"{'GPU' if key == 'gi' else 'compute'}-instance id)",
                    join_path(where, key),
                )
        if value.get("ci") is not None and value.get("gi") is None:
            err.add(
                "a compute-instance id needs its GPU instance: set gi too", join_path(where, "ci")
            )
        parsed = {
            "node": node,
            "gpu": gpu,
            "xid": xid,
            "gi": value.get("gi"),
            "ci": value.get("ci"),
        }
    elif action == "advance":
        try:
            parsed = parse_duration(value)
        except ValueError as exc:
            err.add(str(exc), where)
    elif action in ("failNode", "recoverNode", "deleteNode", "cordon", "uncordon"):
        parsed = known_node(value, where)
        if action == "deleteNode" and parsed:
            node_names.discard(parsed)
    elif action == "addNodes":
        items = value if isinstance(value, list) else [value]
        specs = []
        for i, item in enumerate(items):
            spec = _node_spec(item, join_path(where, i), err)
            if spec:
                for n in spec.names():
                    if n in node_names:
                        err.add(f"node {n!r} already exists", join_path(where, i, "name"))
                    node_names.add(n)
                specs.append(spec)
        parsed = specs
    elif action == "taint":
        if not isinstance(value, Mapping):
            err.add("must be a map with node and taints (the node's new taint list)", where)
            return None
        node = known_node(value.get("node"), join_path(where, "node"))
        parsed = (node, _taints(value.get("taints") or [], join_path(where, "taints"), err))
    elif action == "devicePlugin":
        if not isinstance(value, bool):
            err.add("must be true (start the device plugin) or false (stop it)", where)
            return None
        parsed = value
    elif action == "scale":
        ref = _ref(value, where, err, default_kind="Deployment")
        replicas = value.get("replicas") if isinstance(value, Mapping) else None
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            err.add(f"{replicas!r}: must be a non-negative integer", join_path(where, "replicas"))
            return None
        if ref and ref.kind not in SCALABLE:
            err.add(f"{ref.kind!r}: allowed: {', '.join(SCALABLE)}", join_path(where, "kind"))
            return None
        parsed = (ref, replicas)
    return Step(action, parsed, str(title or ""), index)


def parse_step(
    raw: Mapping[str, Any], *, nodes: set[str], base: Path | None = None, index: int = 0
) -> Step:
    """One step given as a map (as in a scenario's ``steps``), checked against ``nodes``."""
    err = _Errors("")
    step = _step(raw, index, base or Path.cwd(), err, set(nodes))
    if err.problems or step is None:
        raise FieldError(err.problems or [FieldProblem("not a step", join_path("steps", index))])
    return step


def parse_scenario(data: object, file: str = "", base: Path | None = None) -> Scenario:
    """A :class:`Scenario` from parsed YAML; FieldError listing every problem."""
    base = base or Path.cwd()
    err = _Errors(file)
    if not isinstance(data, Mapping):
        raise FieldError(FieldProblem("a scenario must be a YAML map", file=file))
    if "apiVersion" in data and "kind" in data:
        raise FieldError(FieldProblem(manifest_not_scenario([data], file), file=file))
    for key in data:
        if key not in TOP_KEYS:
            err.add(f"unknown field {key!r}; allowed: {', '.join(TOP_KEYS)}", str(key))
    nodes: list[NodeSpec] = []
    raw_nodes = data.get("nodes") or []
    if not isinstance(raw_nodes, list):
        err.add("must be a list of node groups", "nodes")
        raw_nodes = []
    names: set[str] = set()
    for i, raw in enumerate(raw_nodes):
        spec = _node_spec(raw, join_path("nodes", i), err)
        if spec is None:
            continue
        for n in spec.names():
            if n in names:
                err.add(f"node {n!r} is defined twice", join_path("nodes", i, "name"))
            names.add(n)
        nodes.append(spec)
    configs: list[Path] = []
    raw_configs = data.get("configs") or []
    if isinstance(raw_configs, str):
        raw_configs = [raw_configs]
    if not isinstance(raw_configs, list):
        err.add("must be a list of file paths", "configs")
        raw_configs = []
    unreadable = False
    for i, item in enumerate(raw_configs):
        if not isinstance(item, str):
            err.add("must be a file path", join_path("configs", i))
            continue
        resolved = _resolve(base, item)
        problem = _unreadable(resolved)
        if problem:
            err.add(problem, join_path("configs", i))
            unreadable = True
        configs.append(resolved)
    if configs and not unreadable:
        from kgpu.config.loader import load_config_files

        try:
            load_config_files(configs)
        except FieldError as exc:
            err.absorb(exc)
    default = data.get("defaultConfig")
    if default is not None and not isinstance(default, str):
        err.add("must be the name of a device-plugin config entry", "defaultConfig")
    strategy = data.get("migStrategy")
    if strategy is not None and strategy not in MIG_STRATEGIES:
        err.add(f"{strategy!r}: allowed: {', '.join(MIG_STRATEGIES)}", "migStrategy")
    plugin = data.get("devicePlugin", True)
    if not isinstance(plugin, bool):
        err.add("must be true or false", "devicePlugin")
        plugin = True
    dra = data.get("draDriver", True)
    if not isinstance(dra, bool):
        err.add("must be true or false", "draDriver")
        dra = True
    applied = _objects(data.get("apply"), "apply", base, err)
    steps: list[Step] = []
    raw_steps = data.get("steps") or []
    if not isinstance(raw_steps, list):
        err.add("must be a list of steps", "steps")
        raw_steps = []
    live = set(names)
    for i, raw in enumerate(raw_steps):
        step = _step(raw, i, base, err, live)
        if step is not None:
            steps.append(step)
    runtimes: dict[str, float] = {}
    raw_rt = data.get("runtimes") or {}
    if not isinstance(raw_rt, Mapping):
        err.add("must be a map of workload names to durations", "runtimes")
        raw_rt = {}
    for k, v in raw_rt.items():
        try:
            runtimes[str(k)] = parse_duration(v)
        except ValueError as exc:
            err.add(str(exc), join_path("runtimes", str(k)))
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        err.add("must be an integer", "seed")
        seed = 0
    if err.problems:
        raise FieldError(err.problems)
    return Scenario(
        file=file,
        base=base,
        name=str(data.get("name") or (Path(file).stem if file else "scenario")),
        description=str(data.get("description") or ""),
        nodes=tuple(nodes),
        configs=tuple(configs),
        default_config=default,
        mig_strategy=strategy,
        device_plugin=plugin,
        dra_driver=dra,
        apply=tuple(applied),
        steps=tuple(steps),
        runtimes=runtimes,
        seed=seed,
    )


def manifest_not_scenario(docs: list[Any], file: str) -> str:
    """What to say when a Kubernetes manifest is given where a scenario belongs: "unknown field
    apiVersion, kind, metadata, spec" would not tell the user what to do."""
    objects = [
        f"{d.get('kind')} {(d.get('metadata') or {}).get('name', '?')}"
        for d in docs
        if isinstance(d, Mapping) and isinstance(d.get("metadata") or {}, Mapping)
    ]
    shown = ", ".join(objects[:3]) + (", ..." if len(objects) > 3 else "")
    name = Path(file).name if file else "manifest.yaml"
    return (
        f"this is a Kubernetes manifest ({shown}), not a kgpu sim scenario; a scenario lists "
        f"manifests under apply:, for example:\n"
        f"  nodes:\n"
        f"  - {{name: gpu-node, machine: rtx-2080ti}}\n"
        f"  apply: [{name}]"
    )


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise FieldError(
            FieldProblem(f"cannot read: {exc.strerror or exc}", file=str(path))
        ) from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise FieldError(
            FieldProblem(
                f"{where}not valid YAML: {getattr(exc, 'problem', None) or exc}", file=str(path)
            )
        ) from None
    if len(docs) > 1:
        if any(isinstance(d, Mapping) and "apiVersion" in d and "kind" in d for d in docs):
            raise FieldError(FieldProblem(manifest_not_scenario(docs, str(path)), file=str(path)))
        raise FieldError(
            FieldProblem(
                f"a scenario is one YAML document; this file has {len(docs)} (separated by ---)",
                file=str(path),
            )
        )
    return parse_scenario(docs[0] if docs else None, str(path), p.resolve().parent)


def scenario_from_dict(data: Mapping[str, Any], base: Path | None = None) -> Scenario:
    """For tests and tools that build scenarios in code."""
    return parse_scenario(dict(data), "", base)


__all__ = [
    "NodeSpec",
    "ObjectRef",
    "Scenario",
    "Step",
    "load_scenario",
    "parse_duration",
    "parse_scenario",
    "parse_step",
    "scenario_from_dict",
]
