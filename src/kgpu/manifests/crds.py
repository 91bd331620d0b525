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
TRIGGER_KEYS = ("type", "name", "metadata", "metricType", "useCachedMetrics", "authenticationRef")


def compute_domain(obj: Mapping[str, Any]) -> Problems:
    try:
        parse_compute_domain(obj)
    except FieldError as exc:
        return [FieldProblem(p.message, p.path) for p in exc.problems]
    return []


def _parser_problems(parse: Any, obj: Mapping[str, Any], out: Problems) -> None:
    """What ``parse`` (the controller's own parser) refuses, at fields not already reported."""
    try:
        parse(obj)
    except FieldError as exc:
        spoken = {p.path for p in out}
        out.extend(FieldProblem(p.message, p.path) for p in exc.problems if p.path not in spoken)


def scaled_object(obj: Mapping[str, Any]) -> Problems:
    """KEDA's CRD schema (field names: an unknown one is an error, as with ``kubectl apply
    --validate=strict``; the name a DNS subdomain), then everything KEDA's webhook and scalers
    check, by the parser the simulated KEDA runs."""
    out: Problems = []
    name = (obj.get("metadata") or {}).get("name")
    if isinstance(name, str) and name and not is_dns_subdomain(name):
        out.append(FieldProblem(dns_subdomain_problem(name), "metadata.name"))
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return [*out, FieldProblem("is required (a map)", "spec")]
    _unknown(spec, SCALED_OBJECT_KEYS, "spec", out)
    triggers = spec.get("triggers")
    for i, trigger in enumerate(triggers if isinstance(triggers, list) else ()):
        if isinstance(trigger, Mapping):
            _unknown(trigger, TRIGGER_KEYS, join_path("spec", "triggers", i), out)
    _parser_problems(parse_scaled_object, obj, out)
    return out


def _unknown(raw: Mapping[str, Any], allowed: tuple[str, ...], path: str, out: Problems) -> None:
    for key in raw:
        if key not in allowed:
            names = ", ".join(sorted(allowed))
            out.append(FieldProblem(f"unknown field (allowed: {names})", join_path(path, key)))


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
