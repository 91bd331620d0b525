"""``--from-cluster``: the live cluster as a ``kgpu sim`` scenario, shared by ``kgpu sim`` and
``kgpu explain``. The reads are :mod:`kgpu.cluster.snapshot`'s (list-only), the mapping
:mod:`kgpu.sim.fromcluster`'s (pure); this module joins them to the flags, lays a scenario file
given beside it on top (its nodes, apply and steps added, its other keys winning), and writes
``--save``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from kgpu.errors import FieldError, FieldProblem, KgpuError

#: The user agent the import's requests carry (the API server's audit log; tests/rbac).
USER_AGENT = "kgpu-sim"
#: Keys of a scenario laid on top whose lists are added to the imported ones.
LIST_KEYS = ("nodes", "apply", "steps", "configs")

FromCluster = Annotated[
    bool,
    typer.Option(
        "--from-cluster",
        help="Simulate the cluster of the kubeconfig (list-only reads): its nodes, pods, "
        "configs and DRA objects; a SCENARIO given too is laid on top (its nodes, apply and "
        "steps added).",
    ),
]
Kubeconfig = Annotated[
    Path | None,
    typer.Option("--kubeconfig", metavar="FILE", help="With --from-cluster: this kubeconfig."),
]
InCluster = Annotated[
    bool,
    typer.Option("--in-cluster", help="With --from-cluster: the pod's service account."),
]
Namespaces = Annotated[
    list[str] | None,
    typer.Option(
        "--namespace",
        "-n",
        metavar="NS",
        help="With --from-cluster: import the pods and namespaced objects of NS only "
        "(repeatable); every node is imported.",
    ),
]
MachineMap = Annotated[
    list[str] | None,
    typer.Option(
        "--machine-map",
        metavar="PRODUCT=PROFILE",
        help="With --from-cluster: nodes whose nvidia.com/gpu.product is PRODUCT get the "
        "built-in machine PROFILE (kgpu machines); repeatable.",
    ),
]


@dataclass(frozen=True)
class ClusterArgs:
    """The ``--from-cluster`` flags as given."""

    kubeconfig: Path | None = None
    in_cluster: bool = False
    namespaces: tuple[str, ...] = ()
    machine_map: tuple[str, ...] = ()


def parse_machine_map(values: Sequence[str]) -> dict[str, str]:
    """``PRODUCT=PROFILE`` pairs; FieldError at ``--machine-map`` for a bad one."""
    from kgpu.hardware.profiles import profile_names

    out: dict[str, str] = {}
    problems: list[FieldProblem] = []
    known = profile_names()
    for value in values:
        product, sep, profile = value.partition("=")
        if not sep or not product or not profile:
            problems.append(
                FieldProblem(
                    f"{value!r}: must be PRODUCT=PROFILE (e.g. NVIDIA-H100-80GB-HBM3=dgx-h100)",
                    "--machine-map",
                )
            )
        elif profile not in known:
            problems.append(
                FieldProblem(
                    f"{value!r}: unknown machine profile {profile!r}; known: {', '.join(known)}",
                    "--machine-map",
                )
            )
        else:
            out[product] = profile
    if problems:
        raise FieldError(problems)
    return out


def read_objects(args: ClusterArgs) -> Any:
    """The cluster's objects (:class:`~kgpu.sim.fromcluster.ClusterObjects`), read list-only;
    KgpuError/FieldError with what to do when the cluster cannot be read."""
    from kgpu import __version__
    from kgpu.cluster.kube import KubeStore, connection_problems
    from kgpu.cluster.snapshot import read_cluster
    from kgpu.sim.fromcluster import ClusterObjects

    problems = connection_problems(args.kubeconfig, args.in_cluster)
    if problems:
        raise FieldError(problems)
    store = KubeStore.from_config(
        None if args.kubeconfig is None else str(args.kubeconfig),
        user_agent=f"{USER_AGENT}/{__version__}",
        qps=None,  # one read of each kind, paged: no client-side pacing needed
        timeout=30.0,
    )
    try:
        snap = read_cluster(store, args.namespaces)
    finally:
        store.close()
    return ClusterObjects(
        **{k: tuple(v) for k, v in snap.lists.items()},
        server_version=snap.server_version,
        source=snap.host,
        namespaces=args.namespaces,
    )


def import_args(args: ClusterArgs) -> Any:
    """The imported cluster (:class:`~kgpu.sim.fromcluster.Imported`)."""
    from kgpu.sim.fromcluster import TooLarge, import_cluster

    machine_map = parse_machine_map(args.machine_map)
    objects = read_objects(args)
    try:
        return import_cluster(objects, machine_map)
    except TooLarge as exc:
        raise KgpuError(str(exc)) from exc


def overlay(imported: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """The imported scenario with the scenario file ``path`` laid on top."""
    from kgpu.sim.scenario import manifest_not_scenario
    from kgpu.userfiles import read_yaml

    docs = read_yaml(path)
    top = docs[0] if len(docs) == 1 else None
    if top is None:
        top = {}
    if not isinstance(top, Mapping) or len(docs) > 1:
        raise FieldError(
            FieldProblem("must be one scenario map (nodes, apply, steps...)", file=str(path))
        )
    if "apiVersion" in top and "kind" in top:
        raise FieldError(FieldProblem(manifest_not_scenario([top], str(path)), file=str(path)))
    merged = dict(imported)
    for key, value in top.items():
        if key in LIST_KEYS and isinstance(value, list):
            merged[key] = [*(imported.get(key) or []), *value]
        else:
            merged[key] = value
    return merged


def scenario_from_cluster(args: ClusterArgs, on_top: Path | None) -> tuple[Any, Any]:
    """(Scenario, Imported): the cluster, with the scenario file ``on_top`` laid over it."""
    imported = import_args(args)
    return scenario_of(imported, on_top), imported


def scenario_of(imported: Any, on_top: Path | None = None) -> Any:
    """The Scenario of an import. Its Pods were admitted by the API server they come from, so
    they are not put through the schema again (at 50,000 pods that check alone would take
    minutes); everything else, and all of ``on_top``, is checked as any scenario is. A saved
    import is an ordinary scenario: ``kgpu sim FILE`` checks every object in it."""
    import dataclasses

    from kgpu.sim.manifests import Manifest
    from kgpu.sim.scenario import parse_scenario

    data = dict(imported.scenario)
    objects = list(data.get("apply") or [])
    pods = [o for o in objects if o.get("kind") == "Pod"]
    data["apply"] = [o for o in objects if o.get("kind") != "Pod"]
    before = len(data["apply"])
    if on_top is not None:
        data = overlay(data, on_top)
        scenario = parse_scenario(data, str(on_top), on_top.resolve().parent)
    else:
        scenario = parse_scenario(data, "--from-cluster", Path.cwd())
    admitted = tuple(Manifest(pod, "", 0) for pod in pods)
    apply = scenario.apply[:before] + admitted + scenario.apply[before:]
    return dataclasses.replace(scenario, apply=apply)


def save(imported: Any, path: Path, anonymize: bool) -> int:
    """Write the imported cluster as a scenario file; its size."""
    import yaml

    from kgpu.sim.anonymize import anonymize as scrub

    data = scrub(imported.scenario) if anonymize else imported.scenario
    lines = ["# kgpu sim scenario imported with kgpu sim --from-cluster"]
    lines += (
        [f"# unsupported (skipped): {u}" for u in imported.unsupported] if not anonymize else []
    )
    text = "\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False, width=100)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise KgpuError(f"--save {path}: cannot write: {exc.strerror or exc}") from exc
    return len(text.encode())


__all__ = [
    "ClusterArgs",
    "FromCluster",
    "InCluster",
    "Kubeconfig",
    "MachineMap",
    "Namespaces",
    "import_args",
    "overlay",
    "parse_machine_map",
    "save",
    "scenario_from_cluster",
    "scenario_of",
]
