"""The Kubernetes objects a ComputeDomain owns, built from the domain alone.

As upstream: the workload channel ResourceClaimTemplate (in the domain's namespace, under the
name the user chose, class ``compute-domain-default-channel.nvidia.com``, an opaque
``ComputeDomainChannelConfig`` naming the domain), the daemon ResourceClaimTemplate (class
``compute-domain-daemon.nvidia.com``, ``ComputeDomainDaemonConfig``) and a DaemonSet that runs
one IMEX daemon on every node labelled for the domain. Every object carries the
``resource.nvidia.com/computeDomain=<uid>`` label, which is how cleanup finds them.
"""

from __future__ import annotations

from typing import Any

from kgpu.computedomain.api import (
    API_VERSION,
    CHANNEL_CLASS,
    CHANNEL_CONFIG_KIND,
    DAEMON_CLASS,
    DAEMON_CONFIG_KIND,
    DOMAIN_LABEL,
    DRIVER,
    TARGET_DAEMON,
    TARGET_LABEL,
    TARGET_WORKLOAD,
    ComputeDomain,
    node_label,
)
from kgpu.dra.api import RESOURCE_API

#: Where the driver's own objects (daemon claim templates, DaemonSets) live, as upstream's chart.
DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"
DAEMON_IMAGE = "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.0"
APP_LABEL = "app.kubernetes.io/name"
APP_NAME = "kgpu-compute-domain"
DAEMON_CONTAINER = "compute-domain-daemon"
DAEMON_CLAIM = "compute-domain-daemon"


def _short(uid: str) -> str:
    return uid.replace("-", "")[-8:] or "0"


def daemon_object_name(domain: ComputeDomain) -> str:
    """Name of the domain's DaemonSet and daemon claim template in the driver namespace.

    Name and uid suffix: two domains of one name in different namespaces never collide.
    """
    return f"{domain.name[:200]}-imex-{_short(domain.uid)}"


def _labels(domain: ComputeDomain, target: str | None = None) -> dict[str, str]:
    labels = {DOMAIN_LABEL: domain.uid, APP_LABEL: APP_NAME}
    if target:
        labels[TARGET_LABEL] = target
    return labels


def _template(
    *,
    name: str,
    namespace: str,
    labels: dict[str, str],
    request: str,
    device_class: str,
    parameters: dict[str, Any],
) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
                    "config": [
                        {
                            "requests": [request],
                            "opaque": {"driver": DRIVER, "parameters": parameters},
                        }
                    ],
                }
            }
        },
    }


def channel_claim_template(domain: ComputeDomain) -> dict[str, Any]:
    """The template workload pods reference (``spec.channel.resourceClaimTemplate.name``)."""
    params: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": CHANNEL_CONFIG_KIND,
        "domainID": domain.uid,
    }
    if domain.spec.allocation_mode != "Single":
        params["allocationMode"] = domain.spec.allocation_mode
    return _template(
        name=domain.spec.channel_template,
        namespace=domain.namespace,
        labels=_labels(domain, TARGET_WORKLOAD),
        request="channel",
        device_class=CHANNEL_CLASS,
        parameters=params,
    )


def daemon_claim_template(
    domain: ComputeDomain, namespace: str = DRIVER_NAMESPACE
) -> dict[str, Any]:
    return _template(
        name=daemon_object_name(domain),
        namespace=namespace,
        labels=_labels(domain, TARGET_DAEMON),
        request="daemon",
        device_class=DAEMON_CLASS,
        parameters={"apiVersion": API_VERSION, "kind": DAEMON_CONFIG_KIND, "domainID": domain.uid},
    )


def daemon_set(domain: ComputeDomain, namespace: str = DRIVER_NAMESPACE) -> dict[str, Any]:
    """One IMEX daemon per node carrying the domain's node label; it tolerates every taint
    (as upstream) because the workload already chose the node."""
    selector = {DOMAIN_LABEL: domain.uid}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": daemon_object_name(domain),
            "namespace": namespace,
            "labels": _labels(domain),
        },
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": {**selector, APP_LABEL: APP_NAME}},
                "spec": {
                    "nodeSelector": {node_label(domain.uid): "true"},
                    "containers": [
                        {
                            "name": DAEMON_CONTAINER,
                            "image": DAEMON_IMAGE,
                            "command": ["nvidia-imex", "-c", "/etc/nvidia-imex/config.cfg"],
                            "resources": {"claims": [{"name": DAEMON_CLAIM}]},
                        }
                    ],
                    "resourceClaims": [
                        {
                            "name": DAEMON_CLAIM,
                            "resourceClaimTemplateName": daemon_object_name(domain),
                        }
                    ],
                    "tolerations": [
                        {"operator": "Exists", "effect": "NoSchedule"},
                        {"operator": "Exists", "effect": "NoExecute"},
                        {"operator": "Exists", "effect": "PreferNoSchedule"},
                    ],
                },
            },
        },
    }
