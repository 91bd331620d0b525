"""A Kubernetes API server stand-in for tests (see :mod:`.server` for what it reproduces)."""

from kgpu.testing.apiserver.kinds import DEFAULT_RELEASE, KINDS, RELEASES, Kind
from kgpu.testing.apiserver.kubeconfig import TOKEN, write_kubeconfig
from kgpu.testing.apiserver.server import ApiError, FakeApiServer, Recorded

__all__ = [
    "DEFAULT_RELEASE",
    "KINDS",
    "RELEASES",
    "TOKEN",
    "ApiError",
    "FakeApiServer",
    "Kind",
    "Recorded",
    "write_kubeconfig",
]
