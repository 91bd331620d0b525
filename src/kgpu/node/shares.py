"""Which MPS server enforces a DRA memory share of a GPU, decided from snapshots (pure).

A GPU shared by memory (consumable capacity, :mod:`kgpu.dra.shares`) is served by one MPS
control daemon (:mod:`kgpu.drivers.shares`). MPS runs one *server* per Linux user on a daemon,
every client process of that user goes through it, and the limits set through the control
interface (``set_device_pinned_mem_limit``, ``set_active_thread_percentage``) are the
server's. So a share is enforced by the server of the user its pods run as:

* the consumers are the pods in the claim's ``status.reservedFor`` (the scheduler reserves the
  claim for each pod before binding it), and in each pod the containers that name the claim
  (``resources.claims`` -> ``spec.resourceClaims[]`` -> the claim, directly or through
  ``status.resourceClaimStatuses`` for a claim made from a template; every container when that
  mapping does not resolve);
* a container's user is its ``securityContext.runAsUser``, else its pod's. An image's ``USER``
  is invisible from here (it is in the image, not the API), so a consumer without a
  ``runAsUser`` is refused rather than guessed, and so are consumers that disagree;
* a Legacy MPS control daemon (the ``nvidia-cuda-mps-control`` interface kgpu drives) runs one
  user's server at a time: a client of another user is queued until every client of the active
  server has exited (``man nvidia-cuda-mps-control``; NVIDIA lists "only one user on a system
  may have an active MPS server" among MPS's limitations). A pod whose CUDA calls would wait
  for its neighbours to end is worse than a refusal, so a share for another user than the one
  a GPU's daemon serves is refused at prepare (:func:`other_user`). (MPS v3's multi-user mode
  lifts this; kgpu does not drive it yet.)
* the shares of one GPU are then served by ONE server, whose limits are the largest share
  prepared on the GPU (:func:`server_limits`, the *ceiling*), set again when a larger share is
  prepared or the largest is unprepared; the server applies them to clients that connect
  afterwards. Each claim's environment carries its own share
  (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``, ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``), which a client
  can only lower below the server's. So a client that keeps kgpu's environment is held to its
  share, one that drops it to the ceiling (its own share when every share of the GPU has one
  size), and no process outside MPS runs (the GPU is ``EXCLUSIVE_PROCESS``).

The daemon's defaults are the policy's smallest share: a server the daemon starts on demand
(a client that connects before kgpu started the server) gets no more than that.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kgpu.node.sharing.mps import daemon_default_commands

#: (namespace, name) -> the Pod object, or None when there is no such pod
PodLookup = Callable[[str, str], Mapping[str, Any] | None]

FIX_UID = (
    "set securityContext.runAsUser in the pod (or each container that uses the claim): an MPS "
    "server serves one Linux user, and kgpu enforces a GPU memory share through the server of "
    "the user the pod runs as"
)


class ShareRefused(Exception):
    """A share cannot be enforced; the message names the claim, the pod and the fix."""


@dataclass(frozen=True)
class Served:
    """One prepared share of a GPU: who it is for, its limits and the MPS server serving it."""

    claim_uid: str
    claim: str  # namespace/name
    uid: int  # the Linux user its pods run as
    memory_mib: int
    active_thread_percentage: int
    pid: int  # the GPU's one MPS server (modelled: a number the model gave it)

    @property
    def limits(self) -> tuple[int, int]:
        return (self.memory_mib, self.active_thread_percentage)


def reserved_pods(claim: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(namespace, name) of the pods in the claim's ``status.reservedFor``."""
    namespace = str((claim.get("metadata") or {}).get("namespace", ""))
    out = []
    for ref in (claim.get("status") or {}).get("reservedFor") or []:
        if not isinstance(ref, Mapping):
            continue
        if ref.get("resource") == "pods" and not ref.get("apiGroup"):
            out.append((namespace, str(ref.get("name", ""))))
    return out


def _claim_entries(pod: Mapping[str, Any], claim_name: str) -> set[str]:
    """Names of the pod's ``spec.resourceClaims`` entries that resolve to ``claim_name``."""
    generated = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if isinstance(s, Mapping)
    }
    out = set()
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(entry, Mapping):
            continue
        name = str(entry.get("name", ""))
        if entry.get("resourceClaimName", generated.get(name)) == claim_name:
            out.add(name)
    return out


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [
        c
        for key in ("initContainers", "containers")
        for c in spec.get(key) or []
        if isinstance(c, Mapping)
    ]


def _run_as_user(context: Any) -> int | None:
    if not isinstance(context, Mapping):
        return None
    value = context.get("runAsUser")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def consumer_uids(pod: Mapping[str, Any], claim_name: str) -> dict[str, int | None]:
    """Container name -> effective ``runAsUser`` (None: unknown) of the pod's containers that
    use ``claim_name`` (every container when none is found naming it)."""
    entries = _claim_entries(pod, claim_name)
    containers = _containers(pod)
    using = [
        c
        for c in containers
        if any(
            isinstance(r, Mapping) and r.get("name") in entries
            for r in (c.get("resources") or {}).get("claims") or []
        )
    ]
    pod_uid = _run_as_user((pod.get("spec") or {}).get("securityContext"))
    out: dict[str, int | None] = {}
    for c in using or containers:
        own = _run_as_user(c.get("securityContext"))
        out[str(c.get("name", ""))] = own if own is not None else pod_uid
    return out


def consumer_uid(claim: Mapping[str, Any], lookup: PodLookup | None) -> tuple[int, str]:
    """The one Linux user the claim's consumer pods run as, and the first pod's
    ``namespace/name``; :class:`ShareRefused` naming claim, pod and fix otherwise."""
    meta = claim.get("metadata") or {}
    label = f"claim {meta.get('namespace')}/{meta.get('name')}"
    pods = reserved_pods(claim)
    if not pods:
        raise ShareRefused(
            f"{label}: its GPU memory share cannot be enforced: status.reservedFor names no pod, "
            "so kgpu cannot tell which user's MPS server to limit; use the claim from a pod"
        )
    if lookup is None:
        raise ShareRefused(
            f"{label}: its GPU memory share cannot be enforced: this agent cannot read pods "
            "(no pod lookup); give the agent read access to pods"
        )
    found: dict[int, str] = {}
    for namespace, name in pods:
        where = f"pod {namespace}/{name}"
        pod = lookup(namespace, name)
        if pod is None:
            raise ShareRefused(
                f"{label}: {where} (status.reservedFor) was not found; its GPU memory share is "
                "enforced per pod user, so the pod must exist when the claim is prepared"
            )
        for container, uid in consumer_uids(pod, str(meta.get("name", ""))).items():
            if uid is None:
                raise ShareRefused(
                    f"{label}: {where}, container {container!r} has no runAsUser: {FIX_UID}"
                )
            found.setdefault(uid, where)
    if len(found) > 1:
        users = ", ".join(f"{uid} ({where})" for uid, where in sorted(found.items()))
        raise ShareRefused(
            f"{label}: its consumers run as several users ({users}); one GPU memory share is "
            "enforced by one MPS server, which serves one user: run them all as one runAsUser"
        )
    uid, where = next(iter(found.items()))
    return uid, where.removeprefix("pod ")


def server_limits(served: Sequence[Served]) -> tuple[int, int] | None:
    """The limits of a GPU's one server: the largest memory and SM share of ``served`` (the
    ceiling a client that drops its environment is held to); None when nothing is served."""
    if not served:
        return None
    return (
        max(s.memory_mib for s in served),
        max(s.active_thread_percentage for s in served),
    )


def other_user(served: Sequence[Served], uid: int, *, claim: str, pod: str, gpu: int) -> None:
    """:class:`ShareRefused` when the GPU's daemon already serves shares of another user than
    ``uid`` (Legacy MPS runs one user's server at a time and queues the rest)."""
    others = sorted({s.uid for s in served if s.uid != uid})
    if not others:
        return
    holder = next(s for s in served if s.uid == others[0])
    raise ShareRefused(
        f"claim {claim}: pod {pod} runs as user {uid}, but the MPS daemon of GPU {gpu} serves "
        f"user {others[0]} (claim {holder.claim}), and an MPS control daemon runs one user's "
        "server at a time: this pod's CUDA calls would wait until every process of that user "
        "on the GPU has exited. Run the pods that share a GPU as one securityContext.runAsUser, "
        "or keep them on different GPUs"
    )


def default_thread_percentage(minimum_mib: int, gpu_memory_mib: int) -> int:
    """The SM share that goes with the smallest memory share (at least 1%)."""
    if gpu_memory_mib <= 0:
        return 100
    return max(1, min(100, math.ceil(100 * minimum_mib / gpu_memory_mib)))


def daemon_commands(minimum_mib: int, gpu_memory_mib: int) -> list[str]:
    """The daemon's defaults: the policy's smallest share, for any server not started here."""
    return daemon_default_commands(
        min(minimum_mib, gpu_memory_mib), default_thread_percentage(minimum_mib, gpu_memory_mib)
    )


def server_commands(pid: int, memory_mib: int, active_thread_percentage: int) -> list[str]:
    """One server's limits (device ordinal 0: the daemon sees its one GPU only)."""
    return [
        f"set_device_pinned_mem_limit {pid} 0 {memory_mib}M",
        f"set_active_thread_percentage {pid} {active_thread_percentage}",
    ]


def client_env(
    pipe_in_container: str, memory_mib: int, active_thread_percentage: int
) -> tuple[str, ...]:
    """The environment of a share's containers: its exact share, which MPS lets a client
    lower below its server's limits (the ceiling) but not raise above them."""
    return (
        f"CUDA_MPS_PIPE_DIRECTORY={pipe_in_container}",
        f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={memory_mib}M",
        f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={active_thread_percentage}",
    )
