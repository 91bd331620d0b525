"""Manifests for tests and benchmarks: the plain objects a user would ``kubectl apply``.

Tests and benches of the simulator, the scheduler, the autoscalers, DRA and ComputeDomains all
need "a Deployment of N pods asking for these limits", "a claim template for N GPUs", "a
ComputeDomain over N nodes"; one builder each keeps them from writing their own, subtly
different copies. The objects are what the API server accepts (``apps/v1`` schema), so a test
that passes one also passes it to a real cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kgpu.computedomain.api import API_VERSION, KIND


def deployment(
    name: str,
    replicas: int = 1,
    limits: Mapping[str, Any] | None = None,
    *,
    container: str = "c",
    image: str = "i",
    **pod_spec: Any,
) -> dict[str, Any]:
    """An ``apps/v1`` Deployment ``name`` of ``replicas`` pods labelled ``app: <name>``.

    Each pod has one container (``container``, running ``image``) with ``limits`` as its resource
    limits (none when ``None``), e.g. ``{"nvidia.com/gpu": 1}``. ``pod_spec`` adds fields to the
    pod template's spec beside ``containers``: ``nodeSelector=...``, ``affinity=...``,
    ``topologySpreadConstraints=[...]``.
    """
    main: dict[str, Any] = {"name": container, "image": image}
    if limits is not None:
        main["resources"] = {"limits": dict(limits)}
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {"containers": [main], **pod_spec},
            },
        },
    }


def claim_template(
    name: str,
    count: int = 1,
    device_class: str = "gpu.nvidia.com",
    selector: str | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceClaimTemplate ``name``: one request ``gpu`` for exactly
    ``count`` devices of ``device_class``, narrowed by the CEL ``selector`` when given."""
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def memory_share_claim(
    name: str,
    memory: str,
    *,
    kind: str = "ResourceClaim",
    namespace: str | None = "default",
) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceClaim (or ResourceClaimTemplate) ``name`` whose request
    ``gpu`` asks one ``gpu.nvidia.com`` GPU for ``memory`` of it (a consumable memory share);
    ``namespace`` None leaves it to the applier."""
    devices = {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "capacity": {"requests": {"memory": memory}},
                    },
                }
            ]
        }
    }
    metadata = {"name": name} if namespace is None else {"name": name, "namespace": namespace}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
        "spec": {"spec": devices} if kind == "ResourceClaimTemplate" else devices,
    }


def compute_domain(
    name: str,
    num_nodes: int = 2,
    *,
    namespace: str | None = None,
    channel: str | None = None,
    mode: str | None = None,
) -> dict[str, Any]:
    """A ComputeDomain ``name`` over ``num_nodes`` nodes (0: the field left out, as the API
    allows), its channel's ResourceClaimTemplate named ``channel`` (default ``<name>-ch``)
    with ``allocationMode`` ``mode`` when given; no namespace unless one is given (the store
    defaults it)."""
    template: dict[str, Any] = {"resourceClaimTemplate": {"name": channel or f"{name}-ch"}}
    if mode:
        template["allocationMode"] = mode
    spec: dict[str, Any] = {"channel": template}
    if num_nodes:
        spec = {"numNodes": num_nodes, **spec}
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}
