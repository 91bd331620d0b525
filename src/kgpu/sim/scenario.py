"""The scenario file: a cluster, the configs its device plugin reads, what to apply, then steps.

Other tools write these files, so the keys of the issue are fixed (``nodes``, ``configs``,
``defaultConfig``, ``devicePlugin``, ``apply``, ``steps``); the rest sits beside them. Loading
validates everything a run will touch (node specs, machine profiles, every config and manifest,
every step) so that a bad scenario fails before the first pod is created, with the file, the
document index and the field path. Relative paths resolve against the scenario's folder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kgpu.autoscaling.ca_settings import CASettings, parse_settings
from kgpu.config.plugin import MIG_STRATEGIES
from kgpu.dra.features import FeatureGateError, Features
from kgpu.dra.shares import DISABLED_POLICY, SharePolicy, parse_share_policy
from kgpu.errors import FieldError, FieldProblem, join_path, shown
from kgpu.sim.expect.schema import Expectations, load_expectations, read_expectations
from kgpu.sim.kubeversion import DEFAULT_VERSION, KubeVersion, parse_version, version_problem
from kgpu.sim.loops import MAX_RUNS
from kgpu.sim.manifests import Manifest
from kgpu.sim.mig_settings import MigManagerSettings, parse_mig_manager
from kgpu.sim.scenario_parts import (
    MAX_NODES,
    MAX_PODS,
    Errors,
    NodeSpec,
    ObjectRef,
    manifest_pods,
    parse_duration,
    parse_node_spec,
    parse_objects,
    resolve,
    unreadable,
)
from kgpu.sim.steps import STEP_TYPES, Step, read_step
from kgpu.sim.steps.clock import AdvanceStep
from kgpu.sim.steps.nodes import AddNodesStep
from kgpu.sim.steps.objects import ApplyStep, ScaleStep
from kgpu.userfiles import display_name, read_yaml

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
    "kubernetesVersion",
    "featureGates",
    "expect",
    "clusterAutoscaler",
    "migManager",
)
#: The actions a step may take (:data:`kgpu.sim.steps.STEP_TYPES`).
STEP_ACTIONS = tuple(STEP_TYPES)


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
    #: the DRA driver's consumable shares (``draDriver`` as a map: the chart's values)
    dra_shares: SharePolicy = DISABLED_POLICY
    apply: tuple[Manifest, ...] = ()
    steps: tuple[Step, ...] = ()
    runtimes: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    #: the kube-scheduler release whose wording and behaviour the cluster has
    kubernetes_version: KubeVersion = field(default_factory=parse_version)
    #: the scenario's ``featureGates``: kube-scheduler's ``--feature-gates`` over the release's
    #: defaults (:mod:`kgpu.releases`)
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    expect: Expectations = field(default_factory=Expectations)  # the ``expect`` key
    #: cluster-autoscaler's flags (``clusterAutoscaler``); it runs when a group autoscales
    cluster_autoscaler: CASettings = field(default_factory=CASettings)
    # every node's MIG manager settings, unless its group says otherwise
    mig_manager: MigManagerSettings = field(default_factory=MigManagerSettings)

    @property
    def features(self) -> Features:
        """The DRA allocator's gates: the release's defaults with ``featureGates`` applied."""
        return Features.for_release(self.kubernetes_version.minor, self.feature_gates)


def parse_step(
    raw: Mapping[str, Any], *, nodes: set[str], base: Path | None = None, index: int = 0
) -> Step:
    """One step given as a map (as in a scenario's ``steps``), checked against ``nodes``."""
    err = Errors("")
    step = read_step(raw, index, base or Path.cwd(), err, set(nodes))
    if err.problems or step is None:
        raise FieldError(err.problems or [FieldProblem("not a step", join_path("steps", index))])
    return step


def parse_scenario(data: object, file: str = "", base: Path | None = None) -> Scenario:
    """A :class:`Scenario` from parsed YAML; FieldError listing every problem."""
    base = base or Path.cwd()
    err = Errors(file)
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
        spec = parse_node_spec(raw, join_path("nodes", i), err)
        if spec is None:
            continue
        if len(names) + spec.most_nodes() > MAX_NODES:
            err.add(
                f"{len(names) + spec.most_nodes()} nodes: at most {MAX_NODES} (kgpu sim's limit "
                "for one scenario)",
                join_path("nodes", i, "count"),
            )
            continue
        twice = [n for n in spec.names() if n in names]
        if twice:  # one problem per group: a repeated group of 90,000 is not 90,000 lines
            more = f" (and {len(twice) - 1} more of its node names)" if len(twice) > 1 else ""
            err.add(f"node {twice[0]!r} is defined twice{more}", join_path("nodes", i, "name"))
        names.update(spec.names())
        nodes.append(spec)
    configs: list[Path] = []
    raw_configs = data.get("configs") or []
    if isinstance(raw_configs, str):
        raw_configs = [raw_configs]
    if not isinstance(raw_configs, list):
        err.add("must be a list of file paths", "configs")
        raw_configs = []
    broken = False
    for i, item in enumerate(raw_configs):
        if not isinstance(item, str):
            err.add("must be a file path", join_path("configs", i))
            continue
        resolved = resolve(base, item)
        problem = unreadable(resolved)
        if problem:
            err.add(problem, join_path("configs", i))
            broken = True
        configs.append(resolved)
    if configs and not broken:
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
        err.add(f"{shown(strategy)}: allowed: {', '.join(MIG_STRATEGIES)}", "migStrategy")
    plugin = data.get("devicePlugin", True)
    if not isinstance(plugin, bool):
        err.add("must be true or false", "devicePlugin")
        plugin = True
    dra, dra_shares = _parse_dra_driver(data.get("draDriver", True), err)
    applied = parse_objects(data.get("apply"), "apply", base, err)
    steps: list[Step] = []
    raw_steps = data.get("steps") or []
    if not isinstance(raw_steps, list):
        err.add("must be a list of steps", "steps")
        raw_steps = []
    live = set(names)
    for i, raw in enumerate(raw_steps):
        step = read_step(raw, i, base, err, live)
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
    _check_totals(nodes, applied, steps, err)
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        err.add("must be an integer", "seed")
        seed = 0
    raw_version = data.get("kubernetesVersion", DEFAULT_VERSION)
    version_error = version_problem(raw_version)
    if version_error:
        err.add(version_error, "kubernetesVersion")
        raw_version = DEFAULT_VERSION
    gates = _parse_feature_gates(data.get("featureGates"), raw_version, err)
    expect = _parse_expect(data.get("expect"), base, err, steps)
    settings = CASettings()
    try:
        settings = parse_settings(data.get("clusterAutoscaler"))
    except FieldError as exc:
        for found in exc.problems:
            err.add(found.message, found.path)
    mig_manager = parse_mig_manager(data.get("migManager"), "migManager", err, parse_duration)
    _check_periodic(nodes, applied, steps, settings, err)
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
        dra_shares=dra_shares,
        apply=tuple(applied),
        steps=tuple(steps),
        runtimes=runtimes,
        seed=seed,
        kubernetes_version=parse_version(raw_version),
        feature_gates=gates,
        expect=expect,
        cluster_autoscaler=settings,
        mig_manager=mig_manager,
    )


#: the keys of ``draDriver`` as a map: the chart's ``draDriver`` values that shape the slices
DRA_DRIVER_KEYS = ("consumableShares", "shareMemoryMinimumMiB", "shareMemoryStepMiB")


def _parse_dra_driver(raw: object, err: Errors) -> tuple[bool, SharePolicy]:
    """``draDriver``: true or false, or a map of the chart's ``draDriver`` values (a map
    means the driver is installed), e.g. ``{consumableShares: memory}``."""
    if isinstance(raw, bool):
        return raw, DISABLED_POLICY
    if not isinstance(raw, Mapping):
        err.add(
            "must be true, false or a map of the driver's values ("
            + ", ".join(DRA_DRIVER_KEYS)
            + ")",
            "draDriver",
        )
        return True, DISABLED_POLICY
    for key in raw:
        if key not in DRA_DRIVER_KEYS:
            err.add(
                f"unknown field {key!r}; allowed: {', '.join(DRA_DRIVER_KEYS)}",
                join_path("draDriver", str(key)),
            )
    try:
        policy = parse_share_policy(
            raw.get("consumableShares"),
            memory_minimum_mib=raw.get("shareMemoryMinimumMiB", 1024),
            memory_step_mib=raw.get("shareMemoryStepMiB", 1024),
            path="draDriver.consumableShares",
        )
    except FieldError as exc:
        for found in exc.problems:
            err.add(found.message, _chart_path(found.path))
        return True, DISABLED_POLICY
    return True, policy


def _chart_path(path: str) -> str:
    """The scenario's name for a policy field (the chart's ``shareMemory...MiB`` values)."""
    for inner, outer in (
        ("consumableShares.memoryMinimumMiB", "shareMemoryMinimumMiB"),
        ("consumableShares.memoryStepMiB", "shareMemoryStepMiB"),
    ):
        if path.endswith(inner):
            return path[: -len(inner)] + outer
    return path


def _parse_feature_gates(raw: object, version: object, err: Errors) -> dict[str, bool]:
    """``featureGates``: ``{Name: true|false}`` checked against the release as kube-scheduler
    checks ``--feature-gates`` (a gate the release lacks, or a locked one, is refused)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        err.add("must be a map of feature gate names to true or false", "featureGates")
        return {}
    minor = parse_version(version).minor
    gates: dict[str, bool] = {}
    for name, value in raw.items():
        try:
            Features.for_release(minor, {str(name): value})
        except FeatureGateError as exc:
            err.add(str(exc), join_path("featureGates", str(name)))
            continue
        gates[str(name)] = bool(value)
    return gates


def _check_totals(
    nodes: list[NodeSpec], applied: list[Manifest], steps: list[Step], err: Errors
) -> None:
    """What the whole scenario may make at most, checked up front: nodes (every group at its
    largest, autoscaled ones at ``autoscale.max``, and every addNodes step) and pods (every
    workload's counts and every scale step), against :data:`MAX_NODES` and :data:`MAX_PODS`."""
    most = sum(spec.most_nodes() for spec in nodes)
    pods = sum(manifest_pods(m) for m in applied)
    for step in steps:
        if isinstance(step, AddNodesStep):
            most += sum(spec.most_nodes() for spec in step.specs)
        elif isinstance(step, ApplyStep):
            pods += sum(manifest_pods(m) for m in step.manifests)
        elif isinstance(step, ScaleStep):
            pods += step.replicas
    if most > MAX_NODES:
        err.add(
            f"the node groups (autoscaled ones at autoscale.max) and addNodes steps make up to "
            f"{most} nodes; kgpu sim runs at most {MAX_NODES} in one scenario",
            "nodes",
        )
    if pods > MAX_PODS:
        err.add(
            f"the workloads and scale steps ask for {pods} pods in all; kgpu sim runs at most "
            f"{MAX_PODS} in one scenario",
            "apply",
        )


def _check_periodic(
    nodes: list[NodeSpec],
    applied: list[Manifest],
    steps: list[Step],
    settings: CASettings,
    err: Errors,
) -> None:
    """The periodic work the scenario's ``advance`` steps ask for, counted up front where it is
    known (cluster-autoscaler's scans when a group autoscales; Prometheus' scrapes and the HPA
    controller's syncs, every 15 s, when a ScaledObject or HorizontalPodAutoscaler is applied),
    against :data:`~kgpu.sim.loops.MAX_RUNS`: ``validate`` and ``sim`` refuse it before the
    first pod. The run counts every timer too (KEDA polls, scans of groups added later)."""
    manifests = list(applied)
    for step in steps:
        if isinstance(step, ApplyStep):
            manifests.extend(step.manifests)
    per_second = 0.0
    if any(spec.autoscale for spec in nodes) or any(
        isinstance(step, AddNodesStep) and any(s.autoscale for s in step.specs) for step in steps
    ):
        per_second += 1 / settings.scan_interval
    kinds = {m.kind for m in manifests}
    if "ScaledObject" in kinds:  # scrapes and the HPA KEDA makes every 15 s, polls every 30 s
        per_second += 2 / 15 + 1 / 30
    elif "HorizontalPodAutoscaler" in kinds:
        per_second += 1 / 15
    if not per_second:
        return
    seconds = 0.0
    for step in steps:
        if isinstance(step, AdvanceStep):
            seconds += step.seconds
            if seconds * per_second > MAX_RUNS:
                runs = seconds * per_second
                err.add(
                    f"the advance steps reach {seconds:g} s of simulated time: {runs:,.0f} "
                    "periodic runs at least (cluster-autoscaler scans every "
                    f"{settings.scan_interval:g} s, scrapes, KEDA polls, HPA syncs); kgpu sim "
                    f"runs at most {MAX_RUNS:,} in one scenario (10 hours at the default "
                    "intervals): shorten the advance or lengthen "
                    "clusterAutoscaler.scan-interval",
                    join_path("steps", step.index, "advance"),
                )
                return


def _parse_expect(raw: object, base: Path, err: Errors, steps: list[Step]) -> Expectations:
    """The ``expect`` key: an expect document inline, or the path of an expect file."""
    if raw is None:
        return Expectations()
    if isinstance(raw, str):
        resolved = resolve(base, raw)
        problem = unreadable(resolved)
        if problem:
            err.add(problem, "expect")
            return Expectations()
        try:
            return load_expectations(resolved, steps)
        except FieldError as exc:
            err.absorb(exc)
            return Expectations()
    return Expectations(read_expectations(raw, "expect", err, steps), (err.file,))


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
    docs = read_yaml(p)  # a regular file (or - for stdin), bounded, UTF-8, YAML within limits
    path = display_name(path)
    if len(docs) > 1:
        if any(isinstance(d, Mapping) and "apiVersion" in d and "kind" in d for d in docs):
            raise FieldError(FieldProblem(manifest_not_scenario(docs, str(path)), file=str(path)))
        raise FieldError(
            FieldProblem(
                f"a scenario is one YAML document; this file has {len(docs)} (separated by ---)",
                file=str(path),
            )
        )
    # files a scenario names are found next to it; next to the working directory for stdin
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
