"""Extended resources backed by DRA in the simulated cluster (``DeviceClass.extendedResourceName``,
KEP-5004, the ``DRAExtendedResource`` gate, beta in 1.34+).

A pod that asks for ``nvidia.com/gpu: 1`` is satisfied on a node that does not advertise the
resource (no device plugin: a DRA-only node) through the DeviceClass naming it, as
kube-scheduler 1.34+ does:

* NodeResourcesFit leaves such a resource to the DynamicResources plugin on nodes whose
  allocatable has none of it (:func:`delegated`, upstream's ``ShouldDelegateResourceToDRA``);
* the DynamicResources plugin builds, per node, the claim for what that node does not offer
  itself (:func:`kgpu.dra.extended.extended_resource_claim`) and allocates it with the pod's
  other claims;
* when the pod is bound, the claim is created (``generateName: <pod>-extended-resources-``,
  annotated ``resource.kubernetes.io/extended-resource-claim: "true"``, owned by the pod) with
  its allocation, and the pod's ``status.extendedResourceClaimStatus`` names it and maps each
  request to its container and resource (:func:`request_mappings`), which is how the kubelet
  gives the devices to the right container (:mod:`kgpu.sim.dra_node`);
* the claim goes with the pod (the resourceclaim controller deletes it once the pod is done).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from kgpu.dra.extended import CLAIM_ANNOTATION, is_extended_resource
from kgpu.store import NotFound, ObjectStore, namespace_of

Obj = dict[str, Any]
STATUS_FIELD = "extendedResourceClaimStatus"


def delegated(resource: str, allocatable: Mapping[str, int], mapped: frozenset[str]) -> bool:
    """Whether NodeResourcesFit leaves ``resource`` to the DRA plugin on a node with this
    allocatable: a DeviceClass provides it and the node offers none of its own."""
    return (
        resource in mapped and allocatable.get(resource, 0) <= 0 and is_extended_resource(resource)
    )


def defaulted(pod: Mapping[str, Any]) -> Obj:
    """The pod as the API server stores it: a container's ``limits`` are its ``requests``
    where it gives none (what kube-scheduler and the kubelet read). A shallow copy."""
    spec = dict(pod.get("spec") or {})
    for key in ("initContainers", "containers"):
        out = []
        for c in spec.get(key) or []:
            resources = c.get("resources") or {}
            limits = resources.get("limits") or {}
            if limits:
                requests = {**limits, **(resources.get("requests") or {})}
                c = {**c, "resources": {**resources, "requests": requests}}
            out.append(c)
        if key in spec:
            spec[key] = out
    return {**pod, "spec": spec}


def _containers(pod: Mapping[str, Any]) -> list[Obj]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def request_mappings(claim: Mapping[str, Any], pod: Mapping[str, Any]) -> list[Obj]:
    """``status.extendedResourceClaimStatus.requestMappings``: for every request of the claim
    (``container-<i>-request-<j>``: container ``i`` of init + regular containers, ``j`` the
    resource's index among the container's sorted requests), the container and resource it
    serves."""
    pod = defaulted(pod)
    names = {
        str(r.get("name"))
        for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    }
    out: list[Obj] = []
    for i, container in enumerate(_containers(pod)):
        requests = sorted(str(k) for k in (container.get("resources") or {}).get("requests") or {})
        for j, resource in enumerate(requests):
            name = f"container-{i}-request-{j}"
            if name in names:
                out.append(
                    {
                        "containerName": str(container.get("name", "")),
                        "resourceName": resource,
                        "requestName": name,
                    }
                )
    return out


def claim_status(pod: Mapping[str, Any]) -> Obj | None:
    """The pod's ``status.extendedResourceClaimStatus``, if it has one."""
    found = (pod.get("status") or {}).get(STATUS_FIELD)
    return found if isinstance(found, dict) and found.get("resourceClaimName") else None


def record_claim(pod: Obj, claim: Mapping[str, Any], store: ObjectStore) -> None:
    """Write ``status.extendedResourceClaimStatus`` into ``pod`` and the stored pod (the
    scheduler's status patch after creating the claim)."""
    status: Obj = {
        "requestMappings": request_mappings(claim, pod),
        "resourceClaimName": str((claim.get("metadata") or {}).get("name", "")),
    }
    pod.setdefault("status", {})[STATUS_FIELD] = status
    meta = pod.get("metadata") or {}
    with contextlib.suppress(NotFound):
        stored = store.get("v1", "Pod", str(meta.get("name", "")), namespace_of(pod))
        if (stored.get("metadata") or {}).get("uid") == meta.get("uid"):
            stored.setdefault("status", {})[STATUS_FIELD] = status
            stored["metadata"].pop("resourceVersion", None)
            store.update(stored)


def is_extended_claim(claim: Mapping[str, Any]) -> bool:
    meta = claim.get("metadata") or {}
    return (meta.get("annotations") or {}).get(CLAIM_ANNOTATION) == "true"


def owned_by(claim: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    uid = (pod.get("metadata") or {}).get("uid")
    return any(
        o.get("kind") == "Pod" and o.get("uid") == uid and o.get("controller")
        for o in (claim.get("metadata") or {}).get("ownerReferences") or []
    )


__all__ = [
    "STATUS_FIELD",
    "claim_status",
    "defaulted",
    "delegated",
    "is_extended_claim",
    "owned_by",
    "record_claim",
    "request_mappings",
]
