"""Which pods belong to a ComputeDomain, by one rule everywhere: the controller's status and
"why is it pending" message, the admission webhook's clique affinity and the simulator all
ask these functions, so they can never disagree about a domain's members.

A pod *holds the domain's channel* when it lives in the domain's namespace (a channel claim
must, the node side refuses another namespace), has not terminated (phase ``Succeeded`` or
``Failed``) and is not being deleted, and either references the domain's channel
ResourceClaimTemplate (``spec.resourceClaims[].resourceClaimTemplateName``) or carries the
label kgpu's admission webhook sets on pods whose named ResourceClaim is a channel claim of
the domain (:data:`~kgpu.computedomain.api.WORKLOAD_LABEL`). A *member* is such a pod bound to
a node (``spec.nodeName``) whose Ready condition is not False.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kgpu.computedomain.api import WORKLOAD_LABEL, ComputeDomain
from kgpu.computedomain.placement import node_clique, node_healthy

Obj = Mapping[str, Any]
TERMINATED = ("Succeeded", "Failed")


def claim_templates(pod: Obj) -> list[str]:
    """Names of the ResourceClaimTemplates a pod references."""
    return [
        str(rc["resourceClaimTemplateName"])
        for rc in (pod.get("spec") or {}).get("resourceClaims") or []
        if isinstance(rc, Mapping) and rc.get("resourceClaimTemplateName")
    ]


def pod_alive(pod: Obj) -> bool:
    """Not terminated and not being deleted: a pod that still takes room and a channel."""
    meta = pod.get("metadata") or {}
    return (
        not meta.get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in TERMINATED
    )


def holds_channel(pod: Obj, domain: ComputeDomain) -> bool:
    """Whether ``pod`` uses ``domain``'s IMEX channel (the rule in the module docstring)."""
    meta = pod.get("metadata") or {}
    if (meta.get("namespace") or "default") != domain.namespace or not pod_alive(pod):
        return False
    if (meta.get("labels") or {}).get(WORKLOAD_LABEL) == domain.uid and domain.uid:
        return True
    return domain.spec.channel_template in claim_templates(pod)


def domain_members(
    domain: ComputeDomain, pods: Iterable[Obj], node: Callable[[str], Obj | None]
) -> dict[str, str | None]:
    """The nodes the domain's pods run on (node name -> its clique): pods that hold the
    channel, bound to a node that exists and is not NotReady."""
    members: dict[str, str | None] = {}
    for pod in pods:
        name = (pod.get("spec") or {}).get("nodeName")
        if not name or not holds_channel(pod, domain):
            continue
        obj = node(str(name))
        if node_healthy(obj):
            members[str(name)] = node_clique(obj)
    return members


def pending_pods(domain: ComputeDomain, pods: Iterable[Obj]) -> list[Obj]:
    """The domain's pods that wait for a node."""
    return [
        dict(p)
        for p in pods
        if not (p.get("spec") or {}).get("nodeName") and holds_channel(p, domain)
    ]
