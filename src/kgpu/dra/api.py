"""The Kubernetes DRA API version kgpu speaks: ``resource.k8s.io/v1`` (GA since 1.34).

Every module that reads or writes DeviceClasses, ResourceClaims, ResourceClaimTemplates or
ResourceSlices names it through :data:`RESOURCE_API`, so serving another version (negotiated
with an older API server) is one change here, not a search through the tree.
"""

from __future__ import annotations

GROUP = "resource.k8s.io"
VERSION = "v1"
RESOURCE_API = f"{GROUP}/{VERSION}"

__all__ = ["GROUP", "RESOURCE_API", "VERSION"]
