"""Components that join a shell (the kubelet's gRPC APIs, the exporter, the API server) to the
core for one role; the agent and the simulator run them.

Modules: ``component`` (the :class:`Component` protocol), ``dra`` (:class:`DraComponent`, the
kubelet DRA plugin with its drivers), ``gpu`` (the ``gpu.nvidia.com`` driver),
``computedomain`` (the ``compute-domain.nvidia.com`` driver), ``publish`` (a node's
ResourceSlices to the API), ``mps`` (MPS control daemons), ``metrics`` (the exporter as a
component), ``attribution`` (device -> pod, from PodResources and DRA checkpoints).
"""

from kgpu.drivers.component import Component
from kgpu.drivers.computedomain import ComputeDomainHandler
from kgpu.drivers.dra import DraComponent
from kgpu.drivers.gpu import GpuHandler
from kgpu.drivers.metrics import MetricsComponent
from kgpu.drivers.mps import MpsManager
from kgpu.drivers.publish import publish_slices, unpublish_slices

__all__ = [
    "Component",
    "ComputeDomainHandler",
    "DraComponent",
    "GpuHandler",
    "MetricsComponent",
    "MpsManager",
    "publish_slices",
    "unpublish_slices",
]
