"""Which pods cluster-autoscaler may move off a node it wants to remove, and which block it.

cluster-autoscaler's drain rules (``utils/drain`` / ``simulator/drainability``): mirror pods and
pods deleted longer ago than their grace period plus 30 s are skipped; DaemonSet pods (also
those annotated ``cluster-autoscaler.kubernetes.io/daemonset-pod: "true"``) are left behind;
finished pods move freely; a pod annotated
``cluster-autoscaler.kubernetes.io/safe-to-evict: "true"`` moves whatever else it is. Otherwise a
pod blocks the node when it has no controller ("not replicated"), lives in ``kube-system``
(with ``skip-nodes-with-system-pods``), uses local storage (``hostPath`` or a non-memory
``emptyDir`` not listed in ``safe-to-evict-local-volumes``, with
``skip-nodes-with-local-storage``), or is annotated ``safe-to-evict: "false"`` — each with
cluster-autoscaler's message. Not reproduced: PodDisruptionBudgets (a kube-system pod with a
PDB, and PDBs' disruption budgets in general), custom-controller checks, and
``blocking-system-pod-distruption-timeout``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
SAFE_TO_EVICT_LOCAL_VOLUMES = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
MIRROR = "kubernetes.io/config.mirror"
DAEMONSET_POD = "cluster-autoscaler.kubernetes.io/daemonset-pod"
#: How long past its grace period a terminating pod still counts (PodLongTerminatingExtraThreshold).
LONG_TERMINATING_EXTRA = 30.0
DEFAULT_GRACE_PERIOD = 30.0


@dataclass(frozen=True)
class Blocking:
    """Why a pod blocks its node's removal: ``reason`` is cluster-autoscaler's
    BlockingPodReason name, ``message`` its error text."""

    pod: str
    reason: str
    message: str


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("metadata") or {}


def controller_of(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for ref in _meta(pod).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    owner = controller_of(pod)
    if owner is not None and owner.get("kind") == "DaemonSet":
        return True
    return (_meta(pod).get("annotations") or {}).get(DAEMONSET_POD) == "true"


def is_long_terminating(pod: Mapping[str, Any], now: float) -> bool:
    """Deleted longer ago than its grace period plus 30 s. ``metadata.deletionTimestamp`` is
    read as seconds on the caller's clock."""
    deleted = _meta(pod).get("deletionTimestamp")
    if not isinstance(deleted, (int, float)) or isinstance(deleted, bool):
        return False
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    grace = DEFAULT_GRACE_PERIOD if grace is None else float(grace)
    return deleted + grace + LONG_TERMINATING_EXTRA < now


def is_mirror_pod(pod: Mapping[str, Any]) -> bool:
    return MIRROR in (_meta(pod).get("annotations") or {})


def is_terminal(pod: Mapping[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
    if policy == "Never" and phase in ("Succeeded", "Failed"):
        return True
    if policy == "OnFailure" and phase == "Succeeded":
        return True
    return phase == "Failed"


def has_blocking_local_storage(pod: Mapping[str, Any]) -> bool:
    allowed = {
        v.strip()
        for v in str(
            (_meta(pod).get("annotations") or {}).get(SAFE_TO_EVICT_LOCAL_VOLUMES, "")
        ).split(",")
        if v.strip()
    }
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        empty_dir = volume.get("emptyDir")
        local = volume.get("hostPath") is not None or (
            empty_dir is not None and (empty_dir or {}).get("medium") != "Memory"
        )
        if local and volume.get("name") not in allowed:
            return True
    return False


def pods_to_move(
    pods: Sequence[Mapping[str, Any]],
    skip_nodes_with_system_pods: bool = True,
    skip_nodes_with_local_storage: bool = True,
    now: float = 0.0,
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]], Blocking | None]:
    """(pods to evict, DaemonSet pods left behind, the first blocking pod or None)."""
    move: list[Mapping[str, Any]] = []
    daemonset: list[Mapping[str, Any]] = []
    for pod in pods:
        if is_mirror_pod(pod) or is_long_terminating(pod, now):
            continue
        if is_daemonset_pod(pod):
            daemonset.append(pod)
            continue
        meta = _meta(pod)
        name = str(meta.get("name", ""))
        namespace = str(meta.get("namespace") or "default")
        annotation = (meta.get("annotations") or {}).get(SAFE_TO_EVICT)
        if annotation != "true" and not is_terminal(pod):
            if controller_of(pod) is None:
                return (
                    [],
                    [],
                    Blocking(
                        f"{namespace}/{name}",
                        "NotReplicated",
                        f"{namespace}/{name} is not replicated",
                    ),
                )
            if namespace == "kube-system" and skip_nodes_with_system_pods:
                return (
                    [],
                    [],
                    Blocking(
                        f"{namespace}/{name}",
                        "UnmovableKubeSystemPod",
                        "non-daemonset, non-mirrored, non-pdb-assigned kube-system pod present: "
                        + name,
                    ),
                )
            if skip_nodes_with_local_storage and has_blocking_local_storage(pod):
                return (
                    [],
                    [],
                    Blocking(
                        f"{namespace}/{name}",
                        "LocalStorageRequested",
                        f"pod with local storage present: {name}",
                    ),
                )
            if annotation == "false":
                return (
                    [],
                    [],
                    Blocking(
                        f"{namespace}/{name}",
                        "NotSafeToEvictAnnotation",
                        f"pod annotated as not safe to evict present: {name}",
                    ),
                )
        move.append(pod)
    return move, daemonset, None
