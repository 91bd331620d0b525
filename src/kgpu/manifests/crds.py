"""Custom kinds kgpu works with and checks itself (their CRDs are not in Kubernetes' schemas):
the DRA driver's ComputeDomain, Kubeflow's MPIJob and KEDA's ScaledObject.

A ComputeDomain is checked by the parser its controller runs
(:func:`kgpu.computedomain.api.parse_compute_domain`): a domain that validates is one that
reconciles. An MPIJob is checked with the other pod-making kinds
(:func:`kgpu.manifests.workloads.mpi_job`). A ScaledObject is checked against KEDA's CRD
(fields, types, trigger metadata as strings), then by the parser the simulated KEDA runs
(:func:`kgpu.autoscaling.keda.parse_scaled_object`: KEDA's webhook rules, each trigger's
parameters, the PromQL query parsed, a part kgpu does not evaluate named), so a ScaledObject
that validates is one the simulator can run. An ``autoscaling/v2`` HorizontalPodAutoscaler
gets the API server's rules from :func:`kgpu.autoscaling.hpa_spec.parse_hpa` (:func:`hpa`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kgpu.autoscaling.hpa_spec import parse_hpa
from kgpu.autoscaling.keda import parse_scaled_object
from kgpu.computedomain.api import API_VERSION as CD_API
from kgpu.computedomain.api import KIND as CD_KIND
from kgpu.computedomain.api import parse_compute_domain
from kgpu.config.fields import dns_subdomain_problem, is_dns_subdomain
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.manifests.podspec import Problems
from kgpu.manifests.workloads import Checker, mpi_job

SCALED_OBJECT_KEYS = (
    "scaleTargetRef",
    "pollingInterval",
    "cooldownPeriod",
    "initialCooldownPeriod",
    "idleReplicaCount",
    "minReplicaCount",
    "maxReplicaCount",
    "advanced",
    "triggers",
    "fallback",
)


def compute_domain(obj: Mapping[str, Any]) -> Problems:
    try:
        parse_compute_domain(obj)
    except FieldError as exc:
        return [FieldProblem(p.message, p.path) for p in exc.problems]
    return []


def _integer(value: Any, path: str, out: Problems) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        out.append(FieldProblem(f"{value!r}: must be an integer", path))


def _parser_problems(parse: Any, obj: Mapping[str, Any], out: Problems) -> None:
    """What ``parse`` (the controller's own parser) refuses, at fields not already reported."""
    try:
        parse(obj)
    except FieldError as exc:
        spoken = {p.path for p in out}
        out.extend(FieldProblem(p.message, p.path) for p in exc.problems if p.path not in spoken)


def scaled_object(obj: Mapping[str, Any]) -> Problems:
    out: Problems = []
    name = (obj.get("metadata") or {}).get("name")
    if isinstance(name, str) and name and not is_dns_subdomain(name):
        out.append(FieldProblem(dns_subdomain_problem(name), "metadata.name"))
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [*out, FieldProblem("is required (a map)", "spec")]
    for key in spec:
        if key not in SCALED_OBJECT_KEYS:
            allowed = ", ".join(sorted(SCALED_OBJECT_KEYS))
            out.append(FieldProblem(f"unknown field (allowed: {allowed})", f"spec.{key}"))
    target = spec.get("scaleTargetRef")
    if not isinstance(target, Mapping) or not isinstance(target.get("name"), str):
        out.append(FieldProblem("is required (a string)", "spec.scaleTargetRef.name"))
    for key in SCALED_OBJECT_KEYS[1:7]:
        if key in spec:
            _integer(spec[key], f"spec.{key}", out)
    triggers = spec.get("triggers")
    if triggers is None:
        out.append(FieldProblem("is required", "spec.triggers"))
    elif not isinstance(triggers, list):
        out.append(FieldProblem("must be a list", "spec.triggers"))
    else:
        for i, trig in enumerate(triggers):
            path = join_path("spec", "triggers", i)
            if not isinstance(trig, Mapping):
                out.append(FieldProblem("must be a map", path))
                continue
            if not isinstance(trig.get("type"), str):
                out.append(FieldProblem("is required (a string)", join_path(path, "type")))
            meta = trig.get("metadata")
            if not isinstance(meta, Mapping):
                out.append(FieldProblem("is required (a map)", join_path(path, "metadata")))
                continue
            for k, v in meta.items():
                if not isinstance(v, str):
                    out.append(
                        FieldProblem(
                            "must be a string (quote it)", join_path(path, "metadata", str(k))
                        )
                    )
    _parser_problems(parse_scaled_object, obj, out)
    return out


def hpa(obj: Mapping[str, Any]) -> Problems:
    """An ``autoscaling/v2`` HPA's rules beyond the schema (the API server's validation:
    replica bounds, metric sources and targets, behavior limits)."""
    out: Problems = []
    _parser_problems(parse_hpa, obj, out)
    return out


#: (apiVersion, kind) -> its checker; these kinds are validated by it alone.
CUSTOM_KINDS: dict[tuple[str, str], Checker] = {
    (CD_API, CD_KIND): compute_domain,
    ("kubeflow.org/v2beta1", "MPIJob"): mpi_job,
    ("keda.sh/v1alpha1", "ScaledObject"): scaled_object,
}

__all__ = ["CUSTOM_KINDS", "compute_domain", "hpa", "scaled_object"]
