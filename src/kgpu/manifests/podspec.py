"""A pod spec as the API server validates it, beyond what the OpenAPI schema says.

The schema knows field names and types; the API server's validation (``pkg/apis/core/
validation``) also refuses what would break scheduling or the kubelet: no containers, two
containers of one name, an extended resource (``nvidia.com/gpu``) that is not a whole number or
whose request differs from its limit, a request above its limit, an operator or a taint effect
that does not exist, a selector requirement with values where it takes none, a container that
names a claim the pod does not have. These rules run whether or not the schema is installed,
so they are written for any input, not only well-typed input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal
from typing import Any

from kgpu.errors import FieldProblem, join_path
from kgpu.node.label_syntax import label_key_problem, label_value_problem
from kgpu.node.selectors import (
    FIELD_OPERATORS,
    LABEL_SELECTOR_OPERATORS,
    NAME_FIELD,
    SELECTOR_OPERATORS,
    TAINT_EFFECTS,
    TOLERATION_OPERATORS,
)
from kgpu.quantity import QuantityError, parse_quantity

NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")
RESTART_POLICIES = ("Always", "OnFailure", "Never")
IMAGE_PULL_POLICIES = ("Always", "Never", "IfNotPresent")
DNS_POLICIES = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")
PROTOCOLS = ("TCP", "UDP", "SCTP")
UNSATISFIABLE_ACTIONS = ("DoNotSchedule", "ScheduleAnyway")
INCLUSION_POLICIES = ("Honor", "Ignore")

Problems = list[FieldProblem]


def is_extended_resource(name: str) -> bool:
    """Extended resources are domain-qualified names outside ``kubernetes.io`` (hugepages and
    the other native resources are not): the API server requires them to be integers with
    requests equal to limits, since they cannot be overcommitted."""
    if name in NATIVE_RESOURCES or name.startswith("hugepages-") or "/" not in name:
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def enum_problem(value: object, allowed: tuple[str, ...], path: str, out: Problems) -> None:
    """``value`` (when set) must be one of ``allowed``."""
    if value is not None and value not in allowed:
        out.append(FieldProblem(f"{value!r}: allowed: {', '.join(allowed)}", path))


def string_map_problem(value: object, path: str, out: Problems) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        out.append(FieldProblem("must be a map of strings", path))


def label_map_problems(value: object, path: str, out: Problems) -> None:
    """Labels (a selector's or an object's): strings, valid keys and values."""
    if value is None:
        return
    if not isinstance(value, Mapping):
        out.append(FieldProblem("must be a map of strings", path))
        return
    for k, v in value.items():
        if not isinstance(v, str):
            out.append(FieldProblem(f"{v!r}: a label value must be a string", join_path(path, k)))
            continue
        problem = label_key_problem(k) or label_value_problem(str(k), v)
        if problem:
            out.append(FieldProblem(problem, path))


def _quantities(values: object, path: str, out: Problems) -> dict[str, Decimal]:
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        out.append(FieldProblem("must be a map of quantities", path))
        return {}
    parsed: dict[str, Decimal] = {}
    for name, raw in values.items():
        where = join_path(path, str(name))
        try:
            amount = parse_quantity(raw)
        except QuantityError as exc:
            out.append(FieldProblem(str(exc), where))
            continue
        if amount < 0:
            out.append(FieldProblem(f"{raw!r} must not be negative", where))
        elif is_extended_resource(str(name)) and amount != amount.to_integral_value():
            out.append(FieldProblem(f"{raw!r}: must be a whole number of devices", where))
        else:
            parsed[str(name)] = amount
    return parsed


def resources_problems(resources: object, path: str, out: Problems) -> None:
    """One container's ``resources``: quantities, extended resources never overcommitted,
    requests within limits."""
    if resources is None:
        return
    if not isinstance(resources, Mapping):
        out.append(FieldProblem("must be a map with requests/limits", path))
        return
    raw_limits = resources.get("limits")
    limits = _quantities(raw_limits, join_path(path, "limits"), out)
    requests = _quantities(resources.get("requests"), join_path(path, "requests"), out)
    for name, amount in requests.items():
        if is_extended_resource(name):
            if not isinstance(raw_limits, Mapping) or name not in raw_limits:
                out.append(
                    FieldProblem(
                        f"is required: {name} is requested, and extended resources cannot be "
                        "overcommitted (set limits; requests may then be left out)",
                        join_path(path, "limits", name),
                    )
                )
            elif name in limits and limits[name] != amount:
                out.append(
                    FieldProblem(
                        f"must be equal to the {name} limit of {raw_limits[name]}",
                        join_path(path, "requests", name),
                    )
                )
        elif name in limits and amount > limits[name]:
            assert isinstance(raw_limits, Mapping)
            out.append(
                FieldProblem(
                    f"must be less than or equal to the {name} limit of {raw_limits[name]}",
                    join_path(path, "requests", name),
                )
            )


def _maps(
    items: object, path: str, out: Problems, what: str = "must be a map"
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Each entry of a list of maps with its path; no list is nothing, a value that is not a
    list and an entry that is not a map are problems (``what`` says what the entry must be)."""
    if items is None:
        return
    if not isinstance(items, list):
        out.append(FieldProblem("must be a list", path))
        return
    for i, item in enumerate(items):
        where = join_path(path, i)
        if not isinstance(item, Mapping):
            out.append(FieldProblem(what, where))
            continue
        yield where, item


def _operator_values(
    op: object, allowed: tuple[str, ...], values: object, where: str, out: Problems
) -> list[str] | None:
    """The ``values`` of a selector expression with operator ``op`` (from ``allowed``); None,
    with the problem in ``out``, when the operator or the values' type is wrong."""
    if op not in allowed:
        out.append(
            FieldProblem(
                f"{op!r}: not a valid selector operator; allowed: {', '.join(allowed)}",
                join_path(where, "operator"),
            )
        )
        return None
    at = join_path(where, "values")
    if values is not None and (
        not isinstance(values, list) or not all(isinstance(v, str) for v in values)
    ):
        out.append(FieldProblem("must be a list of strings", at))
        return None
    vals: list[str] = values or []
    if op in ("In", "NotIn") and not vals:
        out.append(FieldProblem(f"must be specified when `operator` is '{op}'", at))
    elif op in ("Exists", "DoesNotExist") and vals:
        out.append(FieldProblem(f"may not be specified when `operator` is '{op}'", at))
    return vals


def requirement_problems(exprs: object, path: str, out: Problems, fields: bool = False) -> None:
    """``matchExpressions`` (node labels) or ``matchFields`` (only ``metadata.name``)."""
    allowed = FIELD_OPERATORS if fields else SELECTOR_OPERATORS
    for where, expr in _maps(exprs, path, out, "must be a map with key, operator, values"):
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values")
        if not isinstance(key, str) or not key:
            out.append(FieldProblem("is required", join_path(where, "key")))
        elif fields and key != NAME_FIELD:
            out.append(
                FieldProblem(
                    f"{key!r}: not a supported field selector; allowed: {NAME_FIELD}",
                    join_path(where, "key"),
                )
            )
        vals = _operator_values(op, allowed, values, where, out)
        if vals is None:
            continue
        at = join_path(where, "values")
        if op in ("Gt", "Lt"):
            if len(vals) != 1:
                single = "must be specified single value when `operator` is 'Lt' or 'Gt'"
                out.append(FieldProblem(single, at))
            else:
                try:
                    int(vals[0])
                except ValueError:
                    out.append(FieldProblem(f"{vals[0]!r}: must be an integer", join_path(at, 0)))


def node_selector_term_problems(term: object, path: str, out: Problems) -> None:
    if not isinstance(term, Mapping):
        out.append(FieldProblem("must be a map", path))
        return
    requirement_problems(term.get("matchExpressions"), join_path(path, "matchExpressions"), out)
    requirement_problems(term.get("matchFields"), join_path(path, "matchFields"), out, True)


def label_selector_problems(selector: object, path: str, out: Problems) -> None:
    """A metav1.LabelSelector as the API server checks it: valid label keys and values, an
    operator it knows, values for In/NotIn and none for Exists/DoesNotExist."""
    if selector is None:
        return
    if not isinstance(selector, Mapping):
        out.append(FieldProblem("must be a map with matchLabels and/or matchExpressions", path))
        return
    label_map_problems(selector.get("matchLabels"), join_path(path, "matchLabels"), out)
    exprs = selector.get("matchExpressions")
    epath = join_path(path, "matchExpressions")
    for where, expr in _maps(exprs, epath, out, "must be a map with key, operator, values"):
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values")
        problem = label_key_problem(key)
        if problem:
            out.append(FieldProblem(problem, join_path(where, "key")))
        vals = _operator_values(op, LABEL_SELECTOR_OPERATORS, values, where, out)
        for j, v in enumerate(vals or ()):
            problem = label_value_problem(str(key), v)
            if problem:
                out.append(FieldProblem(problem, join_path(where, "values", j)))


def _pod_affinity_term_problems(term: object, path: str, out: Problems) -> None:
    if not isinstance(term, Mapping):
        out.append(FieldProblem("must be a map with labelSelector and topologyKey", path))
        return
    label_selector_problems(term.get("labelSelector"), join_path(path, "labelSelector"), out)
    label_selector_problems(
        term.get("namespaceSelector"), join_path(path, "namespaceSelector"), out
    )
    names = term.get("namespaces")
    if names is not None and (
        not isinstance(names, list) or not all(isinstance(n, str) for n in names)
    ):
        out.append(FieldProblem("must be a list of namespace names", join_path(path, "namespaces")))
    key = term.get("topologyKey")
    if not key:
        out.append(
            FieldProblem(
                "is required: the node label whose value groups nodes (kubernetes.io/hostname, "
                "topology.kubernetes.io/zone, ...)",
                join_path(path, "topologyKey"),
            )
        )
    elif label_key_problem(key):
        out.append(FieldProblem(str(label_key_problem(key)), join_path(path, "topologyKey")))


def _pod_affinity_problems(affinity: Mapping[str, Any], path: str, out: Problems) -> None:
    for kind in ("podAffinity", "podAntiAffinity"):
        block = affinity.get(kind)
        if block is None:
            continue
        base = join_path(path, kind)
        if not isinstance(block, Mapping):
            out.append(FieldProblem("must be a map", base))
            continue
        required = block.get("requiredDuringSchedulingIgnoredDuringExecution")
        rpath = join_path(base, "requiredDuringSchedulingIgnoredDuringExecution")
        if required is not None and not isinstance(required, list):
            out.append(FieldProblem("must be a list of pod affinity terms", rpath))
        for i, term in enumerate(required if isinstance(required, list) else []):
            _pod_affinity_term_problems(term, join_path(rpath, i), out)
        _weighted_problems(block, base, "podAffinityTerm", _pod_affinity_term_problems, out)


def _weighted_problems(
    block: Mapping[str, Any],
    base: str,
    term_key: str,
    term_problems: Callable[[object, str, Problems], None],
    out: Problems,
) -> None:
    """``preferredDuringSchedulingIgnoredDuringExecution`` of a node or pod (anti-)affinity:
    each entry a weight from 1 to 100 and a term under ``term_key``."""
    preferred = block.get("preferredDuringSchedulingIgnoredDuringExecution")
    ppath = join_path(base, "preferredDuringSchedulingIgnoredDuringExecution")
    for i, item in enumerate(preferred if isinstance(preferred, list) else []):
        if not isinstance(item, Mapping):
            out.append(FieldProblem(f"must be a map with weight and {term_key}", ppath))
            continue
        weight = item.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            out.append(
                FieldProblem(
                    f"{weight!r}: must be in the range 1-100", join_path(ppath, i, "weight")
                )
            )
        term_problems(item.get(term_key), join_path(ppath, i, term_key), out)


def _spread_problems(constraints: object, path: str, out: Problems) -> None:
    """``topologySpreadConstraints`` as the API server checks them."""
    for where, c in _maps(constraints, path, out):
        skew = c.get("maxSkew")
        if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
            out.append(
                FieldProblem(f"{skew!r}: must be greater than zero", join_path(where, "maxSkew"))
            )
        key = c.get("topologyKey")
        if not key:
            out.append(FieldProblem("is required", join_path(where, "topologyKey")))
        elif label_key_problem(key):
            out.append(FieldProblem(str(label_key_problem(key)), join_path(where, "topologyKey")))
        action = c.get("whenUnsatisfiable")
        if action not in UNSATISFIABLE_ACTIONS:
            out.append(
                FieldProblem(
                    f"{action!r}: allowed: {', '.join(UNSATISFIABLE_ACTIONS)}",
                    join_path(where, "whenUnsatisfiable"),
                )
            )
        minimum = c.get("minDomains")
        if minimum is not None:
            if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 1:
                out.append(
                    FieldProblem(
                        f"{minimum!r}: must be greater than zero", join_path(where, "minDomains")
                    )
                )
            elif action != "DoNotSchedule":
                out.append(
                    FieldProblem(
                        "can only use minDomains when whenUnsatisfiable is DoNotSchedule",
                        join_path(where, "minDomains"),
                    )
                )
        for policy in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            enum_problem(c.get(policy), INCLUSION_POLICIES, join_path(where, policy), out)
        label_selector_problems(c.get("labelSelector"), join_path(where, "labelSelector"), out)


def _affinity_problems(affinity: object, path: str, out: Problems) -> None:
    if affinity is None:
        return
    if not isinstance(affinity, Mapping):
        out.append(FieldProblem("must be a map", path))
        return
    _pod_affinity_problems(affinity, path, out)
    na = affinity.get("nodeAffinity")
    if not isinstance(na, Mapping):
        return
    base = join_path(path, "nodeAffinity")
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    rpath = join_path(base, "requiredDuringSchedulingIgnoredDuringExecution")
    if req is not None:
        terms = req.get("nodeSelectorTerms") if isinstance(req, Mapping) else None
        if not isinstance(terms, list) or not terms:
            out.append(
                FieldProblem(
                    "must have at least one node selector term",
                    join_path(rpath, "nodeSelectorTerms"),
                )
            )
        else:
            for i, term in enumerate(terms):
                node_selector_term_problems(term, join_path(rpath, "nodeSelectorTerms", i), out)
    _weighted_problems(na, base, "preference", node_selector_term_problems, out)


def _toleration_problems(tolerations: object, path: str, out: Problems) -> None:
    for where, tol in _maps(tolerations, path, out):
        op = tol.get("operator", "Equal")
        if op not in TOLERATION_OPERATORS:
            allowed = ", ".join(TOLERATION_OPERATORS)
            out.append(FieldProblem(f"{op!r}: allowed: {allowed}", join_path(where, "operator")))
        elif op == "Exists" and tol.get("value"):
            out.append(
                FieldProblem("must be empty when `operator` is 'Exists'", join_path(where, "value"))
            )
        elif not tol.get("key") and op != "Exists":
            out.append(
                FieldProblem(
                    "operator must be Exists when `key` is empty, which means "
                    '"match all values and all keys"',
                    join_path(where, "operator"),
                )
            )
        effect = tol.get("effect")
        if effect not in (None, "", *TAINT_EFFECTS):
            out.append(
                FieldProblem(
                    f"{effect!r}: allowed: {', '.join(TAINT_EFFECTS)}", join_path(where, "effect")
                )
            )


def _claim_names(spec: Mapping[str, Any], path: str, out: Problems) -> set[str]:
    """The pod's ``resourceClaims``: unique names, each naming a claim or a template."""
    claims = spec.get("resourceClaims")
    names: set[str] = set()
    if not isinstance(claims, list):
        return names
    for i, entry in enumerate(claims):
        where = join_path(path, "resourceClaims", i)
        if not isinstance(entry, Mapping):
            out.append(FieldProblem("must be a map with name and a claim or template", where))
            continue
        name = entry.get("name")
        if isinstance(name, str) and name in names:
            out.append(FieldProblem(f"Duplicate value: {name!r}", join_path(where, "name")))
        elif isinstance(name, str):
            names.add(name)
        sources = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if entry.get(k)]
        if len(sources) != 1:
            out.append(
                FieldProblem(
                    "must specify exactly one of resourceClaimName, resourceClaimTemplateName",
                    where,
                )
            )
    return names


def _container_problems(
    c: Mapping[str, Any], where: str, claims: set[str], init: bool, out: Problems
) -> None:
    resources = c.get("resources")
    resources_problems(resources, join_path(where, "resources"), out)
    enum_problem(
        c.get("imagePullPolicy"), IMAGE_PULL_POLICIES, join_path(where, "imagePullPolicy"), out
    )
    if init:  # a sidecar: the only restartPolicy an init container may have
        enum_problem(c.get("restartPolicy"), ("Always",), join_path(where, "restartPolicy"), out)
    ports = c.get("ports")
    for j, port in enumerate(ports if isinstance(ports, list) else []):
        if isinstance(port, Mapping):
            enum_problem(
                port.get("protocol"), PROTOCOLS, join_path(where, "ports", j, "protocol"), out
            )
    used = resources.get("claims") if isinstance(resources, Mapping) else None
    for j, use in enumerate(used if isinstance(used, list) else []):
        name = use.get("name") if isinstance(use, Mapping) else None
        if isinstance(name, str) and name not in claims:
            out.append(
                FieldProblem(
                    f"{name!r}: must be the name of one of the pod's resourceClaims"
                    + (f" ({', '.join(sorted(claims))})" if claims else " (it has none)"),
                    join_path(where, "resources", "claims", j, "name"),
                )
            )


def validate_pod_spec(spec: object, path: str) -> Problems:
    """Problems with a pod spec (``path``: where it sits in its manifest)."""
    out: Problems = []
    if not isinstance(spec, Mapping):
        return [FieldProblem("must be a map (the pod spec)", path)]
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        out.append(FieldProblem("must list at least one container", join_path(path, "containers")))
    claims = _claim_names(spec, path, out)
    seen: set[str] = set()  # names are unique across init and app containers
    for part in ("initContainers", "containers"):
        items = spec.get(part) or []
        if not isinstance(items, list):
            out.append(FieldProblem("must be a list", join_path(path, part)))
            continue
        for i, c in enumerate(items):
            where = join_path(path, part, i)
            if not isinstance(c, Mapping):
                out.append(FieldProblem("must be a map (a container)", where))
                continue
            name = c.get("name")
            if not isinstance(name, str) or not name:
                out.append(FieldProblem("is required", join_path(where, "name")))
            elif name in seen:
                out.append(FieldProblem(f"Duplicate value: {name!r}", join_path(where, "name")))
            else:
                seen.add(name)
            _container_problems(c, where, claims, part == "initContainers", out)
    string_map_problem(spec.get("nodeSelector"), join_path(path, "nodeSelector"), out)
    if spec.get("nodeName") is not None and not isinstance(spec.get("nodeName"), str):
        out.append(FieldProblem("must be a string", join_path(path, "nodeName")))
    enum_problem(spec.get("restartPolicy"), RESTART_POLICIES, join_path(path, "restartPolicy"), out)
    enum_problem(spec.get("dnsPolicy"), DNS_POLICIES, join_path(path, "dnsPolicy"), out)
    enum_problem(
        spec.get("preemptionPolicy"), PREEMPTION_POLICIES, join_path(path, "preemptionPolicy"), out
    )
    _toleration_problems(spec.get("tolerations"), join_path(path, "tolerations"), out)
    _affinity_problems(spec.get("affinity"), join_path(path, "affinity"), out)
    _spread_problems(
        spec.get("topologySpreadConstraints"), join_path(path, "topologySpreadConstraints"), out
    )
    return out


def validate_pod_template(
    template: object,
    path: str,
    out: Problems,
    owner: str = "",
    restart_policies: tuple[str, ...] = RESTART_POLICIES,
) -> Mapping[str, Any]:
    """A pod template (``metadata`` with labels, ``spec``) inside ``owner``'s spec (a
    Deployment, a Job...); returns the template (empty when missing). ``restart_policies``: what
    the owner allows its pods (a Deployment's restart Always, a Job's Never or OnFailure)."""
    if not isinstance(template, Mapping):
        out.append(FieldProblem("is required (a pod template)", path))
        return {}
    meta = template.get("metadata")
    if meta is not None and not isinstance(meta, Mapping):
        out.append(FieldProblem("must be a map", join_path(path, "metadata")))
    elif isinstance(meta, Mapping):
        label_map_problems(meta.get("labels"), join_path(path, "metadata", "labels"), out)
        string_map_problem(meta.get("annotations"), join_path(path, "metadata", "annotations"), out)
    spec = template.get("spec")
    out.extend(validate_pod_spec(spec, join_path(path, "spec")))
    if isinstance(spec, Mapping) and restart_policies != RESTART_POLICIES:
        policy = spec.get("restartPolicy")
        if (policy is None and "Always" not in restart_policies) or (
            policy in RESTART_POLICIES and policy not in restart_policies
        ):
            out.append(
                FieldProblem(
                    f"{policy!r}: {owner} pods need restartPolicy " + " or ".join(restart_policies),
                    join_path(path, "spec", "restartPolicy"),
                )
            )
    return template


__all__ = [
    "NATIVE_RESOURCES",
    "RESTART_POLICIES",
    "enum_problem",
    "is_extended_resource",
    "label_map_problems",
    "node_selector_term_problems",
    "requirement_problems",
    "resources_problems",
    "string_map_problem",
    "validate_pod_spec",
    "validate_pod_template",
]
