"""``resource.k8s.io`` objects between the versions Kubernetes serves and kgpu's one internal
form, ``v1``.

Why: Kubernetes 1.32 serves DRA as ``v1beta1`` only, 1.33 adds ``v1beta2``, 1.34 adds ``v1``.
kgpu's core (slices, allocator, ComputeDomains) reads and writes ``v1`` only; the API-server
shell converts at the edge, so no other module knows which version a cluster speaks.

The differences, from the official OpenAPI schemas of each release:

- ``v1beta2`` and ``v1`` have the same shape (``v1`` is ``v1beta2`` made GA); only
  ``apiVersion`` changes.
- ``v1beta1`` wraps a device's fields in ``basic`` (ResourceSlice ``spec.devices[].basic``),
  where ``v1`` has them on the device itself.
- ``v1beta1`` has a claim request's fields on the request itself (``deviceClassName``,
  ``selectors``, ``allocationMode``, ``count``, ``adminAccess``, ``tolerations``,
  ``capacity``), where ``v1`` puts them under ``exactly``; ``firstAvailable`` is the same in
  both. This holds for ResourceClaims and for ResourceClaimTemplates (``spec.spec``).
- DeviceClass and claim status are the same in every version, except that
  ``DeviceClass.spec.extendedResourceName`` exists from 1.34 only: a server that serves no
  ``v1`` predates it, so a DeviceClass sent as ``v1beta2``/``v1beta1`` leaves it out (a strict
  server would refuse the unknown field).

Each function takes a whole object or a partial one (a merge patch): a missing field stays
missing, and the input is never changed. ``DeviceTaintRule`` is served as ``v1alpha3``
(1.33-1.35), ``v1beta2`` (1.36) or ``v1`` (1.37, :mod:`kgpu.releases`) with one shape: it
passes unchanged.

Two ways in: :func:`to_version` / :func:`to_internal` (the API-server shell, which knows the
kind of a partial object), and :func:`to_v1` / :func:`from_v1` / :func:`convert` for whole
objects of any version (``kgpu allocate`` reads each object in its own version).
"""

from __future__ import annotations

import copy
import re
from typing import Any

GROUP = "resource.k8s.io"
#: The versions kgpu speaks, newest (preferred) first.
VERSIONS = ("v1", "v1beta2", "v1beta1")
INTERNAL = "v1"
INTERNAL_API_VERSION = f"{GROUP}/{INTERNAL}"
#: The kinds of the group kgpu reads and writes.
KINDS = ("ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass")
#: The versions DeviceTaintRule is served in, newest first (its shape is the same in all).
TAINT_RULE_VERSIONS = ("v1", "v1beta2", "v1alpha3")

#: Fields of a ``v1beta1`` claim request that ``v1`` puts under ``exactly``.
_EXACTLY_FIELDS = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
)

Obj = dict[str, Any]


class UnsupportedVersion(ValueError):
    """A ``resource.k8s.io`` version kgpu does not speak (``v1alpha3``, a typo)."""


#: The name ``kgpu allocate`` uses for the same error.
VersionError = UnsupportedVersion


def _reads(versions: tuple[str, ...]) -> str:
    return "kgpu reads " + ", ".join(f"{GROUP}/{v}" for v in versions)


def newest(served: list[str] | tuple[str, ...]) -> str | None:
    """The newest of :data:`VERSIONS` among ``served``, or None when none is served."""
    return next((v for v in VERSIONS if v in served), None)


def _version_of(api_version: str) -> str:
    group, _, version = api_version.rpartition("/")
    if group != GROUP or version not in VERSIONS:
        raise UnsupportedVersion(f"apiVersion {api_version!r}: {_reads(VERSIONS)}")
    return version


def to_version(obj: Obj, version: str, kind: str | None = None) -> Obj:
    """``obj`` (internal ``v1``) as ``resource.k8s.io/<version>``; ``kind`` names the kind of a
    partial object (a patch) that does not say it."""
    if version not in VERSIONS:
        raise UnsupportedVersion(f"{GROUP}/{version}: {_reads(VERSIONS)}")
    out = copy.deepcopy(obj)
    if "apiVersion" in out:
        out["apiVersion"] = f"{GROUP}/{version}"
    if version == "v1beta1":
        _edit(out, kind or out.get("kind"), _device_to_beta1, _request_to_beta1)
    if version != INTERNAL and (kind or out.get("kind")) == "DeviceClass":
        spec = out.get("spec")
        if isinstance(spec, dict):
            spec.pop("extendedResourceName", None)
    return out


def to_internal(obj: Obj, api_version: str | None = None, kind: str | None = None) -> Obj:
    """``obj`` (of ``api_version``, default its own ``apiVersion``) as internal ``v1``."""
    version = _version_of(api_version or str(obj.get("apiVersion") or INTERNAL_API_VERSION))
    out = copy.deepcopy(obj)
    if "apiVersion" in out:
        out["apiVersion"] = INTERNAL_API_VERSION
    if version == "v1beta1":
        _edit(out, kind or out.get("kind"), _device_from_beta1, _request_from_beta1)
    return out


def _edit(obj: Obj, kind: Any, device: Any, request: Any) -> None:
    """Apply the per-device and per-request rewrites where the kind has them."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if kind == "ResourceSlice" and isinstance(spec.get("devices"), list):
        spec["devices"] = [device(d) if isinstance(d, dict) else d for d in spec["devices"]]
    claim_spec = spec.get("spec") if kind == "ResourceClaimTemplate" else spec
    if kind in ("ResourceClaim", "ResourceClaimTemplate") and isinstance(claim_spec, dict):
        devices = claim_spec.get("devices")
        if isinstance(devices, dict) and isinstance(devices.get("requests"), list):
            devices["requests"] = [
                request(r) if isinstance(r, dict) else r for r in devices["requests"]
            ]


def _device_to_beta1(device: Obj) -> Obj:
    basic = {k: v for k, v in device.items() if k != "name"}
    out: Obj = {"name": device["name"]} if "name" in device else {}
    out["basic"] = basic
    return out


def _device_from_beta1(device: Obj) -> Obj:
    out = {k: v for k, v in device.items() if k != "basic"}
    basic = device.get("basic")
    if isinstance(basic, dict):
        out.update(basic)
    return out


def _request_to_beta1(request: Obj) -> Obj:
    out = {k: v for k, v in request.items() if k != "exactly"}
    exactly = request.get("exactly")
    if isinstance(exactly, dict):
        out.update(exactly)
    return out


def _request_from_beta1(request: Obj) -> Obj:
    out = {k: v for k, v in request.items() if k not in _EXACTLY_FIELDS}
    exactly = {k: request[k] for k in _EXACTLY_FIELDS if k in request}
    if exactly or "firstAvailable" not in request:
        out["exactly"] = exactly
    return out


def version_of(obj: Obj) -> str:
    """The ``resource.k8s.io`` version of an object, "" for other groups."""
    group, sep, version = str(obj.get("apiVersion", "")).rpartition("/")
    return version if sep and group == GROUP else ""


def slice_path(path: str, version: str) -> str:
    """A field path of a v1 ResourceSlice (``spec.devices[0].attributes.x``) as an object of
    ``version`` spells it: ``v1beta1`` keeps a device's fields under ``basic``. So a problem
    found in the v1 form names the field the user wrote."""
    if version != "v1beta1":
        return path
    return re.sub(r"^(spec\.devices\[\d+\])\.(?!name$)", r"\1.basic.", path)


def _is_taint_rule(obj: Obj) -> bool:
    if obj.get("kind") != "DeviceTaintRule":
        return False
    version = version_of(obj)
    if version and version not in TAINT_RULE_VERSIONS:
        reads = _reads(TAINT_RULE_VERSIONS)
        raise UnsupportedVersion(f"{GROUP}/{version} DeviceTaintRule: {reads}")
    return True


def to_v1(obj: Obj) -> Obj:
    """A whole object of any served version in the internal (v1) form; objects of other groups
    and DeviceTaintRules come back unchanged (copied)."""
    if not version_of(obj) or _is_taint_rule(obj):
        return copy.deepcopy(obj)
    return to_internal(obj)


def from_v1(obj: Obj, version: str) -> Obj:
    """A whole v1 object as ``version`` serves it (for clusters that do not serve v1 yet)."""
    if not version_of(obj) or _is_taint_rule(obj):
        return copy.deepcopy(obj)
    return to_version(obj, version)


def convert(obj: Obj, version: str) -> Obj:
    """A whole object between any two served versions (through v1)."""
    return from_v1(to_v1(obj), version)
