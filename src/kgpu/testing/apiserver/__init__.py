"""A Kubernetes API server stand-in for tests (see :mod:`.server` for what it reproduces)."""

from kgpu.testing.apiserver.kinds import DEFAULT_RELEASE, KINDS, RELEASES, Kind
from kgpu.testing.apiserver.server import ApiError, FakeApiServer, Recorded

__all__ = ["DEFAULT_RELEASE", "KINDS", "RELEASES", "ApiError", "FakeApiServer", "Kind", "Recorded"]
