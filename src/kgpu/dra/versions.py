"""``resource.k8s.io`` objects in every served version, converted to one internal form (v1).

A cluster serves DRA objects as ``v1`` (1.34+), ``v1beta2`` (1.33+) and ``v1beta1`` (1.32+);
an older cluster, or a manifest written for one, uses the older shapes. The allocator works on
v1 only, so objects are converted at the edge, each in its own version:

* v1beta1 -> v1: a device's fields live under ``basic`` (``basic.attributes``...); a request's
  ``deviceClassName``/``selectors``/``allocationMode``/``count``/``adminAccess``/``tolerations``/
  ``capacity`` sit on the request itself instead of under ``exactly``.
* v1beta2 -> v1: the same shapes as v1.
* ``DeviceTaintRule`` is ``v1alpha3`` (1.33-1.35) or ``v1beta2`` (1.36): same shape, kept.

:func:`to_v1` and :func:`from_v1` convert one object either way (the API server's lossless
round trip for the fields kgpu knows; unknown fields are carried along), :func:`convert` between
any two served versions. Objects of other groups pass unchanged.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]

GROUP = "resource.k8s.io"
#: served versions, preferred first
VERSIONS = ("v1", "v1beta2", "v1beta1")
#: the versions DeviceTaintRule is served in
TAINT_RULE_VERSIONS = ("v1beta2", "v1alpha3")
#: request fields that v1beta1 keeps on the request and v1 under ``exactly``
_EXACT_FIELDS = (
    "deviceClassName",
    "selectors",
    "allocationMode",
    "count",
    "adminAccess",
    "tolerations",
    "capacity",
)


class VersionError(ValueError):
    """An ``apiVersion`` kgpu does not convert (with the versions it does)."""


def split_api_version(api_version: str) -> tuple[str, str]:
    group, sep, version = api_version.rpartition("/")
    return (group, version) if sep else ("", api_version)


def version_of(obj: Obj) -> str:
    """The ``resource.k8s.io`` version of an object, "" for other groups."""
    group, version = split_api_version(str(obj.get("apiVersion", "")))
    return version if group == GROUP else ""


def _check(version: str, kind: str) -> None:
    allowed = TAINT_RULE_VERSIONS if kind == "DeviceTaintRule" else VERSIONS
    if version not in allowed:
        raise VersionError(
            f"{GROUP}/{version} {kind or 'object'}: kgpu reads "
            + ", ".join(f"{GROUP}/{v}" for v in allowed)
        )


# -- devices -----------------------------------------------------------------------------------


def _device_to_v1(dev: Obj) -> Obj:
    basic = dev.get("basic")
    if not isinstance(basic, dict):
        return dev
    out = {k: v for k, v in dev.items() if k != "basic"}
    out.update(basic)
    return out


def _device_from_v1(dev: Obj) -> Obj:
    basic = {k: v for k, v in dev.items() if k != "name"}
    out: Obj = {"name": dev.get("name")} if "name" in dev else {}
    out["basic"] = basic
    return out


def _slice_spec(spec: Obj, device: Any) -> Obj:
    out = dict(spec)
    if isinstance(spec.get("devices"), list):
        out["devices"] = [device(d) if isinstance(d, dict) else d for d in spec["devices"]]
    return out


# -- requests ----------------------------------------------------------------------------------


def _request_to_v1(req: Obj) -> Obj:
    if "exactly" in req or ("firstAvailable" in req and req.get("firstAvailable")):
        return req
    out: Obj = {k: v for k, v in req.items() if k not in _EXACT_FIELDS}
    exactly = {k: req[k] for k in _EXACT_FIELDS if k in req}
    if exactly:
        out["exactly"] = exactly
    return out


def _request_from_v1(req: Obj) -> Obj:
    exactly = req.get("exactly")
    out = {k: v for k, v in req.items() if k != "exactly"}
    if isinstance(exactly, dict):
        out.update(exactly)
    return out


def _claim_spec(spec: Any, request: Any) -> Any:
    if not isinstance(spec, dict) or not isinstance(spec.get("devices"), dict):
        return spec
    devices = dict(spec["devices"])
    if isinstance(devices.get("requests"), list):
        devices["requests"] = [
            request(r) if isinstance(r, dict) else r for r in devices["requests"]
        ]
    return {**spec, "devices": devices}


# -- objects -----------------------------------------------------------------------------------


def _convert_fields(obj: Obj, to_v1: bool) -> Obj:
    kind = obj.get("kind")
    out = dict(obj)
    spec = obj.get("spec")
    if kind == "ResourceSlice" and isinstance(spec, dict):
        out["spec"] = _slice_spec(spec, _device_to_v1 if to_v1 else _device_from_v1)
    elif kind == "ResourceClaim":
        out["spec"] = _claim_spec(spec, _request_to_v1 if to_v1 else _request_from_v1)
    elif kind == "ResourceClaimTemplate" and isinstance(spec, dict):
        out["spec"] = {
            **spec,
            "spec": _claim_spec(spec.get("spec"), _request_to_v1 if to_v1 else _request_from_v1),
        }
    return out


def to_v1(obj: Obj) -> Obj:
    """The object in the internal (v1) form; a copy, the input is not modified. Objects of
    other groups and DeviceTaintRules come back unchanged (copied)."""
    obj = copy.deepcopy(obj)
    version = version_of(obj)
    if not version or obj.get("kind") == "DeviceTaintRule":
        if version:
            _check(version, "DeviceTaintRule")
        return obj
    _check(version, str(obj.get("kind") or ""))
    out = _convert_fields(obj, to_v1=True) if version == "v1beta1" else obj
    out["apiVersion"] = f"{GROUP}/v1"
    return out


def from_v1(obj: Obj, version: str) -> Obj:
    """A v1 object as ``version`` serves it (for clusters that do not serve v1 yet)."""
    obj = copy.deepcopy(obj)
    if not version_of(obj) or obj.get("kind") == "DeviceTaintRule":
        return obj
    _check(version, str(obj.get("kind") or ""))
    out = _convert_fields(obj, to_v1=False) if version == "v1beta1" else obj
    out["apiVersion"] = f"{GROUP}/{version}"
    return out


def convert(obj: Obj, version: str) -> Obj:
    """Between any two served versions (through v1)."""
    return from_v1(to_v1(obj), version)
