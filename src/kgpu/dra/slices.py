"""The ResourceSlices a node publishes for driver ``gpu.nvidia.com``, from its hardware snapshot:
the devices of :mod:`kgpu.dra.devices` packed into one pool named after the node, the way
NVIDIA's DRA driver packs them for the Kubernetes version it talks to.

* Static devices: one pool, GPUs in PCI bus order, each GPU's devices by name. Upstream puts
  them all in one slice; kgpu splits a pool that would exceed the 128 devices one slice may
  hold (``resourceSliceCount`` says how many make it complete).
* Dynamic MIG on Kubernetes 1.34 (``kubernetes_version`` < 1.35): one slice per GPU holding its
  counter set and the devices that consume it (1.34 requires both in one slice).
* Dynamic MIG on 1.35 and newer: a slice may hold devices or counter sets but not both, so the
  counter sets come first, up to 8 per slice, then one slice of devices per GPU.

:func:`slice_problems` and :func:`pool_problems` are the API server's and the scheduler's checks
of those limits, so what kgpu publishes can be tested against them for each version.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from kgpu.config.fields import is_dns_subdomain
from kgpu.dra.api import RESOURCE_API
from kgpu.dra.devices import DRIVER, GpuDevices, gpu_devices, gpus_in_order, taint_devices
from kgpu.dra.shares import DISABLED_POLICY, SharePolicy
from kgpu.errors import FieldProblem, join_path, shown
from kgpu.hardware.model import Machine
from kgpu.quantity import QuantityError, parse_quantity

#: The Kubernetes version slices are shaped for when the caller does not know the server's.
DEFAULT_KUBERNETES_VERSION = "1.35"
#: From this version a slice holds devices or counter sets, never both.
SPLIT_COUNTERS_SINCE = (1, 35)
#: v1 limits.
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_WITH_COUNTERS = 64  # 1.35+, when a device consumes counters (or has taints)
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUE_LENGTH = 64  # bytes of a string or version attribute
MAX_COUNTERS_PER_SLICE_1_34 = 32  # all counter sets of one slice together
MAX_COUNTERS_PER_DEVICE_1_34 = 32
MAX_DEVICE_COUNTERS_PER_SLICE_1_34 = 1024
MAX_COUNTER_SETS_PER_SLICE = 8  # 1.35+
MAX_COUNTERS_PER_SET = 32  # 1.35+
MAX_CONSUMPTIONS_PER_DEVICE = 2  # 1.35+

Obj = dict[str, Any]

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:[.+-].*)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_ATTRIBUTE_TYPES = ("bool", "int", "string", "version")


def kubernetes_minor(version: str) -> tuple[int, int]:
    """``"1.35"``, ``"v1.35.2"``, ``"1.34.1-gke.100"`` -> (1, 35); ValueError otherwise."""
    found = _VERSION.match(version.strip())
    if found is None:
        raise ValueError(
            f"Kubernetes version {version!r}: expected <major>.<minor>, e.g. 1.35 or v1.35.2"
        )
    return int(found[1]), int(found[2])


def counters_apart(version: str) -> bool:
    """Whether counter sets go in slices of their own (Kubernetes 1.35 and newer)."""
    return kubernetes_minor(version) >= SPLIT_COUNTERS_SINCE


def _chunks(items: Sequence[Any], size: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


def slice_name(node_name: str, driver: str, index: int) -> str:
    """``<node>-<driver>-<i>``: publishing finds a pool's slices by these names."""
    return f"{node_name}-{driver}-{index}"


def _slice(
    node_name: str,
    driver: str,
    generation: int,
    index: int,
    count: int,
    devices: list[Obj],
    counter_sets: list[Obj],
) -> Obj:
    spec: Obj = {
        "driver": driver,
        "pool": {"name": node_name, "generation": generation, "resourceSliceCount": count},
        "nodeName": node_name,
    }
    if counter_sets:
        spec["sharedCounters"] = counter_sets
    if devices or not counter_sets:
        spec["devices"] = devices
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(node_name, driver, index)},
        "spec": spec,
    }


def node_devices(
    machine: Machine, *, dynamic_mig: bool = False, shares: SharePolicy = DISABLED_POLICY
) -> list[GpuDevices]:
    """Every GPU's devices (and counter set), GPUs in upstream's order."""
    return [
        gpu_devices(machine, g, dynamic_mig=dynamic_mig, shares=shares)
        for g in gpus_in_order(machine)
    ]


def resource_slices(
    machine: Machine,
    node_name: str,
    *,
    driver: str = DRIVER,
    generation: int = 1,
    max_devices_per_slice: int = MAX_DEVICES_PER_SLICE,
    partitionable: bool = False,
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
    unhealthy: Mapping[str, str] | None = None,
    shares: SharePolicy = DISABLED_POLICY,
) -> list[Obj]:
    """The ResourceSlices of one node (see the module docstring for the shapes);
    ``partitionable`` turns dynamic MIG on, ``kubernetes_version`` is the API server's;
    ``unhealthy`` (GPU/MIG UUID -> reason, :mod:`kgpu.node.health`) taints those devices as
    NVIDIA's driver does (:func:`kgpu.dra.devices.taint_devices`); ``shares`` publishes whole
    GPUs for consumable shares (:mod:`kgpu.dra.shares`)."""
    limit = max(1, min(max_devices_per_slice, MAX_DEVICES_PER_SLICE))
    per_gpu = node_devices(machine, dynamic_mig=partitionable, shares=shares)
    if unhealthy:
        per_gpu = [replace(g, devices=taint_devices(g.devices, unhealthy)) for g in per_gpu]
    groups: list[tuple[list[Obj], list[Obj]]] = []  # (devices, counter sets) per slice
    if not partitionable:
        flat = [d for g in per_gpu for d in g.devices]
        groups = [(chunk, []) for chunk in _chunks(flat, limit)]
    elif not counters_apart(kubernetes_version):
        groups = [(g.devices, [g.counter_set] if g.counter_set else []) for g in per_gpu]
    else:
        sets = [g.counter_set for g in per_gpu if g.counter_set]
        groups = [([], chunk) for chunk in _chunks(sets, MAX_COUNTER_SETS_PER_SLICE)]
        for g in per_gpu:
            size = min(limit, MAX_DEVICES_WITH_COUNTERS) if g.counter_set else limit
            groups += [(chunk, []) for chunk in _chunks(g.devices, size)]
    if not groups:
        groups = [([], [])]
    return [
        _slice(node_name, driver, generation, i, len(groups), devices, sets)
        for i, (devices, sets) in enumerate(groups)
    ]


# -- the API server's and the scheduler's checks ------------------------------------------------


def _too_many(n: int, most: int) -> str:
    return f"Too many: {n}: must have at most {most} items"


def _mappings(items: Any) -> list[tuple[int, Obj]]:
    """(index, entry) of the mappings in a list; the schema reports every other shape."""
    return (
        [(i, x) for i, x in enumerate(items) if isinstance(x, dict)]
        if isinstance(items, list)
        else []
    )


def _mapping(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _policy_problems(capacity: Obj, at: str) -> list[FieldProblem]:
    """Quantities in a capacity's ``requestPolicy`` (``default``, ``validValues``,
    ``validRange`` min/max/step): the API server cannot decode a slice with one that is not."""
    policy = capacity.get("requestPolicy")
    if not isinstance(policy, dict):
        return []
    found: list[tuple[str, Any]] = []
    if "default" in policy:
        found.append((join_path(at, "default"), policy["default"]))
    values = policy.get("validValues")
    if isinstance(values, list):
        found += [(join_path(at, "validValues", i), v) for i, v in enumerate(values)]
    rng = policy.get("validRange")
    if isinstance(rng, dict):
        found += [
            (join_path(at, "validRange", k), rng[k]) for k in ("min", "max", "step") if k in rng
        ]
    out: list[FieldProblem] = []
    for path, raw in found:
        if raw is None:
            continue
        try:
            parse_quantity(raw)
        except QuantityError as exc:
            out.append(FieldProblem(str(exc), path))
    return out


def _device_problems(
    device: Obj, where: str, apart: bool, local: dict[str, set[Any]]
) -> list[FieldProblem]:
    out: list[FieldProblem] = []
    name = device.get("name", "")
    if not isinstance(name, str) or not _DNS_LABEL.match(name):
        out.append(FieldProblem(f"{shown(name)}: must be a DNS label", join_path(where, "name")))
    attributes, capacity = _mapping(device.get("attributes")), _mapping(device.get("capacity"))
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        out.append(
            FieldProblem(
                f"{len(attributes) + len(capacity)}: the total number of attributes and "
                f"capacities must not exceed {MAX_ATTRIBUTES_AND_CAPACITIES}",
                where,
            )
        )
    for field, entries in (("attributes", attributes), ("capacity", capacity)):
        for key in entries:
            problem = _qualified_name_problem(key)
            if problem:
                out.append(FieldProblem(problem, join_path(where, field, str(key))))
    for key, value in attributes.items():
        out += _attribute_problems(value, join_path(where, "attributes", str(key)))
    for key, value in capacity.items():
        at = join_path(where, "capacity", str(key), "value")
        raw = value.get("value") if isinstance(value, dict) else None
        if raw is None:
            out.append(FieldProblem("Required value", at))
            continue
        try:
            parse_quantity(raw)
        except QuantityError as exc:
            out.append(FieldProblem(str(exc), at))
        out += _policy_problems(value, join_path(where, "capacity", str(key), "requestPolicy"))
    uses = _mappings(device.get("consumesCounters"))
    if apart and len(uses) > MAX_CONSUMPTIONS_PER_DEVICE:
        out.append(
            FieldProblem(
                _too_many(len(uses), MAX_CONSUMPTIONS_PER_DEVICE),
                join_path(where, "consumesCounters"),
            )
        )
    total = sum(len(_mapping(u.get("counters"))) for _, u in uses)
    if not apart and total > MAX_COUNTERS_PER_DEVICE_1_34:
        out.append(
            FieldProblem(
                f"the total number of counters must not exceed {MAX_COUNTERS_PER_DEVICE_1_34}",
                where,
            )
        )
    for j, use in uses:
        path = join_path(where, "consumesCounters", j)
        counters = _mapping(use.get("counters"))
        if apart and len(counters) > MAX_COUNTERS_PER_SET:
            out.append(
                FieldProblem(
                    _too_many(len(counters), MAX_COUNTERS_PER_SET), join_path(path, "counters")
                )
            )
        if apart:
            continue  # 1.35 checks references across the pool (pool_problems)
        cset = use.get("counterSet", "")
        if not isinstance(cset, str) or cset not in local:
            out.append(
                FieldProblem(
                    f"{shown(cset)}: must reference a counterSet defined in the "
                    "ResourceSlice sharedCounters",
                    join_path(path, "counterSet"),
                )
            )
            continue
        for counter in counters:
            if counter not in local[cset]:
                out.append(
                    FieldProblem(
                        f"{shown(counter)}: must reference a counter defined in the "
                        "ResourceSlice sharedCounters",
                        join_path(path, "counters"),
                    )
                )
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
    """One attribute: exactly one value; strings and versions of at most 64 bytes; versions
    in semver 2.0 (the allocator's CEL and semver helpers meet only what passes)."""
    from kgpu.dra.cel import parse_semver  # the CEL library loads only when a slice is checked

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
                        f"{shown(raw)}: must be a string compatible with semver.org spec 2.0.0",
                        join_path(path, kind),
                    )
                ]
    return []


def slice_problems(
    slice_: Any, kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
) -> list[FieldProblem]:
    """What the API server of ``kubernetes_version`` refuses in one v1 ResourceSlice and its
    schema lets through, in the API server's words, paths from the object (``spec.devices[0]
    .name``): the limits on devices, counter sets and counters (which changed in 1.35), device
    names, at most 32 attributes and capacities per device, attribute and capacity names,
    attributes with exactly one value, strings and versions of at most 64 bytes, versions in
    semver 2.0, capacities that are quantities. Shapes the schema refuses (a device that is
    not a mapping...) are left to it. ``kgpu allocate`` and ``kgpu validate`` run it before the
    allocator's CEL, semver and quantity helpers see a slice; tests run it on what kgpu
    publishes."""
    apart = counters_apart(kubernetes_version)
    spec = _mapping(slice_.get("spec") if isinstance(slice_, dict) else None)
    devices = _mappings(spec.get("devices"))
    sets = _mappings(spec.get("sharedCounters"))
    listed = spec.get("devices")
    count = len(listed) if isinstance(listed, list) else 0
    out: list[FieldProblem] = []
    if apart and devices and sets:
        out.append(
            FieldProblem("Invalid value: only one of devices and sharedCounters may be set", "spec")
        )
    most = MAX_DEVICES_PER_SLICE
    if apart and any(d.get("consumesCounters") or d.get("taints") for _, d in devices):
        most = MAX_DEVICES_WITH_COUNTERS
    if count > most:
        out.append(FieldProblem(_too_many(count, most), "spec.devices"))
    local: dict[str, set[Any]] = {}
    for i, cset in sets:
        name = str(cset.get("name", ""))
        if name in local:
            out.append(
                FieldProblem(
                    f"Duplicate value: {shown(name)}", join_path("spec.sharedCounters", i, "name")
                )
            )
        local[name] = set(_mapping(cset.get("counters")))
        if apart and len(local[name]) > MAX_COUNTERS_PER_SET:
            out.append(
                FieldProblem(
                    _too_many(len(local[name]), MAX_COUNTERS_PER_SET),
                    join_path("spec.sharedCounters", i, "counters"),
                )
            )
    if apart and len(sets) > MAX_COUNTER_SETS_PER_SLICE:
        out.append(
            FieldProblem(_too_many(len(sets), MAX_COUNTER_SETS_PER_SLICE), "spec.sharedCounters")
        )
    shared = sum(len(_mapping(c.get("counters"))) for _, c in sets)
    if not apart and shared > MAX_COUNTERS_PER_SLICE_1_34:
        out.append(
            FieldProblem(
                "the total number of shared counters must not exceed "
                f"{MAX_COUNTERS_PER_SLICE_1_34}",
                "spec.sharedCounters",
            )
        )
    consumed = sum(
        len(_mapping(u.get("counters")))
        for _, d in devices
        for _, u in _mappings(d.get("consumesCounters"))
    )
    if not apart and consumed > MAX_DEVICE_COUNTERS_PER_SLICE_1_34:
        out.append(
            FieldProblem(
                "the total number of counters in devices must not exceed "
                f"{MAX_DEVICE_COUNTERS_PER_SLICE_1_34}",
                "spec.devices",
            )
        )
    for i, device in devices:
        out += _device_problems(device, join_path("spec.devices", i), apart, local)
    return out


def pool_problems(slices: Sequence[Obj]) -> list[str]:
    """What makes one pool (the newest generation of its slices) invalid for the scheduler:
    a counter set defined twice, a device consuming a counter set or counter the pool does not
    define, a device name used twice."""
    out: list[str] = []
    sets: dict[str, set[str]] = {}
    for s in slices:
        for cset in (s.get("spec") or {}).get("sharedCounters") or []:
            name = str(cset.get("name", ""))
            if name in sets:
                out.append(f"counter set {name} is defined twice")
            sets[name] = set(cset.get("counters") or {})
    names: set[str] = set()
    for s in slices:
        for device in (s.get("spec") or {}).get("devices") or []:
            name = str(device.get("name", ""))
            if name in names:
                out.append(f"device {name} is published twice")
            names.add(name)
            for use in device.get("consumesCounters") or []:
                cset = str(use.get("counterSet", ""))
                if cset not in sets:
                    out.append(f"device {name} consumes from undefined counter set {cset}")
                    continue
                missing = sorted(set(use.get("counters") or {}) - sets[cset])
                if missing:
                    out.append(f"device {name} consumes undefined counters {missing} of {cset}")
    return out
