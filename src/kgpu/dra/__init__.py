"""Dynamic Resource Allocation for GPUs (``resource.k8s.io/v1``, driver ``gpu.nvidia.com``).

Modules: ``api`` (the API version kgpu speaks), ``classes`` (the driver's DeviceClasses),
``slices`` (a machine's devices as ResourceSlices: GPUs, MIG devices, partitionable
placements), ``opaque`` (the driver's GpuConfig/MigDeviceConfig parameters), and, loading the
CEL library (import them from their modules): ``cel`` (device selectors), ``allocator`` (the
structured-parameters allocator with kube-scheduler's semantics), ``checks`` (what the API
server and the driver's webhook refuse).
"""

from kgpu.dra.api import RESOURCE_API
from kgpu.dra.classes import device_class, device_classes
from kgpu.dra.opaque import GpuConfig, MigDeviceConfig, parse_config
from kgpu.dra.slices import resource_slices

__all__ = [
    "RESOURCE_API",
    "GpuConfig",
    "MigDeviceConfig",
    "device_class",
    "device_classes",
    "parse_config",
    "resource_slices",
]
