"""Consumable GPU shares (KEP-5075 consumable capacity) for ``gpu.nvidia.com`` whole GPUs.

With shares on, a whole GPU is published with ``allowMultipleAllocations: true``, so several
claims can be allocated the same GPU, each consuming part of its capacities; the scheduler's
allocator keeps their sum within the GPU (:mod:`kgpu.dra.capacity`) and writes each result's
``shareID`` and ``consumedCapacity``. The modes and their names are NVIDIA's driver's
(``--consumable-shares`` / the chart's ``consumableShares``, behind its ``ConsumableShares``
gate), so a values file written for it means the same here:

* ``disabled``: GPUs are exclusive (the default, as upstream).
* ``memory``: ``memory`` is consumable with a ``validRange`` policy. A claim that names no
  amount consumes the whole GPU (``default`` is the maximum, as upstream), so a claim written
  for an exclusive GPU keeps one. kgpu differs from upstream in two ways: minimum and step are
  configurable (default 1 GiB each, upstream's are 1 MiB: a per-MiB grid lets a 20 GiB claim and
  a 20 GiB + 1 byte claim both "fit" while neither is what the user meant), and kgpu adds a
  ``computeShares`` capacity (100 per GPU, default 0) that a claim may ask for to get a minimum
  share of the GPU's streaming multiprocessors (its MPS active-thread percentage); a claim that
  asks none gets no guarantee and no cap. Upstream refuses MPS with consumable shares; kgpu
  enforces exactly these shares through the GPU's MPS daemon (:mod:`kgpu.drivers.shares`).
* ``unlimited``: ``memory`` consumable with default 0: any number of claims share the GPU,
  time-sliced, nothing enforced (upstream's meaning).
* ``<N>`` (a positive integer): a ``shares`` capacity of N, each claim consuming 1 by default,
  and ``memory`` consumable with default 0: the DRA counterpart of the device plugin's
  time-slicing ``replicas: N`` (upstream's meaning; nothing enforced).

``memory``'s published value is the GPU's memory rounded down to the policy's grid
(``minimum + k * step``), since the API server requires the range's maximum and the default to
lie on it. Only whole GPUs outside MIG mode are shared: MIG devices stay exclusive (a MIG device
is already an enforced share) and dynamic MIG cannot be combined with shares (the partitionable
full GPU consumes every counter of its GPU, which a share must not).

The capacity ``shares`` is upstream's name. ``computeShares`` is kgpu's; a DeviceClass or
claim that does not name it is unaffected by it (an unrequested capacity consumes its
``default``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.errors import FieldError, FieldProblem
from kgpu.quantity import format_binary

Obj = dict[str, Any]
MIB = 2**20

DISABLED = "disabled"
MEMORY = "memory"
UNLIMITED = "unlimited"
SHARES = "shares"  # an integer mode: N shares per GPU
MODES = (DISABLED, MEMORY, UNLIMITED)
#: kgpu's compute capacity of a shared GPU (an MPS active-thread percentage).
COMPUTE_SHARES = "computeShares"
COMPUTE_SHARES_TOTAL = 100
#: The API server's bound on one device's capacities (``maxCapacitiesPerDevice`` is 32 too).
MAX_SHARE_COUNT = 1024


@dataclass(frozen=True)
class SharePolicy:
    """How a node publishes its whole GPUs (``mode`` one of :data:`MODES` or :data:`SHARES`)."""

    mode: str = DISABLED
    count: int = 0  # the N of an integer mode
    memory_minimum_mib: int = 1024
    memory_step_mib: int = 1024

    @property
    def enabled(self) -> bool:
        return self.mode != DISABLED

    @property
    def enforced(self) -> bool:
        """Whether kgpu enforces each share's memory (``memory`` mode, through MPS)."""
        return self.mode == MEMORY

    def describe(self) -> str:
        if self.mode == SHARES:
            return f"{self.count} shares per GPU"
        if self.mode == MEMORY:
            return (
                f"memory shares (minimum {self.memory_minimum_mib} MiB, step "
                f"{self.memory_step_mib} MiB)"
            )
        return self.mode


DISABLED_POLICY = SharePolicy()


def parse_share_policy(
    mode: object,
    *,
    memory_minimum_mib: object = 1024,
    memory_step_mib: object = 1024,
    path: str = "consumableShares",
) -> SharePolicy:
    """A :class:`SharePolicy` from the flag or chart value; :class:`FieldError` naming ``path``
    and the accepted values otherwise."""
    text = str(mode).strip() if mode is not None else DISABLED
    text = text or DISABLED
    problems: list[FieldProblem] = []
    count = 0
    if text not in MODES:
        if text.isdigit() and 0 < int(text) <= MAX_SHARE_COUNT:
            count = int(text)
        else:
            problems.append(
                FieldProblem(
                    f"{text!r} is not a consumable-shares mode: use disabled, memory, unlimited "
                    f"or a share count from 1 to {MAX_SHARE_COUNT}",
                    path,
                )
            )
    sizes: dict[str, int] = {}
    for name, value in (
        ("memoryMinimumMiB", memory_minimum_mib),
        ("memoryStepMiB", memory_step_mib),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(
                FieldProblem(f"{value!r} is not a positive number of MiB", f"{path}.{name}")
            )
        else:
            sizes[name] = value
    if problems:
        raise FieldError(problems)
    return SharePolicy(
        mode=SHARES if count else text,
        count=count,
        memory_minimum_mib=sizes["memoryMinimumMiB"],
        memory_step_mib=sizes["memoryStepMiB"],
    )


def share_memory_mib(policy: SharePolicy, memory_mib: int) -> int:
    """The ``memory`` a shared GPU publishes: on the policy's grid, at most the GPU's memory
    (0 when the GPU is smaller than the minimum: it is then not shared)."""
    if policy.mode != MEMORY:
        return memory_mib  # 1 MiB grid, as upstream
    lo, step = policy.memory_minimum_mib, policy.memory_step_mib
    if memory_mib < lo:
        return 0
    return lo + (memory_mib - lo) // step * step


def _q(mib: int) -> str:
    return format_binary(mib * MIB)


def shared_capacity(policy: SharePolicy, memory_mib: int) -> dict[str, Obj] | None:
    """The capacities of a whole GPU with ``memory_mib`` under ``policy``; None when the GPU is
    not shared (shares off, or smaller than the memory minimum)."""
    if not policy.enabled:
        return None
    top = share_memory_mib(policy, memory_mib)
    if top <= 0:
        return None
    if policy.mode == MEMORY:
        lo, step = policy.memory_minimum_mib, policy.memory_step_mib
        return {
            COMPUTE_SHARES: {
                "value": str(COMPUTE_SHARES_TOTAL),
                "requestPolicy": {
                    "default": "0",
                    "validRange": {"min": "0", "max": str(COMPUTE_SHARES_TOTAL), "step": "1"},
                },
            },
            "memory": {
                "value": _q(top),
                "requestPolicy": {
                    "default": _q(top),
                    "validRange": {"min": _q(lo), "max": _q(top), "step": _q(step)},
                },
            },
        }
    memory: Obj = {
        "value": _q(top),
        "requestPolicy": {
            "default": "0",
            "validRange": {"min": "0", "max": _q(top), "step": _q(1)},
        },
    }
    out: dict[str, Obj] = {"memory": memory}
    if policy.mode == SHARES:
        out[SHARES] = {
            "value": str(policy.count),
            "requestPolicy": {
                "default": "1",
                "validRange": {"min": "1", "max": str(policy.count), "step": "1"},
            },
        }
    return out


def share_device(device: Mapping[str, Any], memory_mib: int, policy: SharePolicy) -> Obj:
    """``device`` (a whole GPU as :func:`kgpu.dra.devices.gpu_device` writes it) published for
    sharing under ``policy``; unchanged when the policy does not share it."""
    caps = shared_capacity(policy, memory_mib)
    if caps is None:
        return dict(device)
    return {**device, "allowMultipleAllocations": True, "capacity": caps}


def is_shared(device: Mapping[str, Any]) -> bool:
    return bool(device.get("allowMultipleAllocations"))


@dataclass(frozen=True)
class ShareLimits:
    """What one allocated share of a GPU may use: the MPS client limits that enforce it."""

    memory_mib: int  # pinned device memory limit
    active_thread_percentage: int  # 100 when the claim asked for no compute share


def share_limits(consumed: Mapping[str, Any] | None, gpu_memory_mib: int) -> ShareLimits:
    """The limits of one result's ``consumedCapacity`` (bytes of ``memory``, ``computeShares``
    out of 100); an absent amount is the whole GPU (memory) or no cap (compute)."""
    from kgpu.quantity import parse_quantity

    consumed = consumed or {}
    memory = consumed.get("memory")
    memory_mib = gpu_memory_mib
    if memory is not None:
        memory_mib = max(1, int(parse_quantity(str(memory)) // MIB))
    compute = consumed.get(COMPUTE_SHARES)
    pct = COMPUTE_SHARES_TOTAL
    if compute is not None:
        asked = int(parse_quantity(str(compute)))
        pct = asked if 0 < asked <= COMPUTE_SHARES_TOTAL else COMPUTE_SHARES_TOTAL
    return ShareLimits(memory_mib=memory_mib, active_thread_percentage=pct)
