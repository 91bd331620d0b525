"""A pod spec as the scheduler reads it: validated once, then reduced to plain tuples.

Validation follows the API server's rules that change scheduling (quantities, extended
resources that must be integers with requests equal to limits, selector operators); what passes
becomes a :class:`PodRequirements`, whose ``static_key`` lets the scheduler cache the verdict of
the label/taint filters per class of identical nodes instead of re-evaluating them per node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.errors import FieldProblem, join_path
from kgpu.node.selectors import (
    SELECTOR_OPERATORS,
    TAINT_EFFECTS,
    NodeSelector,
    Toleration,
    labels_match,
    parse_node_selector,
    parse_tolerations,
)
from kgpu.sim.quantity import QuantityError, parse_quantity, to_units

Obj = dict[str, Any]

NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")


def is_extended(resource: str) -> bool:
    """Extended resources are domain-qualified names outside ``kubernetes.io`` (and hugepages
    are native): the API server requires them to be integers with requests equal to limits."""
    if resource in NATIVE_RESOURCES or resource.startswith("hugepages-"):
        return False
    if "/" not in resource:
        return False
    domain = resource.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


@dataclass(frozen=True)
class PodRequirements:
    """What the scheduler and the kubelet need from one pod, computed once."""

    requests: tuple[tuple[str, int], ...]  # effective requests, non-zero only, sorted
    containers: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]  # (name, extended requests)
    node_selector: tuple[tuple[str, str], ...]
    affinity: NodeSelector | None  # None: no required node affinity
    tolerations: tuple[Toleration, ...]
    node_name: str  # spec.nodeName set by the user: the scheduler is bypassed

    @property
    def static_key(self) -> tuple[object, ...]:
        return (self.node_selector, self.affinity, self.tolerations)

    def request(self, resource: str) -> int:
        for name, amount in self.requests:
            if name == resource:
                return amount
        return 0


# -- validation ------------------------------------------------------------------------------


def _str_map(value: object, path: str, problems: list[FieldProblem]) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping):
        problems.append(FieldProblem("must be a map of strings", path))
        return
    for k, v in value.items():
        if not isinstance(k, str) or not isinstance(v, str):
            problems.append(FieldProblem(f"{k!r}: {v!r}: keys and values must be strings", path))


def _validate_resources(resources: object, path: str, problems: list[FieldProblem]) -> None:
    if resources is None:
        return
    if not isinstance(resources, Mapping):
        problems.append(FieldProblem("must be a map with requests/limits", path))
        return
    parsed: dict[str, dict[str, int]] = {}
    for part in ("requests", "limits"):
        values = resources.get(part)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            problems.append(FieldProblem("must be a map of quantities", join_path(path, part)))
            continue
        parsed[part] = {}
        for name, raw in values.items():
            where = join_path(path, part, str(name))
            try:
                parsed[part][str(name)] = to_units(str(name), raw)
            except QuantityError as exc:
                problems.append(FieldProblem(str(exc), where))
                continue
            if is_extended(str(name)):
                exact = parse_quantity(raw)
                if exact != exact.to_integral_value():
                    problems.append(
                        FieldProblem(f"{raw!r}: must be a whole number (extended resource)", where)
                    )
    requests, limits = parsed.get("requests", {}), parsed.get("limits", {})
    for name, amount in requests.items():
        if not is_extended(name):
            continue
        where = join_path(path, "requests", name)
        if name not in limits:
            problems.append(
                FieldProblem("Limit must be set for non overcommitable resources", where)
            )
        elif limits[name] != amount:
            problems.append(FieldProblem(f"must be equal to {name} limit of {limits[name]}", where))
    for name, amount in requests.items():
        if name in limits and not is_extended(name) and amount > limits[name]:
            problems.append(
                FieldProblem(
                    f"must be less than or equal to {name} limit",
                    join_path(path, "requests", name),
                )
            )


def _validate_requirements(
    exprs: object, path: str, problems: list[FieldProblem], fields: bool = False
) -> None:
    if exprs is None:
        return
    if not isinstance(exprs, list):
        problems.append(FieldProblem("must be a list", path))
        return
    for i, expr in enumerate(exprs):
        where = join_path(path, i)
        if not isinstance(expr, Mapping):
            problems.append(FieldProblem("must be a map with key, operator, values", where))
            continue
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values")
        if not isinstance(key, str) or not key:
            problems.append(FieldProblem("is required", join_path(where, "key")))
        if fields and key not in (None, "metadata.name"):
            problems.append(
                FieldProblem(
                    f"{key!r}: not a supported field selector; allowed: metadata.name",
                    join_path(where, "key"),
                )
            )
        if op not in SELECTOR_OPERATORS or (fields and op not in ("In", "NotIn")):
            allowed = ("In", "NotIn") if fields else SELECTOR_OPERATORS
            problems.append(
                FieldProblem(
                    f"{op!r}: not a valid selector operator; allowed: {', '.join(allowed)}",
                    join_path(where, "operator"),
                )
            )
            continue
        if values is not None and (
            not isinstance(values, list) or not all(isinstance(v, str) for v in values)
        ):
            problems.append(FieldProblem("must be a list of strings", join_path(where, "values")))
            continue
        vals = values or []
        if op in ("In", "NotIn") and not vals:
            problems.append(
                FieldProblem(
                    f"must be specified when `operator` is '{op}'", join_path(where, "values")
                )
            )
        elif op in ("Exists", "DoesNotExist") and vals:
            problems.append(
                FieldProblem(
                    f"may not be specified when `operator` is '{op}'", join_path(where, "values")
                )
            )
        elif op in ("Gt", "Lt"):
            if len(vals) != 1:
                problems.append(
                    FieldProblem(
                        "must be specified single value when `operator` is 'Lt' or 'Gt'",
                        join_path(where, "values"),
                    )
                )
            else:
                try:
                    int(vals[0])
                except ValueError:
                    problems.append(
                        FieldProblem(
                            f"{vals[0]!r}: must be an integer", join_path(where, "values", 0)
                        )
                    )


def validate_pod_spec(spec: object, path: str) -> list[FieldProblem]:
    """Problems with a pod spec (``path`` is where it sits in its manifest)."""
    problems: list[FieldProblem] = []
    if not isinstance(spec, Mapping):
        return [FieldProblem("must be a map (the pod spec)", path)]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        problems.append(
            FieldProblem("must list at least one container", join_path(path, "containers"))
        )
        containers = []
    for part in ("containers", "initContainers"):
        items = spec.get(part) or []
        if not isinstance(items, list):
            problems.append(FieldProblem("must be a list", join_path(path, part)))
            continue
        seen: set[str] = set()
        for i, c in enumerate(items):
            where = join_path(path, part, i)
            if not isinstance(c, Mapping):
                problems.append(FieldProblem("must be a map (a container)", where))
                continue
            name = c.get("name")
            if not isinstance(name, str) or not name:
                problems.append(FieldProblem("is required", join_path(where, "name")))
            elif name in seen:
                problems.append(
                    FieldProblem(f"Duplicate value: {name!r}", join_path(where, "name"))
                )
            else:
                seen.add(name)
            _validate_resources(c.get("resources"), join_path(where, "resources"), problems)
    _str_map(spec.get("nodeSelector"), join_path(path, "nodeSelector"), problems)
    if spec.get("nodeName") is not None and not isinstance(spec.get("nodeName"), str):
        problems.append(FieldProblem("must be a string", join_path(path, "nodeName")))
    tolerations = spec.get("tolerations")
    if tolerations is not None:
        if not isinstance(tolerations, list):
            problems.append(FieldProblem("must be a list", join_path(path, "tolerations")))
        else:
            for i, tol in enumerate(tolerations):
                where = join_path(path, "tolerations", i)
                if not isinstance(tol, Mapping):
                    problems.append(FieldProblem("must be a map", where))
                    continue
                op = tol.get("operator", "Equal")
                if op not in ("Equal", "Exists"):
                    problems.append(
                        FieldProblem(
                            f"{op!r}: allowed: Equal, Exists", join_path(where, "operator")
                        )
                    )
                if op == "Exists" and tol.get("value"):
                    problems.append(
                        FieldProblem(
                            "must be empty when `operator` is 'Exists'", join_path(where, "value")
                        )
                    )
                if not tol.get("key") and op != "Exists":
                    problems.append(
                        FieldProblem(
                            "operator must be Exists when `key` is empty, which means "
                            '"match all values and all keys"',
                            join_path(where, "operator"),
                        )
                    )
                eff = tol.get("effect")
                if eff not in (None, "", *TAINT_EFFECTS):
                    problems.append(
                        FieldProblem(
                            f"{eff!r}: allowed: {', '.join(TAINT_EFFECTS)}",
                            join_path(where, "effect"),
                        )
                    )
    affinity = spec.get("affinity")
    if affinity is not None:
        if not isinstance(affinity, Mapping):
            problems.append(FieldProblem("must be a map", join_path(path, "affinity")))
        else:
            na = affinity.get("nodeAffinity") or {}
            req = (
                na.get("requiredDuringSchedulingIgnoredDuringExecution")
                if isinstance(na, Mapping)
                else None
            )
            rpath = join_path(
                path, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"
            )
            if req is not None:
                terms = req.get("nodeSelectorTerms") if isinstance(req, Mapping) else None
                if not isinstance(terms, list) or not terms:
                    problems.append(
                        FieldProblem(
                            "must have at least one node selector term",
                            join_path(rpath, "nodeSelectorTerms"),
                        )
                    )
                else:
                    for i, term in enumerate(terms):
                        tpath = join_path(rpath, "nodeSelectorTerms", i)
                        if not isinstance(term, Mapping):
                            problems.append(FieldProblem("must be a map", tpath))
                            continue
                        _validate_requirements(
                            term.get("matchExpressions"),
                            join_path(tpath, "matchExpressions"),
                            problems,
                        )
                        _validate_requirements(
                            term.get("matchFields"),
                            join_path(tpath, "matchFields"),
                            problems,
                            fields=True,
                        )
    return problems


# -- reduction -------------------------------------------------------------------------------


def _container_requests(c: Mapping[str, Any]) -> dict[str, int]:
    """Requests with the API server's defaulting: a limit without a request is the request."""
    res = c.get("resources") or {}
    out: dict[str, int] = {}
    for name, raw in (res.get("limits") or {}).items():
        out[str(name)] = to_units(str(name), raw)
    for name, raw in (res.get("requests") or {}).items():
        out[str(name)] = to_units(str(name), raw)
    return out


def pod_requirements(pod: Mapping[str, Any]) -> PodRequirements:
    """Reduce a validated pod to what scheduling needs. Effective requests follow
    kube-scheduler: the sum over containers, at least the largest init container, plus
    ``spec.overhead``."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    containers = []
    for c in spec.get("containers") or ():
        reqs = _container_requests(c)
        for name, amount in reqs.items():
            total[name] = total.get(name, 0) + amount
        ext = tuple(sorted((n, a) for n, a in reqs.items() if is_extended(n) and a > 0))
        containers.append((str(c.get("name")), ext))
    for c in spec.get("initContainers") or ():
        if c.get("restartPolicy") == "Always":  # sidecar: runs alongside, adds up
            for name, amount in _container_requests(c).items():
                total[name] = total.get(name, 0) + amount
            continue
        for name, amount in _container_requests(c).items():
            total[name] = max(total.get(name, 0), amount)
    for name, raw in (spec.get("overhead") or {}).items():
        total[str(name)] = total.get(str(name), 0) + to_units(str(name), raw)
    affinity = None
    na = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if req:
        affinity = parse_node_selector(req)
    tolerations = parse_tolerations(spec.get("tolerations"))
    return PodRequirements(
        requests=tuple(sorted((n, a) for n, a in total.items() if a > 0)),
        containers=tuple(containers),
        node_selector=tuple(
            sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items())
        ),
        affinity=affinity,
        tolerations=tolerations,
        node_name=str(spec.get("nodeName") or ""),
    )


# -- matching --------------------------------------------------------------------------------


def node_affinity_matches(req: PodRequirements, labels: Mapping[str, str], node_name: str) -> bool:
    """kube-scheduler's NodeAffinity filter: ``nodeSelector`` AND any required term."""
    if not labels_match(req.node_selector, labels):
        return False
    return req.affinity is None or req.affinity.matches(labels, node_name)
