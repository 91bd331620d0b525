"""Admission checks of GPU memory shares: the claims a ``memory`` share policy refuses up front.

kube-scheduler's allocator (:mod:`kgpu.dra.capacity`, ``roundUpRange``) quietly rounds a
``memory`` request below the policy's minimum up to the minimum, and one off the step grid up to
the next step; only a request above the device's capacity is unsatisfiable. A pod that asked for
``20.5Gi`` would so get ``21Gi`` of an enforced share, and one that asked ``512Mi`` would get
``1Gi``, without being told. kgpu refuses such claims where Kubernetes lets a cluster refuse
objects: at admission. The chart renders a ValidatingAdmissionPolicy
(``templates/dra-share-admission-policy.yaml``) whose CEL is equivalent to :func:`share_problems`
(tests/deploy/test_share_admission_policy.py evaluates both on one table); ``kgpu sim`` models
that policy and ``kgpu validate --consumable-shares memory`` runs this module.

Only requests of the DeviceClasses that select whole GPUs (:data:`SHARED_CLASSES`, the classes
of :mod:`kgpu.dra.classes` whose devices a share policy publishes for sharing) are checked, in
every served shape: ``exactly`` (resource.k8s.io/v1, v1beta2), the request itself (v1beta1) and
``firstAvailable`` subrequests. The largest shared GPU's memory is known to tools that read a
cluster (``kgpu plan``); the API server's policy does not know it, and a request above it is
left to the allocator, whose reason says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kgpu.dra.shares import MEMORY, MIB, SharePolicy
from kgpu.errors import FieldProblem
from kgpu.quantity import QuantityError, parse_quantity

#: The DeviceClasses whose devices are whole GPUs (kgpu.dra.classes ``gpu.nvidia.com``: type
#: ``gpu``); ``mig.nvidia.com`` devices are never shared.
SHARED_CLASSES: tuple[str, ...] = ("gpu.nvidia.com",)
GIB = 2**30
INT64_MAX = 2**63 - 1

#: Problem kinds, in the order the admission policy's validations check them.
BELOW_MINIMUM = "minimum"
OFF_STEP = "step"
ABOVE_GPU = "gpu"
UNPARSABLE = "quantity"


@dataclass(frozen=True)
class ShareRequest:
    """One request or subrequest that asks a shared GPU for memory."""

    name: str  # the result name: "gpu", or "gpu/small" for a subrequest
    path: str  # field path of its memory amount
    memory: object  # as written


@dataclass(frozen=True)
class ShareProblem:
    kind: str  # BELOW_MINIMUM | OFF_STEP | ABOVE_GPU | UNPARSABLE
    request: str
    path: str
    message: str

    def field_problem(self) -> FieldProblem:
        return FieldProblem(self.message, self.path)


def size_text(n: int) -> str:
    """Bytes on a MiB grid as the policy's messages write them: ``20Gi``, ``1536Mi``."""
    return f"{n // GIB}Gi" if n % GIB == 0 else f"{n // MIB}Mi"


def grid_text(policy: SharePolicy) -> str:
    lo, step = policy.memory_minimum_mib * MIB, policy.memory_step_mib * MIB
    return f"{size_text(lo)}, then steps of {size_text(step)}"


def claim_spec(obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    """The ResourceClaimSpec of a claim or template, and its path."""
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    if obj.get("kind") == "ResourceClaimTemplate":
        inner = spec.get("spec")
        return (inner if isinstance(inner, Mapping) else {}), "spec.spec"
    return spec, "spec"


def _memory_of(entry: Mapping[str, Any]) -> tuple[bool, object]:
    if entry.get("deviceClassName") not in SHARED_CLASSES:
        return False, None
    capacity = entry.get("capacity")
    requests = capacity.get("requests") if isinstance(capacity, Mapping) else None
    if not isinstance(requests, Mapping) or "memory" not in requests:
        return False, None
    return True, requests["memory"]


def share_requests(obj: Mapping[str, Any]) -> list[ShareRequest]:
    """Every request of ``obj`` (ResourceClaim or ResourceClaimTemplate, any served version)
    that asks a whole GPU for an amount of memory."""
    spec, at = claim_spec(obj)
    devices = spec.get("devices")
    requests = devices.get("requests") if isinstance(devices, Mapping) else None
    out: list[ShareRequest] = []
    for i, req in enumerate(requests if isinstance(requests, list) else []):
        if not isinstance(req, Mapping):
            continue
        name = str(req.get("name", i))
        base = f"{at}.devices.requests[{i}]"
        subs = req.get("firstAvailable")
        if isinstance(subs, list) and subs:
            for j, sub in enumerate(subs):
                if isinstance(sub, Mapping):
                    asks, memory = _memory_of(sub)
                    if asks:
                        out.append(
                            ShareRequest(
                                f"{name}/{sub.get('name', j)}",
                                f"{base}.firstAvailable[{j}].capacity.requests.memory",
                                memory,
                            )
                        )
            continue
        exactly = req.get("exactly")
        entry, where = (exactly, f"{base}.exactly") if isinstance(exactly, Mapping) else (req, base)
        asks, memory = _memory_of(entry)
        if asks:
            out.append(ShareRequest(name, f"{where}.capacity.requests.memory", memory))
    return out


def _check(
    req: ShareRequest, policy: SharePolicy, largest_memory_mib: int | None
) -> ShareProblem | None:
    raw = str(req.memory)
    try:
        value = parse_quantity(req.memory)
    except QuantityError as exc:
        return ShareProblem(UNPARSABLE, req.name, req.path, str(exc))
    lo, step = policy.memory_minimum_mib * MIB, policy.memory_step_mib * MIB
    head = f"request {req.name}: memory {raw}"
    if value < lo:
        return ShareProblem(
            BELOW_MINIMUM,
            req.name,
            req.path,
            f"{head} is below the shared GPU minimum {size_text(lo)} (the scheduler would "
            f"round it up): ask {size_text(lo)} or more",
        )
    whole = value == value.to_integral_value() and value <= INT64_MAX
    if not whole or (int(value) - lo) % step:
        if whole:
            below = lo + (int(value) - lo) // step * step
            fix = f"ask {size_text(below)} or {size_text(below + step)}"
        else:
            fix = "ask a whole number of bytes on it"
        return ShareProblem(
            OFF_STEP,
            req.name,
            req.path,
            f"{head} is not on the shared GPU grid ({grid_text(policy)}; the scheduler would "
            f"round it up): {fix}",
        )
    if largest_memory_mib is not None and value > Decimal(largest_memory_mib) * MIB:
        top = largest_memory_mib * MIB
        return ShareProblem(
            ABOVE_GPU,
            req.name,
            req.path,
            f"{head} is more than the largest shared GPU offers ({size_text(top)}): ask at "
            f"most {size_text(top)}",
        )
    return None


def share_problems(
    obj: Mapping[str, Any], policy: SharePolicy, largest_memory_mib: int | None = None
) -> list[ShareProblem]:
    """What a ``memory`` share policy refuses in ``obj``, one problem per request at most
    (nothing when the policy is not ``memory``): below the minimum, off the step grid, above
    ``largest_memory_mib`` (the largest memory a shared GPU publishes, when known), or not a
    quantity (the API server's wording)."""
    if policy.mode != MEMORY:
        return []
    out = []
    for req in share_requests(obj):
        problem = _check(req, policy, largest_memory_mib)
        if problem is not None:
            out.append(problem)
    return out


def admission_message(problems: list[ShareProblem]) -> str | None:
    """The message the chart's admission policy denies with: its validations run in order
    (below the minimum, then off the step) and the API server reports the first that fails,
    with the first request it names. None when the policy admits (it does not see problems it
    cannot know: GPU sizes, or a quantity the API server refuses before admission)."""
    for kind in (BELOW_MINIMUM, OFF_STEP):
        for problem in problems:
            if problem.kind == kind:
                return problem.message
    return None


__all__ = [
    "ABOVE_GPU",
    "BELOW_MINIMUM",
    "OFF_STEP",
    "SHARED_CLASSES",
    "UNPARSABLE",
    "ShareProblem",
    "ShareRequest",
    "admission_message",
    "claim_spec",
    "share_problems",
    "share_requests",
    "size_text",
]
