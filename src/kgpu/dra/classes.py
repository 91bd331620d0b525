"""The DeviceClasses NVIDIA's DRA driver installs, with upstream's names and CEL selectors, so
claims written for the upstream driver select the same devices here.

``gpu.nvidia.com`` and ``mig.nvidia.com`` select devices of driver ``gpu.nvidia.com`` by their
``type`` attribute; ``compute-domain-daemon.nvidia.com`` and
``compute-domain-default-channel.nvidia.com`` select the ComputeDomain driver's
(``compute-domain.nvidia.com``) daemon and channel devices. Upstream's channel class
selects only ``channel-0`` (``id == 0``), which allows one ComputeDomain per node; kgpu's node
side numbers IMEX channels per domain at prepare time, so its class selects any free channel
slot and several domains can share a node. Claims naming the class work unchanged. Every
selector tests ``device.driver`` first, so a device of another driver is rejected before its
attributes are read (a missing attribute would otherwise be a CEL runtime error).

``gpu.nvidia.com`` carries ``extendedResourceName: nvidia.com/gpu`` (a DeviceClass field from
Kubernetes 1.34, used when the ``DRAExtendedResource`` feature is on): a pod that asks for
``nvidia.com/gpu: 1`` on a node without a device plugin gets a full GPU through a claim of this
class. As upstream's chart, only the ``resource.k8s.io/v1`` class carries it; classes written
for v1beta1/v1beta2 clusters do not.
"""

from __future__ import annotations

from typing import Any

from kgpu.dra.api import RESOURCE_API

GPU_DRIVER = "gpu.nvidia.com"
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"

#: class name -> the extended resource its devices can satisfy (resource.k8s.io/v1 only)
EXTENDED_RESOURCES: dict[str, str] = {"gpu.nvidia.com": "nvidia.com/gpu"}

#: class name -> CEL selector
SELECTORS: dict[str, str] = {
    "gpu.nvidia.com": (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    ),
    "mig.nvidia.com": (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"
    ),
    "compute-domain-daemon.nvidia.com": (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
    ),
    "compute-domain-default-channel.nvidia.com": (
        "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel'"
    ),
}


def device_class(
    name: str,
    expression: str,
    *,
    api_version: str = RESOURCE_API,
    extended_resource_name: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource_name is not None and api_version == RESOURCE_API:
        spec["extendedResourceName"] = extended_resource_name
    return {
        "apiVersion": api_version,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def device_classes(
    *, gpus: bool = True, compute_domains: bool = True, api_version: str = RESOURCE_API
) -> list[dict[str, Any]]:
    """What a DRA driver install creates (Helm values ``resources.gpus.enabled`` and
    ``resources.computeDomains.enabled``), for a cluster serving ``api_version``."""
    names = []
    if gpus:
        names += ["gpu.nvidia.com", "mig.nvidia.com"]
    if compute_domains:
        names += ["compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com"]
    return [
        device_class(
            n,
            SELECTORS[n],
            api_version=api_version,
            extended_resource_name=EXTENDED_RESOURCES.get(n),
        )
        for n in names
    ]
