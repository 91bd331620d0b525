"""What the API server and NVIDIA's admission webhook refuse in DRA objects, checked offline.

The OpenAPI schema accepts any string as a CEL selector and any object as opaque driver
parameters. The API server compiles every selector when a DeviceClass, ResourceClaim or
ResourceClaimTemplate is created, and the GPU driver's webhook decodes the ``gpu.nvidia.com``
parameters (GpuConfig, MigDeviceConfig) strictly; a mistake in either would otherwise surface
only when the scheduler or the kubelet meets the claim. ``kgpu allocate`` and ``kgpu validate``
run these checks before anything else sees the object.
"""

from __future__ import annotations

import re
from typing import Any

from kgpu.config.fields import is_dns_subdomain
from kgpu.dra.cel import CelCompileError, compile_selector, parse_semver
from kgpu.dra.classes import GPU_DRIVER
from kgpu.dra.opaque import parse_config
from kgpu.errors import FieldError, FieldProblem, join_path, shown
from kgpu.quantity import QuantityError, parse_quantity

#: The API server's limits on a ResourceSlice (k8s.io/api/resource: ResourceSliceMaxDevices,
#: ResourceSliceMaxAttributesAndCapacitiesPerDevice, DeviceAttributeMaxValueLength).
MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUE_LENGTH = 64
_ATTRIBUTE_TYPES = ("bool", "int", "string", "version")


def selector_problems(selectors: Any, path: str) -> list[FieldProblem]:
    """Every ``cel.expression`` under ``selectors`` that does not compile (shapes that are not
    a list of ``{cel: {expression: str}}`` are left to the schema)."""
    out: list[FieldProblem] = []
    if not isinstance(selectors, list):
        return out
    for i, sel in enumerate(selectors):
        cel = sel.get("cel") if isinstance(sel, dict) else None
        expression = cel.get("expression") if isinstance(cel, dict) else None
        if not isinstance(expression, str):
            continue
        try:
            compile_selector(expression)
        except CelCompileError as exc:
            out.append(
                FieldProblem(
                    f"CEL does not compile: {exc}", join_path(path, i, "cel", "expression")
                )
            )
    return out


def opaque_problems(opaque: Any, path: str) -> list[FieldProblem]:
    """Problems in the ``gpu.nvidia.com`` parameters of one ``opaque`` config entry (other
    drivers' parameters are theirs to judge)."""
    if not isinstance(opaque, dict) or opaque.get("driver") != GPU_DRIVER:
        return []
    try:
        parse_config(opaque.get("parameters"), join_path(path, "parameters"))
    except FieldError as exc:
        return list(exc.problems)
    return []


def _configs(configs: Any, path: str) -> list[FieldProblem]:
    out: list[FieldProblem] = []
    if isinstance(configs, list):
        for i, item in enumerate(configs):
            if isinstance(item, dict):
                out += opaque_problems(item.get("opaque"), join_path(path, i, "opaque"))
    return out


def claim_spec_problems(spec: Any, path: str) -> list[FieldProblem]:
    """CEL and GPU parameters in a ResourceClaim spec (``spec`` of a claim, ``spec.spec`` of a
    template)."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict):
        return []
    out: list[FieldProblem] = []
    requests = devices.get("requests")
    for j, req in enumerate(requests if isinstance(requests, list) else []):
        if not isinstance(req, dict):
            continue
        at = join_path(path, "devices", "requests", j)
        exactly = req.get("exactly")
        if isinstance(exactly, dict):
            out += selector_problems(
                exactly.get("selectors"), join_path(at, "exactly", "selectors")
            )
        elif "selectors" in req:  # the v1beta1 shape
            out += selector_problems(req.get("selectors"), join_path(at, "selectors"))
        subs = req.get("firstAvailable")
        for k, sub in enumerate(subs if isinstance(subs, list) else []):
            if isinstance(sub, dict):
                out += selector_problems(
                    sub.get("selectors"), join_path(at, "firstAvailable", k, "selectors")
                )
    out += _configs(devices.get("config"), join_path(path, "devices", "config"))
    return out


def slice_problems(spec: Any, path: str) -> list[FieldProblem]:
    """What the API server's validation refuses in a ResourceSlice's devices and the schema
    lets through: more than 128 devices, more than 32 attributes and capacities on one
    device, an attribute without exactly one value, a string or version over 64 characters, a
    version that is not semver 2.0, a capacity that is not a quantity. The allocator's CEL,
    semver and quantity helpers meet only what passes (shapes the schema refuses are left
    to it)."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, list):
        return []
    out: list[FieldProblem] = []
    if len(devices) > MAX_DEVICES_PER_SLICE:
        out.append(
            FieldProblem(
                f"{len(devices)} devices: must have at most {MAX_DEVICES_PER_SLICE} items",
                join_path(path, "devices"),
            )
        )
    for i, device in enumerate(devices):
        if not isinstance(device, dict):
            continue
        at = join_path(path, "devices", i)
        attributes, capacity = device.get("attributes"), device.get("capacity")
        attributes = attributes if isinstance(attributes, dict) else {}
        capacity = capacity if isinstance(capacity, dict) else {}
        if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
            out.append(
                FieldProblem(
                    f"{len(attributes) + len(capacity)}: the total number of attributes and "
                    f"capacities must not exceed {MAX_ATTRIBUTES_AND_CAPACITIES}",
                    at,
                )
            )
        for field, entries in (("attributes", attributes), ("capacity", capacity)):
            for name in entries:
                problem = _qualified_name_problem(name)
                if problem:
                    out.append(FieldProblem(problem, join_path(at, field, str(name))))
        for name, value in attributes.items():
            out += _attribute_problems(value, join_path(at, "attributes", str(name)))
        for name, value in capacity.items():
            where = join_path(at, "capacity", str(name), "value")
            raw = value.get("value") if isinstance(value, dict) else None
            if raw is None:
                out.append(FieldProblem("Required value", where))
                continue
            try:
                parse_quantity(raw)
            except QuantityError as exc:
                out.append(FieldProblem(str(exc), where))
    return out


_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _qualified_name_problem(name: object) -> str:
    """The API server's rule for attribute and capacity names: a C identifier of at most 32
    characters, optionally after a DNS-subdomain domain of at most 63 and a slash."""
    if not isinstance(name, str):
        return f"{shown(name)}: a name must be a string (a C identifier, optionally domain/)"
    domain, sep, ident = name.partition("/")
    if sep and not (len(domain) <= 63 and is_dns_subdomain(domain)):
        return f"{shown(domain)}: the domain must be a DNS subdomain of at most 63 characters"
    ident = ident.split("/", 1)[0] if sep else name  # upstream accepts a second slash
    if len(ident) > 32 or not _C_IDENTIFIER.fullmatch(ident):
        return (
            f"{shown(ident)}: must be a C identifier of at most 32 characters (letters, "
            "digits, '_', not starting with a digit)"
        )
    return ""


def _attribute_problems(value: Any, path: str) -> list[FieldProblem]:
    if value is None:  # decodes as an attribute with no value
        value = {}
    if not isinstance(value, dict):
        return []  # the schema's
    given = [t for t in _ATTRIBUTE_TYPES if value.get(t) is not None]
    if len(given) != 1:
        return [
            FieldProblem("exactly one value must be specified (bool, int, string, version)", path)
        ]
    kind = given[0]
    raw = value[kind]
    if kind in ("string", "version") and isinstance(raw, str):
        if len(raw) > MAX_ATTRIBUTE_VALUE_LENGTH:
            return [
                FieldProblem(
                    f"Too long: may not be more than {MAX_ATTRIBUTE_VALUE_LENGTH} bytes",
                    join_path(path, kind),
                )
            ]
        if kind == "version":
            try:
                parse_semver(raw)
            except ValueError:
                return [
                    FieldProblem(
                        f"{raw!r}: must be a string compatible with semver.org spec 2.0.0",
                        join_path(path, kind),
                    )
                ]
    return []


def dra_object_problems(doc: Any) -> list[FieldProblem]:
    """The checks above for one object of any ``resource.k8s.io`` version; paths start at the
    object (``spec.devices.requests[0]...``). Other objects: no problems."""
    if not isinstance(doc, dict):
        return []
    api = doc.get("apiVersion")
    if not isinstance(api, str) or not api.startswith("resource.k8s.io/"):
        return []
    spec = doc.get("spec")
    kind = doc.get("kind")
    if kind == "DeviceClass" and isinstance(spec, dict):
        return selector_problems(spec.get("selectors"), "spec.selectors") + _configs(
            spec.get("config"), "spec.config"
        )
    if kind == "ResourceClaim":
        return claim_spec_problems(spec, "spec")
    if kind == "ResourceClaimTemplate" and isinstance(spec, dict):
        return claim_spec_problems(spec.get("spec"), "spec.spec")
    if kind == "ResourceSlice":
        return slice_problems(spec, "spec")
    return []
