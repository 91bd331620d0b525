"""Checking Kubernetes manifests and GPU configs before they reach a cluster.

Core Kubernetes kinds are checked against the official OpenAPI schemas through the
``kubernetes-validate`` package when it is installed (strict: unknown fields are errors, as
``kubectl apply --validate=strict`` makes them). The kinds kgpu works with beyond core — the
DRA driver's ComputeDomain, Kubeflow's MPIJob, KEDA's ScaledObject — get structural checks from
their CRDs' required fields and types here, and the pod templates inside them are checked as
Pods. ConfigMaps are also opened: entries holding device-plugin or mig-parted configs are
validated with the same rules the node view applies.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from kgpu.config.fields import (
    dns_subdomain_problem,
    is_dns_subdomain,
    load_yaml_documents,
    read_problem,
)
from kgpu.config.loader import (
    ConfigSet,
    PluginConfigEntry,
    _add_configmap,
    _add_operator_values,
    _Builder,
    classify,
    other_kgpu_input,
)
from kgpu.config.migparted import parse_mig_parted
from kgpu.config.plugin import parse_plugin_config
from kgpu.errors import FieldError, FieldProblem, join_path

Checker = Callable[[dict[str, Any], str], list[tuple[str, str]]]  # -> [(path, message)]


@dataclass
class FileReport:
    """What ``kgpu validate`` says about one file."""

    file: str
    ok: list[str] = field(default_factory=list)  # one line per good document
    problems: list[FieldProblem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # every device-plugin config found, for the checks of later layers (sharing-mode rules)
    plugin_configs: list[PluginConfigEntry] = field(default_factory=list)


def _type_name(value: Any) -> str:
    return {dict: "mapping", list: "list", str: "string", int: "integer", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


def _expect(
    out: list[tuple[str, str]], value: Any, path: str, kind: type | tuple[type, ...], what: str
) -> bool:
    if isinstance(value, bool) and kind is int:
        out.append((path, f"must be {what}, not boolean"))
        return False
    if not isinstance(value, kind):
        out.append((path, f"must be {what}, not {_type_name(value)}"))
        return False
    return True


def _known_keys(out: list[tuple[str, str]], obj: dict[str, Any], path: str, keys: set[str]) -> None:
    for key in obj:
        if key not in keys:
            out.append(
                (join_path(path, str(key)), f"unknown field (allowed: {', '.join(sorted(keys))})")
            )


def _pod_spec_problems(spec: Any, path: str) -> list[tuple[str, str]]:
    """A pod template's spec, checked as a Pod's spec by the official schema when available."""
    if not isinstance(spec, dict):
        return [(path, f"must be a mapping, not {_type_name(spec)}")]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "template"}, "spec": spec}
    problems = _schema_problems(pod)
    if problems is None:
        if not isinstance(spec.get("containers"), list) or not spec["containers"]:
            return [(join_path(path, "containers"), "is required (a non-empty list)")]
        return extended_resource_problems(spec, path)
    out = []
    for p, msg in problems:
        rel = p[len("spec") :].lstrip(".") if p.startswith("spec") else p
        out.append((join_path(path, rel) if rel else path, msg))
    return out or extended_resource_problems(spec, path)


_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|([numkMGTPE]|[KMGTPE]i))?$"
)
_SUFFIX = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
    "P": Decimal(10**15), "E": Decimal(10**18), "Ki": Decimal(2**10), "Mi": Decimal(2**20),
    "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50), "Ei": Decimal(2**60),
}  # fmt: skip


def _quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity's value (``2``, ``"2"``, ``500m``, ``1Gi``); None when invalid."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip())
    if m is None:
        return None
    number, exponent, suffix = m.groups()
    if exponent:
        return Decimal(number + exponent)
    return Decimal(number) * _SUFFIX[suffix or ""]


def _is_extended(name: str) -> bool:
    """Extended resources (``nvidia.com/gpu``): a domain prefix outside kubernetes.io."""
    if "/" not in name:
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def extended_resource_problems(spec: Any, path: str = "spec") -> list[tuple[str, str]]:
    """What the API server refuses in a pod's extended resources (``nvidia.com/gpu``) that the
    OpenAPI schema lets through: a quantity that is not a whole number, a request without a
    limit, a request different from its limit. kubectl reports these only at apply time."""
    out: list[tuple[str, str]] = []
    if not isinstance(spec, dict):
        return out
    for group in ("initContainers", "containers"):
        containers = spec.get(group)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            resources = container.get("resources") if isinstance(container, dict) else None
            if not isinstance(resources, dict):
                continue
            at = join_path(path, group, i, "resources")
            raw_limits, raw_requests = resources.get("limits"), resources.get("requests")
            limits: dict[str, Any] = raw_limits if isinstance(raw_limits, dict) else {}
            requests: dict[str, Any] = raw_requests if isinstance(raw_requests, dict) else {}
            values: dict[tuple[str, str], Decimal] = {}
            for kind, entries in (("limits", limits), ("requests", requests)):
                for name, raw in entries.items():
                    if not _is_extended(str(name)):
                        continue
                    field = f"{at}.{kind}.{name}"
                    qty = _quantity(raw)
                    if qty is None:
                        out.append((field, f"{raw!r} is not a quantity (for example 1 or 2)"))
                    elif qty != qty.to_integral_value() or qty < 0:
                        out.append((field, f"{raw!r}: must be a whole number of devices"))
                    else:
                        values[(kind, str(name))] = qty
            for name in requests:
                if not _is_extended(str(name)):
                    continue
                if name not in limits:
                    out.append(
                        (
                            f"{at}.limits.{name}",
                            f"is required: {name} is requested, and extended resources cannot "
                            "be overcommitted (set limits; requests may then be left out)",
                        )
                    )
                elif (
                    ("requests", name) in values
                    and ("limits", name) in values
                    and values[("requests", name)] != values[("limits", name)]
                ):
                    out.append(
                        (
                            f"{at}.requests.{name}",
                            f"must be equal to the {name} limit of {limits[name]}",
                        )
                    )
    return out


def _pod_specs(doc: dict[str, Any]) -> list[tuple[Any, str]]:
    """The pod specs inside a core workload object, with their paths."""
    kind = doc.get("kind")
    raw_spec = doc.get("spec")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    if kind == "Pod":
        return [(doc.get("spec"), "spec")]
    if kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job",
                "ReplicationController"):  # fmt: skip
        template = spec.get("template")
        return [(template.get("spec"), "spec.template.spec")] if isinstance(template, dict) else []
    if kind == "CronJob":
        job = spec.get("jobTemplate")
        job_spec = job.get("spec") if isinstance(job, dict) else None
        template = job_spec.get("template") if isinstance(job_spec, dict) else None
        if isinstance(template, dict):
            return [(template.get("spec"), "spec.jobTemplate.spec.template.spec")]
    if kind == "PodTemplate":
        template = doc.get("template")
        return [(template.get("spec"), "template.spec")] if isinstance(template, dict) else []
    return []


def _check_compute_domain(doc: dict[str, Any], _: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    spec = doc.get("spec")
    if spec is None:
        return [("spec", "is required")]
    if not _expect(out, spec, "spec", dict, "a mapping"):
        return out
    _known_keys(out, spec, "spec", {"numNodes", "channel"})
    if "numNodes" not in spec:
        out.append(("spec.numNodes", "is required"))
    elif (
        _expect(out, spec["numNodes"], "spec.numNodes", int, "an integer") and spec["numNodes"] < 0
    ):
        out.append(("spec.numNodes", "must be >= 0"))
    channel = spec.get("channel")
    if channel is not None and _expect(out, channel, "spec.channel", dict, "a mapping"):
        _known_keys(out, channel, "spec.channel", {"resourceClaimTemplate", "allocationMode"})
        mode = channel.get("allocationMode")
        if mode is not None and mode not in ("Single", "All"):
            out.append(("spec.channel.allocationMode", "must be Single or All"))
        rct = channel.get("resourceClaimTemplate")
        if rct is None:
            out.append(("spec.channel.resourceClaimTemplate", "is required"))
        elif _expect(out, rct, "spec.channel.resourceClaimTemplate", dict, "a mapping"):
            _known_keys(out, rct, "spec.channel.resourceClaimTemplate", {"name"})
            name = rct.get("name")
            if not isinstance(name, str) or not name:
                out.append(("spec.channel.resourceClaimTemplate.name", "is required (a string)"))
    return out


def _check_mpijob(doc: dict[str, Any], _: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "is required (a mapping)")]
    _known_keys(
        out,
        spec,
        "spec",
        {
            "slotsPerWorker",
            "runLauncherAsWorker",
            "runPolicy",
            "mpiReplicaSpecs",
            "sshAuthMountPath",
            "launcherCreationPolicy",
            "mpiImplementation",
        },
    )
    if "slotsPerWorker" in spec:
        _expect(out, spec["slotsPerWorker"], "spec.slotsPerWorker", int, "an integer")
    policy = spec.get("launcherCreationPolicy")
    if policy is not None and policy not in ("AtStartup", "WaitForWorkersReady"):
        out.append(("spec.launcherCreationPolicy", "must be AtStartup or WaitForWorkersReady"))
    impl = spec.get("mpiImplementation")
    if impl is not None and impl not in ("OpenMPI", "Intel", "MPICH"):
        out.append(("spec.mpiImplementation", "must be OpenMPI, Intel or MPICH"))
    replicas = spec.get("mpiReplicaSpecs")
    if replicas is None:
        out.append(("spec.mpiReplicaSpecs", "is required"))
        return out
    if not _expect(out, replicas, "spec.mpiReplicaSpecs", dict, "a mapping"):
        return out
    for role, rspec in replicas.items():
        path = join_path("spec", "mpiReplicaSpecs", str(role))
        if role not in ("Launcher", "Worker"):
            out.append((path, "unknown replica type (allowed: Launcher, Worker)"))
        if not _expect(out, rspec, path, dict, "a mapping"):
            continue
        _known_keys(out, rspec, path, {"replicas", "template", "restartPolicy"})
        if "replicas" in rspec:
            _expect(out, rspec["replicas"], join_path(path, "replicas"), int, "an integer")
        template = rspec.get("template")
        if not isinstance(template, dict):
            out.append((join_path(path, "template"), "is required (a pod template)"))
            continue
        out.extend(_pod_spec_problems(template.get("spec"), join_path(path, "template", "spec")))
    return out


def _check_scaled_object(doc: dict[str, Any], _: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        return [("spec", "is required (a mapping)")]
    _known_keys(
        out,
        spec,
        "spec",
        {
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
        },
    )
    target = spec.get("scaleTargetRef")
    if not isinstance(target, dict) or not isinstance(target.get("name"), str):
        out.append(("spec.scaleTargetRef.name", "is required (a string)"))
    for key in (
        "pollingInterval",
        "cooldownPeriod",
        "initialCooldownPeriod",
        "idleReplicaCount",
        "minReplicaCount",
        "maxReplicaCount",
    ):
        if key in spec:
            _expect(out, spec[key], f"spec.{key}", int, "an integer")
    triggers = spec.get("triggers")
    if triggers is None:
        out.append(("spec.triggers", "is required"))
    elif _expect(out, triggers, "spec.triggers", list, "a list"):
        for i, trig in enumerate(triggers):
            path = join_path("spec", "triggers", i)
            if not _expect(out, trig, path, dict, "a mapping"):
                continue
            if not isinstance(trig.get("type"), str):
                out.append((join_path(path, "type"), "is required (a string)"))
            meta = trig.get("metadata")
            if not isinstance(meta, dict):
                out.append((join_path(path, "metadata"), "is required (a mapping)"))
            else:
                for k, v in meta.items():
                    if not isinstance(v, str):
                        out.append(
                            (join_path(path, "metadata", str(k)), "must be a string (quote it)")
                        )
    return out


CUSTOM_KINDS: dict[tuple[str, str], Checker] = {
    ("resource.nvidia.com/v1beta1", "ComputeDomain"): _check_compute_domain,
    ("kubeflow.org/v2beta1", "MPIJob"): _check_mpijob,
    ("keda.sh/v1alpha1", "ScaledObject"): _check_scaled_object,
}

# Core kinds checked structurally when kubernetes-validate is not installed.
_FALLBACK_CORE = {
    ("v1", "Pod"),
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("v1", "Namespace"),
    ("v1", "ServiceAccount"),
    ("v1", "Secret"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "DaemonSet"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "ReplicaSet"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
    ("resource.k8s.io/v1", "DeviceClass"),
    ("resource.k8s.io/v1", "ResourceClaim"),
    ("resource.k8s.io/v1", "ResourceClaimTemplate"),
    ("resource.k8s.io/v1", "ResourceSlice"),
    ("resource.k8s.io/v1beta1", "DeviceClass"),
    ("resource.k8s.io/v1beta1", "ResourceClaim"),
    ("resource.k8s.io/v1beta1", "ResourceClaimTemplate"),
    ("resource.k8s.io/v1beta2", "DeviceClass"),
    ("resource.k8s.io/v1beta2", "ResourceClaim"),
    ("resource.k8s.io/v1beta2", "ResourceClaimTemplate"),
}


class _NoSchema(Exception):
    pass


def _schema_problems(doc: dict[str, Any]) -> list[tuple[str, str]] | None:
    """Problems the official schema finds; None when kubernetes-validate is unavailable.
    Raises _NoSchema when it has no schema for this kind."""
    try:
        import kubernetes_validate
    except ImportError:
        return None
    try:
        every = _all_schema_errors(doc)
    except _NoSchema:
        raise
    except Exception:  # the package's internals moved: fall back to its first-error API
        every = None
    if every is not None:
        return every
    try:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        raise _NoSchema() from None
    except kubernetes_validate.ValidationError as exc:
        path = [p for p in exc.path if isinstance(p, str | int)]
        return [(join_path(*path), str(exc.message))]
    except (KeyError, TypeError) as exc:  # malformed documents the schema loader trips on
        return [("", f"cannot be checked against the Kubernetes schema: {exc}")]
    return []


def _all_schema_errors(doc: dict[str, Any]) -> list[tuple[str, str]] | None:
    """Every schema error in ``doc`` (kubernetes-validate reports only the first one)."""
    validator = _schema_validator(str(doc["apiVersion"]), str(doc["kind"]))
    out = []
    for error in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path))):
        path = [p for p in error.path if isinstance(p, str | int)]
        out.append((join_path(*path), str(error.message)))
    return out


@functools.cache
def _schema_validator(api_version: str, kind: str) -> Any:
    """The strict schema of one kind, built once: the shared definitions file is 1.8 MB of
    JSON, too much to parse again for every document (and every pod template) checked."""
    import importlib

    from kubernetes_validate import utils as kv
    from referencing import Registry, Resource

    jsonschema: Any = importlib.import_module("jsonschema")  # no type stubs installed

    version = kv.latest_version()
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"v{version}-local-strict"
    try:
        schema = kv.schema_contents(
            f"kubernetes-json-schema/{folder}/{kind.lower()}-{group}.json", version
        )
    except FileNotFoundError:
        raise _NoSchema() from None
    registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(_schema_definitions(folder, version)) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


@functools.cache
def _schema_definitions(folder: str, version: str) -> Any:
    from kubernetes_validate import utils as kv

    return kv.schema_contents(f"kubernetes-json-schema/{folder}/_definitions.json", version)


def validate_manifest(doc: dict[str, Any], *, file: str, entry: str) -> list[FieldProblem]:
    """Field-level problems in one Kubernetes object (empty when it is valid)."""
    out: list[tuple[str, str]] = []
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if not isinstance(api_version, str) or not api_version:
        out.append(("apiVersion", "is required (a string such as v1 or apps/v1)"))
    if not isinstance(kind, str) or not kind:
        out.append(("kind", "is required (a string such as Pod)"))
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        out.append(("metadata", "is required (a mapping with a name)"))
    elif not (isinstance(meta.get("name"), str) and meta.get("name")) and not meta.get(
        "generateName"
    ):
        out.append(("metadata.name", "is required"))
    if out:
        return [FieldProblem(msg, path, file, entry) for path, msg in out]
    assert isinstance(api_version, str) and isinstance(kind, str)
    checker = CUSTOM_KINDS.get((api_version, kind))
    if checker is not None:
        out.extend(checker(doc, file))
    else:
        # the API server's name rule for its own kinds (custom kinds' checkers have theirs)
        name = doc["metadata"].get("name")
        if isinstance(name, str) and not is_dns_subdomain(name):
            out.append(("metadata.name", dns_subdomain_problem(name)))
        try:
            schema = _schema_problems(doc)
        except _NoSchema:
            schema = [("kind", _unknown_kind(api_version, kind))]
        if schema is None:
            if (api_version, kind) not in _FALLBACK_CORE:
                out.append(("kind", _unknown_kind(api_version, kind)))
            elif kind == "Pod":
                out.extend(_pod_spec_problems(doc.get("spec"), "spec"))
            else:
                for pod_spec, at in _pod_specs(doc):
                    out.extend(extended_resource_problems(pod_spec, at))
        else:
            out.extend(schema)
            if not schema:
                for pod_spec, at in _pod_specs(doc):
                    out.extend(extended_resource_problems(pod_spec, at))
    return [FieldProblem(msg, path, file, entry) for path, msg in out]


def _unknown_kind(api_version: str, kind: str) -> str:
    known = ", ".join(f"{k} {a}" for a, k in CUSTOM_KINDS)
    return f"unknown kind {kind} in {api_version}: kgpu checks Kubernetes' own kinds and {known}"


def _validate_config_doc(
    doc: Any, kind: str, *, file: str, entry: str, report: FileReport, label: str
) -> None:
    try:
        if kind == "plugin-config":
            parsed = parse_plugin_config(doc, file=file, entry=entry)
            report.warnings.extend(parsed.warnings)
            report.plugin_configs.append(PluginConfigEntry(entry, parsed.config, file, entry))
        elif kind == "mig-parted":
            mig = parse_mig_parted(doc, file=file, entry=entry)
            report.warnings.extend(mig.warnings)
        elif kind == "operator-values":
            builder = _Builder()
            _add_operator_values(builder, doc, file=file)
            report.warnings.extend(builder.warnings)
            report.plugin_configs.extend(builder.plugin.values())
        elif kind == "configmap":
            builder = _Builder()
            _add_configmap(builder, doc, file=file, where=entry)
            report.warnings.extend(builder.warnings)
            report.plugin_configs.extend(builder.plugin.values())
    except FieldError as exc:
        report.problems.extend(exc.located(file, entry).problems)
        return
    report.ok.append(label)


_KIND_LABELS = {
    "plugin-config": "device-plugin config",
    "mig-parted": "mig-parted config",
    "operator-values": "GPU Operator Helm values",
    "dra-values": "NVIDIA DRA driver Helm values",
}


def validate_text(text: str, *, file: str) -> FileReport:
    report = FileReport(file)
    try:
        docs = load_yaml_documents(text, file=file)
    except FieldError as exc:
        report.problems.extend(exc.problems)
        return report
    if not docs:
        report.problems.append(FieldProblem("no YAML documents", file=file))
        return report
    for i, doc in enumerate(docs):
        entry = f"document {i}"
        kind = classify(doc)
        if kind in ("manifest", "configmap"):
            problems = validate_manifest(doc, file=file, entry=entry)
            label = f"{entry}: {doc.get('kind')} {_name(doc)}"
            if problems:
                report.problems.extend(problems)
                continue
            if kind == "configmap":
                _validate_config_doc(doc, kind, file=file, entry=entry, report=report, label=label)
            else:
                report.ok.append(label)
        elif kind == "dra-values":
            report.ok.append(f"{entry}: {_KIND_LABELS[kind]}")
        elif kind == "unknown":
            hint = other_kgpu_input(doc)
            report.problems.append(
                FieldProblem(
                    "not a Kubernetes manifest (apiVersion/kind), device-plugin config, "
                    "mig-parted config or GPU Operator Helm values" + (f"; {hint}" if hint else ""),
                    file=file,
                    entry=entry,
                )
            )
        else:
            _validate_config_doc(
                doc,
                kind,
                file=file,
                entry=entry,
                report=report,
                label=f"{entry}: {_KIND_LABELS[kind]}",
            )
    return report


def _name(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name") or meta.get("generateName") or "?"
    return f"{ns}/{name}" if ns else str(name)


def validate_file(path: str | Path) -> FileReport:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        report = FileReport(str(path))
        report.problems.append(FieldProblem(read_problem(exc, path), file=str(path)))
        return report
    return validate_text(text, file=str(path))


def schema_validation_available() -> bool:
    try:
        import kubernetes_validate  # noqa: F401
    except ImportError:
        return False
    return True


__all__ = [
    "CUSTOM_KINDS",
    "ConfigSet",
    "FileReport",
    "schema_validation_available",
    "validate_file",
    "validate_manifest",
    "validate_text",
]
