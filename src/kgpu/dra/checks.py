"""What the API server and NVIDIA's admission webhook refuse in DRA objects, checked offline.

The OpenAPI schema accepts any string as a CEL selector and any object as opaque driver
parameters. The API server compiles every selector when a DeviceClass, ResourceClaim or
ResourceClaimTemplate is created, and the GPU driver's webhook decodes the ``gpu.nvidia.com``
parameters (GpuConfig, MigDeviceConfig) strictly; a mistake in either would otherwise surface
only when the scheduler or the kubelet meets the claim. ``kgpu allocate`` and ``kgpu validate``
run these checks before anything else sees the object.
"""

from __future__ import annotations

from typing import Any

from kgpu.dra.cel import CelCompileError, compile_selector
from kgpu.dra.classes import GPU_DRIVER
from kgpu.dra.opaque import parse_config
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.quantity import QuantityError, parse_quantity


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


def quantity_problems(values: Any, path: str) -> list[FieldProblem]:
    """Every value of a map of quantities (``capacity.requests``) that is not one: the API
    server cannot decode such a claim (``quantities must match the regular expression ...``),
    and the allocator must never meet it."""
    out: list[FieldProblem] = []
    if not isinstance(values, dict):
        return out
    for name, value in values.items():
        if value is None:
            continue
        try:
            parse_quantity(value)
        except QuantityError as exc:
            out.append(FieldProblem(str(exc), join_path(path, str(name))))
    return out


def _request_problems(request: Any, path: str) -> list[FieldProblem]:
    """Selectors and capacity requests of one ``exactly`` or ``firstAvailable`` entry."""
    if not isinstance(request, dict):
        return []
    out = selector_problems(request.get("selectors"), join_path(path, "selectors"))
    capacity = request.get("capacity")
    if isinstance(capacity, dict):
        out += quantity_problems(capacity.get("requests"), join_path(path, "capacity", "requests"))
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
            out += _request_problems(exactly, join_path(at, "exactly"))
        elif "selectors" in req or "capacity" in req:  # the v1beta1 shape
            out += _request_problems(req, at)
        subs = req.get("firstAvailable")
        for k, sub in enumerate(subs if isinstance(subs, list) else []):
            out += _request_problems(sub, join_path(at, "firstAvailable", k))
    out += _configs(devices.get("config"), join_path(path, "devices", "config"))
    return out


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
        from kgpu.dra.slices import slice_problems
        from kgpu.dra.versions import VersionError, slice_path, to_v1, version_of

        try:
            v1 = to_v1(doc)
        except VersionError:  # a version kgpu does not read: the schema check names it
            return []
        version = version_of(doc)
        return [FieldProblem(p.message, slice_path(p.path, version)) for p in slice_problems(v1)]
    return []
