"""Extended resources backed by DRA (``DeviceClass.extendedResourceName``, KEP-5004).

A pod asking for ``nvidia.com/gpu: 1`` on a node that advertises no such resource (no device
plugin) is still schedulable there when a DeviceClass maps the name: kube-scheduler then builds
one claim for all such requests of the pod and allocates it like any other. Every class also
maps its implicit name ``deviceclass.resource.kubernetes.io/<class>``. When several classes map
one name, the newest (``creationTimestamp``) wins, ties going to the lexicographically first
name, which lets an operator move a name from one class to another.

:func:`class_for_resources` gives the mapping, :func:`extended_resource_claim` the claim
kube-scheduler builds for one pod and node (request ``container-<i>-request-<j>`` per container
and resource, as upstream names them), which the allocator then allocates as usual.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kgpu.quantity import parse_quantity

Obj = dict[str, Any]

IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
#: the name the claim has until the API server gives it one
IN_MEMORY_NAME = "<extended-resources>"


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _created(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("creationTimestamp") or "")


def class_for_resources(classes: Iterable[Obj]) -> dict[str, Obj]:
    """Extended resource name -> the DeviceClass that provides it."""
    mapping: dict[str, Obj] = {}
    for cls in classes:
        mapping[IMPLICIT_PREFIX + _name(cls)] = cls
        explicit = (cls.get("spec") or {}).get("extendedResourceName")
        if not explicit:
            continue
        held = mapping.get(str(explicit))
        if held is None or _preferred(cls, held):
            mapping[str(explicit)] = cls
    return mapping


def _preferred(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether class ``a`` wins a name over ``b``: newer first, then the first name."""
    if _created(a) != _created(b):
        return _created(a) > _created(b)
    return _name(a) < _name(b)


def is_extended_resource(name: str) -> bool:
    """Names the scheduler may back with DRA: extended resources, i.e. domain-qualified names
    outside ``kubernetes.io`` (``nvidia.com/gpu``) and the implicit class names."""
    if name.startswith(IMPLICIT_PREFIX):
        return True
    domain, sep, _ = name.partition("/")
    if not sep:
        return False
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _containers(pod: Mapping[str, Any]) -> list[Obj]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def extended_requests(pod: Mapping[str, Any], mapping: Mapping[str, Obj]) -> dict[str, int]:
    """The pod's requests for extended resources that some DeviceClass provides (the largest
    per container, summed as the pod's effective request is)."""
    spec = pod.get("spec") or {}
    out: dict[str, int] = {}
    for container in spec.get("containers") or []:
        for name, qty in ((container.get("resources") or {}).get("requests") or {}).items():
            if name in mapping and is_extended_resource(str(name)):
                out[str(name)] = out.get(str(name), 0) + int(parse_quantity(qty))
    for container in spec.get("initContainers") or []:
        for name, qty in ((container.get("resources") or {}).get("requests") or {}).items():
            if name in mapping and is_extended_resource(str(name)):
                out[str(name)] = max(out.get(str(name), 0), int(parse_quantity(qty)))
    return {k: v for k, v in out.items() if v > 0}


def _container_request(
    index: int, container: Mapping[str, Any], name: str, cls: str, reusable: list[Obj | None]
) -> Obj | None:
    """The request one container needs for ``name``: ``container-<index>-request-<j>`` (j the
    resource's position among the container's sorted requests), for what the long-lived
    containers' requests in ``reusable`` (usable by an init container) do not already cover."""
    creqs = (container.get("resources") or {}).get("requests") or {}
    if name not in creqs:
        return None
    want = int(parse_quantity(creqs[name]))
    if want <= 0:
        return None
    have = 0
    for r in reusable:
        if r is not None:
            have += int(r["exactly"]["count"])
            if have >= want:
                return None
    return {
        "name": f"container-{index}-request-{sorted(str(k) for k in creqs).index(name)}",
        "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": want - have},
    }


def extended_resource_claim(
    pod: Mapping[str, Any],
    mapping: Mapping[str, Obj],
    node_allocatable: Mapping[str, Any] | None = None,
) -> Obj | None:
    """The claim kube-scheduler builds for ``pod`` on a node with ``node_allocatable``: one
    ExactCount request per container and extended resource the node does not offer itself
    (allocatable 0 or absent) but a DeviceClass provides. None when nothing needs DRA."""
    allocatable = node_allocatable or {}
    wanted = {
        name
        for name in extended_requests(pod, mapping)
        if int(parse_quantity(allocatable.get(name, 0) or 0)) == 0
    }
    if not wanted:
        return None
    requests: list[Obj] = []
    containers = _containers(pod)
    n_init = len((pod.get("spec") or {}).get("initContainers") or [])
    for name in sorted(wanted):
        cls = _name(mapping[name])
        long_lived: list[Obj | None] = [None] * len(containers)
        for ci, c in enumerate(containers):
            if ci >= n_init or c.get("restartPolicy") == "Always":  # regular or sidecar
                long_lived[ci] = _container_request(ci, c, name, cls, [])
        biggest: Obj | None = None
        for ci, c in enumerate(containers):
            if ci < n_init and c.get("restartPolicy") != "Always":
                req = _container_request(ci, c, name, cls, long_lived[ci:])
                if req is not None and (
                    biggest is None or req["exactly"]["count"] > biggest["exactly"]["count"]
                ):
                    biggest = req
        if biggest is not None:
            requests.append(biggest)
        requests.extend(r for r in long_lived if r is not None)
    requests.sort(key=lambda r: r["name"])
    meta = pod.get("metadata") or {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": IN_MEMORY_NAME,
            "generateName": f"{meta.get('name', '')}-extended-resources-",
            "namespace": meta.get("namespace") or "default",
            "annotations": {CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                    "controller": True,
                }
            ],
        },
        "spec": {"devices": {"requests": requests}},
    }
