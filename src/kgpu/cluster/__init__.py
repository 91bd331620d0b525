"""A real Kubernetes API server behind kgpu's object-store protocol (:class:`KubeStore`: get,
list, watch, create, update, patch, apply, delete), through the official ``kubernetes``
client's configuration (``pip install 'kgpu[cluster]'``). The protocol itself, and the
in-memory store the simulator and tests use, are :mod:`kgpu.store`'s."""

from kgpu.cluster.kube import KubeApiError, KubeStore
from kgpu.cluster.watch import KubeWatch

__all__ = ["KubeApiError", "KubeStore", "KubeWatch"]
