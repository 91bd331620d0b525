"""Read a cluster's scheduling state, list-only, for ``kgpu sim --from-cluster``.

Every read is a paged ``list`` through :class:`~kgpu.cluster.kube.KubeStore` (``limit`` /
``continue``, ``resource.k8s.io`` in whatever version the server speaks), never a ``get``,
``watch`` or write, so the read-only ClusterRole in the chart (``fromCluster.rbac``) needs the
``list`` verb alone. A kind the server does not serve (no KEDA, no ComputeDomain CRD, DRA
switched off) reads as none of it; a refusal (401/403) or no answer at all is a
:class:`ReadError` naming what was being read and what to do. With namespaces given, the
namespaced kinds are listed in each of those only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kgpu.cluster.kube import KubeApiError, KubeStore
from kgpu.errors import KgpuError
from kgpu.store import NotFound, Obj, StoreError

#: (field of the snapshot, apiVersion, kind, namespaced, optional): what is read, in order.
#: ``optional`` kinds may be absent from a cluster (a CRD not installed, DRA off).
READS: tuple[tuple[str, str, str, bool, bool], ...] = (
    ("nodes", "v1", "Node", False, False),
    ("pods", "v1", "Pod", True, False),
    ("priority_classes", "scheduling.k8s.io/v1", "PriorityClass", False, True),
    ("device_classes", "resource.k8s.io/v1", "DeviceClass", False, True),
    ("resource_slices", "resource.k8s.io/v1", "ResourceSlice", False, True),
    ("resource_claims", "resource.k8s.io/v1", "ResourceClaim", True, True),
    ("claim_templates", "resource.k8s.io/v1", "ResourceClaimTemplate", True, True),
    ("config_maps", "v1", "ConfigMap", True, True),
    ("compute_domains", "resource.nvidia.com/v1beta1", "ComputeDomain", True, True),
    ("scaled_objects", "keda.sh/v1alpha1", "ScaledObject", True, True),
    ("hpas", "autoscaling/v2", "HorizontalPodAutoscaler", True, True),
)


class ReadError(KgpuError):
    """The cluster could not be read: unreachable, unauthorised, or refusing a list."""


@dataclass(frozen=True)
class Snapshot:
    """The lists read, by field name (see :data:`READS`), and the server's version."""

    lists: dict[str, list[Obj]]
    server_version: str
    host: str
    missing: tuple[str, ...] = ()  # optional kinds the server does not serve


def _not_served(exc: StoreError) -> bool:
    return isinstance(exc, NotFound) or (isinstance(exc, KubeApiError) and exc.code == 404)


def _why(exc: StoreError, host: str, what: str) -> str:
    code = exc.code if isinstance(exc, KubeApiError) else 0
    if code == 0 and isinstance(exc, KubeApiError):
        return (
            f"cannot reach the API server at {host} while listing {what}: {exc}; check "
            "--kubeconfig (or $KUBECONFIG) and that the cluster is up"
        )
    if code == 401:
        return (
            f"the API server at {host} did not accept the credentials (401 Unauthorized) "
            f"listing {what}: refresh the kubeconfig's token or certificate"
        )
    if code == 403:
        return (
            f"the API server at {host} refused to list {what} (403 Forbidden): {exc}; bind "
            "the chart's read-only ClusterRole (fromCluster.rbac.create) to this user, or "
            "one that can list it"
        )
    return f"listing {what} from {host} failed: {exc}"


def read_cluster(
    store: KubeStore,
    namespaces: Sequence[str] = (),
    *,
    progress: Callable[[str, int], None] | None = None,
) -> Snapshot:
    """Every list of :data:`READS` from ``store``; :class:`ReadError` when the server refuses
    or cannot be reached."""
    host = store.host
    try:
        version = store.server_version()
    except StoreError as exc:
        raise ReadError(_why(exc, host, "the server version")) from exc
    lists: dict[str, list[Obj]] = {}
    missing: list[str] = []
    for field, api_version, kind, namespaced, optional in READS:
        items: list[Obj] = []
        scopes: Sequence[str | None] = namespaces if namespaced and namespaces else [None]
        try:
            for ns in scopes:
                items.extend(store.list(api_version, kind, namespace=ns))
        except StoreError as exc:
            if optional and _not_served(exc):
                missing.append(kind)
                items = []
            else:
                raise ReadError(_why(exc, host, f"{kind}s ({api_version})")) from exc
        lists[field] = items
        if progress is not None:
            progress(kind, len(items))
    return Snapshot(lists, version, host, tuple(missing))


__all__ = ["READS", "ReadError", "Snapshot", "read_cluster"]
