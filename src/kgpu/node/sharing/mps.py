"""MPS: one CUDA MPS control daemon per shared GPU runs its clients' kernels side by side, each
client held to a share of the SMs and of pinned device memory.

Device plugin (``sharing.mps``), as NVIDIA/k8s-device-plugin has it:

* refused with ``migStrategy: mixed``, on MIG devices and on a node with any MIG-enabled GPU
  (GFD fails there: "MPS sharing is not supported"); an entry naming a resource the node does
  not advertise is ignored and the GPUs stay unshared, as upstream's are;
* at most 48 clients per GPU from compute capability 7.0 on, 16 before (kgpu's reading of the
  CUDA MPS limit; upstream counts Volta 7.0 among the 16);
* each client gets ``100 // replicas`` percent of the SMs and ``memory / replicas`` of pinned
  memory; ``failRequestsGreaterThanOne`` is on unless the config turns it off;
* containers find the daemon's pipe at ``/mps/<resource>/pipe`` and share ``<mpsRoot>/shm`` as
  ``/dev/shm``. Upstream runs one daemon per resource (pipe ``<mpsRoot>/<resource>/pipe``);
  kgpu runs one per GPU (``<mpsRoot>/<resource>/<gpu index>/pipe``, log beside it) and mounts
  the allocated replica's GPU's pipe at upstream's container path, so images written for
  upstream work unchanged. A client talks to one daemon, so a request for MPS replicas of two
  GPUs is refused even when ``failRequestsGreaterThanOne`` is off. kgpu also sets
  ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``0=<MiB>M``:
  the container sees its one GPU as ordinal 0), which can only lower the daemon's defaults.

DRA (``strategy: MPS`` in a ``GpuConfig`` or ``MigDeviceConfig``), as NVIDIA's DRA driver has it:
``mpsConfig.defaultActiveThreadPercentage`` (0..100), ``defaultPinnedDeviceMemoryLimit`` and
``defaultPerDevicePinnedMemoryLimit`` (keys: a device UUID of the claim or an index into its
devices; quantities rounded down to MiB); one daemon per claim and device set, named
``<claimUID>-<first 5 hex of sha256(uuids)>``, its pipe at ``/tmp/nvidia-mps`` in the container.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING
from typing import TYPE_CHECKING, Any, ClassVar

from kgpu import quantity
from kgpu.config.plugin import DevicePluginConfig, ReplicatedResource, ReplicatedResources
from kgpu.errors import FieldError, FieldProblem, join_path
from kgpu.hardware.model import Gpu, Machine, MigDevice
from kgpu.node.sharing.base import (
    ContainerEdits,
    SharingMode,
    SharingPlan,
    mapping_of,
    reject_unknown,
)

if TYPE_CHECKING:
    from kgpu.node.model import AdvertisedDevice

MPS_MAX_CLIENTS = 48
MPS_MAX_CLIENTS_PRE_VOLTA = 16
MPS_CONTAINER_ROOT = "/mps"
MPS_SHM_CONTAINER_PATH = "/dev/shm"
#: Where a DRA MPS client finds the control daemon's pipe inside the container (upstream's path).
MPS_PIPE_IN_CONTAINER = "/tmp/nvidia-mps"
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable"


def mps_max_clients(compute_capability: tuple[int, int]) -> int:
    """CUDA MPS client limit per device: 48 from Volta (7.0) on, 16 before."""
    return MPS_MAX_CLIENTS if compute_capability >= (7, 0) else MPS_MAX_CLIENTS_PRE_VOLTA


@dataclass(frozen=True)
class MpsLimits:
    """Per-client limits an MPS control daemon enforces for one replica of a GPU.

    Upstream derives both from the replica count: ``100 // replicas`` percent of the SMs and
    ``memory / replicas`` of pinned device memory per client. kgpu runs one control daemon per
    MPS-shared GPU, so ``pipe_directory``/``log_directory`` are that GPU's daemon's host
    directories (``<mpsRoot>/<resource>/<gpu index>/pipe``); ``shm_directory`` is the host
    directory every daemon and client shares as ``/dev/shm`` (``<mpsRoot>/shm``; empty: derived
    from the pipe directory).
    """

    active_thread_percentage: int
    pinned_memory_limit_mib: int
    pipe_directory: str
    log_directory: str
    shm_directory: str = ""


def mps_shm_directory(limits: MpsLimits) -> str:
    """Host directory shared as ``/dev/shm`` by the daemons and their clients: ``<mpsRoot>/shm``."""
    if limits.shm_directory:
        return limits.shm_directory
    # Hand-made limits without it: <root>/<resource...>/[<gpu>/]pipe -> <root>/shm is not
    # recoverable in general; the pipe directory's grandparent is the best guess.
    return f"{limits.pipe_directory.rstrip('/').rsplit('/', 2)[0]}/shm"


def mps_container_pipe(resource: str) -> str:
    """Where clients find the pipe: ``/mps/<resource>/pipe``, upstream's container path."""
    return f"{MPS_CONTAINER_ROOT}/{resource}/pipe"


def daemon_default_commands(pinned_memory_mib: int, active_thread_percentage: int) -> list[str]:
    """The control commands that give a daemon's future servers their per-client limits
    (device ordinal 0: each kgpu daemon sees one GPU; upstream sets the limit by ordinal too,
    limits set by UUID were not applied)."""
    return [
        f"set_default_device_pinned_mem_limit 0 {pinned_memory_mib}M",
        f"set_default_active_thread_percentage {active_thread_percentage}",
    ]


def mps_client_envs(resource: str, limits: MpsLimits) -> dict[str, str]:
    """The environment an MPS client of one GPU gets (its GPU is ordinal 0 in the container)."""
    return {
        "CUDA_MPS_PIPE_DIRECTORY": mps_container_pipe(resource),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(limits.active_thread_percentage),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={limits.pinned_memory_limit_mib}M",
    }


def mps_mounts(resource: str, limits: MpsLimits) -> list[tuple[str, str]]:
    """``(container path, host path)``: the GPU's daemon pipe directory at upstream's container
    path, and the shared shm."""
    return [
        (mps_container_pipe(resource), limits.pipe_directory),
        (MPS_SHM_CONTAINER_PATH, mps_shm_directory(limits)),
    ]


# -- DRA -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MpsConfig:
    """``mpsConfig`` of a DRA ``GpuConfig``/``MigDeviceConfig`` (memory limits in bytes)."""

    default_active_thread_percentage: int | None = None
    default_pinned_device_memory_limit: int | None = None
    default_per_device_pinned_memory_limit: Mapping[str, int] = field(default_factory=dict)


def parse_quantity(value: Any, path: str) -> int:
    """A Kubernetes quantity (``"1Gi"``, ``"500M"``, ``1073741824``) as whole units, rounded up
    like ``resource.Quantity.Value()``. The grammar is :mod:`kgpu.quantity`'s, less floats and
    the sub-unit suffixes ``n`` and ``u``, which these byte counts have never accepted."""
    text = value.strip() if isinstance(value, str) else ""
    if isinstance(value, bool) or not isinstance(value, int | str) or text.endswith(("n", "u")):
        raise FieldError(FieldProblem(f"{value!r} is not a quantity such as '1Gi'", path))
    try:
        amount = quantity.parse_quantity(value)
    except quantity.QuantityError:
        raise FieldError(FieldProblem(f"{value!r} is not a quantity such as '1Gi'", path)) from None
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


def _parse_mps(raw: Any, path: str) -> MpsConfig:
    obj = mapping_of(raw, path)
    reject_unknown(
        obj,
        (
            "defaultActiveThreadPercentage",
            "defaultPinnedDeviceMemoryLimit",
            "defaultPerDevicePinnedMemoryLimit",
        ),
        path,
    )
    percentage = obj.get("defaultActiveThreadPercentage")
    if percentage is not None:
        where = f"{path}.defaultActiveThreadPercentage"
        if isinstance(percentage, bool) or not isinstance(percentage, int):
            raise FieldError(FieldProblem(f"{percentage!r} must be an integer 0..100", where))
        if percentage < 0:
            raise FieldError(FieldProblem("active thread percentage must not be negative", where))
        if percentage > 100:
            raise FieldError(
                FieldProblem("active thread percentage must not be greater than 100", where)
            )
    limit = obj.get("defaultPinnedDeviceMemoryLimit")
    limit_bytes = None
    if limit is not None:
        where = f"{path}.defaultPinnedDeviceMemoryLimit"
        limit_bytes = parse_quantity(limit, where)
        if limit_bytes // 2**20 <= 0:
            raise FieldError(FieldProblem(f"{limit!r} is below 1Mi", where))
    per_device: dict[str, int] = {}
    raw_per_device = obj.get("defaultPerDevicePinnedMemoryLimit")
    if raw_per_device is not None:
        where = f"{path}.defaultPerDevicePinnedMemoryLimit"
        for key, value in mapping_of(raw_per_device, where).items():
            amount = parse_quantity(value, f"{where}.{key}")
            if amount // 2**20 <= 0:
                raise FieldError(FieldProblem(f"{value!r} is below 1Mi", f"{where}.{key}"))
            per_device[str(key)] = amount
    return MpsConfig(percentage, limit_bytes, per_device)


def pinned_memory_limits(mps: MpsConfig, uuids: Sequence[str], path: str) -> dict[str, str]:
    """Per-device pinned memory limits as MPS takes them (``"<MiB>M"``), keyed by UUID.

    The default applies to every device; ``defaultPerDevicePinnedMemoryLimit`` keys are a UUID
    of the claim's devices or an index into them, and override the default (upstream's rule).
    """
    limits: dict[str, str] = {}
    if mps.default_pinned_device_memory_limit is not None:
        for uuid in uuids:
            limits[uuid] = f"{mps.default_pinned_device_memory_limit // 2**20}M"
    for key, amount in mps.default_per_device_pinned_memory_limit.items():
        where = f"{path}.defaultPerDevicePinnedMemoryLimit.{key}"
        if key in uuids:
            uuid = key
        elif key.isdigit() and int(key) < len(uuids):
            uuid = uuids[int(key)]
        else:
            raise FieldError(
                FieldProblem(
                    f"invalid device {key!r}: not a UUID of this claim's devices nor an index "
                    f"below {len(uuids)}",
                    where,
                )
            )
        limits[uuid] = f"{amount // 2**20}M"
    return limits


def mps_daemon_id(claim_uid: str, uuids: Sequence[str]) -> str:
    """Upstream names an MPS control daemon ``<claimUID>-<first 5 hex of sha256(uuids)>``."""
    digest = hashlib.sha256(",".join(uuids).encode()).hexdigest()
    return f"{claim_uid}-{digest[:5]}"


class Mps(SharingMode):
    name = "mps"
    title = "MPS"
    config_key = "mps"
    precedence = 0
    dra_strategy = "MPS"
    dra_config_key = "mpsConfig"
    dra_kinds: ClassVar[frozenset[str]] = frozenset({"GpuConfig", "MigDeviceConfig"})
    one_gpu_per_request = True

    # -- device-plugin config -------------------------------------------------------------------

    def fail_requests_greater_than_one(self, group: ReplicatedResources) -> bool:
        """Upstream forces it on for MPS unless the config explicitly turns it off."""
        flag = group.fail_requests_greater_than_one
        return True if flag is None else flag

    def config_problems(
        self, config: DevicePluginConfig, *, file: str = "", entry: str = ""
    ) -> list[FieldProblem]:
        group = self.group(config)
        if group is None:
            return []
        if config.flags.mig_strategy == "mixed":
            return [
                FieldProblem(
                    "MPS sharing is not supported with migStrategy mixed "
                    "(upstream: using --mig-strategy=mixed is not supported with MPS); "
                    "use none or single, or time-slicing",
                    "flags.migStrategy",
                    file,
                    entry,
                )
            ]
        return []

    def strategy_problems(
        self, mig_strategy: str, source: str, *, file: str = "", entry: str = ""
    ) -> list[FieldProblem]:
        if mig_strategy != "mixed":
            return []
        return [
            FieldProblem(
                "MPS sharing is not supported with migStrategy mixed (set by "
                f"{source}): upstream refuses to start (using --mig-strategy=mixed is "
                "not supported with MPS)",
                "sharing.mps",
                file,
                entry,
            )
        ]

    # -- node view ------------------------------------------------------------------------------

    def device_problems(
        self,
        rule: ReplicatedResource,
        path: str,
        gpu: Gpu,
        mig: MigDevice | None,
        resource: str,
        *,
        file: str = "",
        entry: str = "",
    ) -> list[FieldProblem]:
        if mig is not None:
            return [
                FieldProblem(
                    f"sharing using MPS is not supported for MIG devices (GPU {gpu.index} is "
                    f"split into MIG devices advertised as {resource})",
                    path,
                    file,
                    entry,
                )
            ]
        limit = mps_max_clients(gpu.compute_capability)
        if rule.replicas > limit:
            return [
                FieldProblem(
                    f"must be <= {limit} on GPU {gpu.index} ({gpu.product_name}, compute "
                    f"capability {gpu.cc}): an MPS server accepts at most {limit} clients per "
                    "device",
                    join_path(path, "replicas"),
                    file,
                    entry,
                )
            ]
        return []

    def limits(
        self, config: DevicePluginConfig, gpu: Gpu, resource: str, replicas: int
    ) -> MpsLimits:
        root = config.mps_root.rstrip("/")
        return MpsLimits(
            active_thread_percentage=100 // replicas,
            pinned_memory_limit_mib=gpu.memory_mib // replicas,
            pipe_directory=f"{root}/{resource}/{gpu.index}/pipe",
            log_directory=f"{root}/{resource}/{gpu.index}/log",
            shm_directory=f"{root}/shm",
        )

    def node_problems(
        self, config: DevicePluginConfig, machine: Machine, *, file: str = "", entry: str = ""
    ) -> list[FieldProblem]:
        if self.group(config) is None:
            return []
        enabled = [g.index for g in machine.gpus if g.mig_enabled]
        if not enabled:
            return []
        which = ", ".join(str(i) for i in enabled)
        return [
            FieldProblem(
                f"MPS sharing is not supported for mig devices: GPU {which} "
                f"{'has' if len(enabled) == 1 else 'have'} MIG enabled (gpu-feature-discovery "
                "refuses to label such a node: error creating sharing labeler); disable MIG "
                "on this node's GPUs or share them by time-slicing",
                "sharing.mps",
                file,
                entry,
            )
        ]

    def node_labels(self, config: DevicePluginConfig) -> dict[str, str]:
        """GFD's ``mps.capable``: true when the config in force shares by MPS, whether or not
        a resource it names exists on this node (a node with MIG enabled is refused first)."""
        group = self.group(config)
        capable = group is not None and any(e.replicas > 1 for e in group.entries())
        return {MPS_CAPABLE_LABEL: "true" if capable else "false"}

    # -- Allocate -------------------------------------------------------------------------------

    def request_problem(
        self, resource: str, devices: Sequence[AdvertisedDevice], too_large: str
    ) -> str | None:
        gpus = {d.gpu_uuid for d in devices if d.mps is not None}
        if len(gpus) > 1:
            return (
                f"{too_large} (MPS replicas of {len(gpus)} GPUs: a client talks to one GPU's "
                "MPS control daemon)"
            )
        return None

    def container_edits(self, resource: str, devices: Sequence[AdvertisedDevice]) -> ContainerEdits:
        limits = next((d.mps for d in devices if d.mps is not None), None)
        if limits is None:
            return ContainerEdits()
        return ContainerEdits(
            envs=mps_client_envs(resource, limits), mounts=tuple(mps_mounts(resource, limits))
        )

    # -- DRA ------------------------------------------------------------------------------------

    def parse_dra(self, raw: Mapping[str, Any], path: str, kind: str) -> object:
        given = raw.get(self.dra_config_key or "")
        if given is None:
            return MpsConfig()
        return _parse_mps(given, f"{path}.{self.dra_config_key}")

    def dra_plan(
        self, settings: object, claim_uid: str, uuids: Sequence[str], path: str
    ) -> SharingPlan:
        mps = settings if isinstance(settings, MpsConfig) else MpsConfig()
        limits = pinned_memory_limits(mps, uuids, f"{path}.sharing.{self.dra_config_key}")
        daemon = mps_daemon_id(claim_uid, uuids)
        env = [f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_IN_CONTAINER}"]
        if mps.default_active_thread_percentage is not None:
            env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={mps.default_active_thread_percentage}")
        if limits:
            env.append(
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="
                + ",".join(f"{i}={limits[u]}" for i, u in enumerate(uuids) if u in limits)
            )
        recorded: dict[str, Any] = {"strategy": self.dra_strategy, "controlDaemon": daemon}
        if mps.default_active_thread_percentage is not None:
            recorded["activeThreadPercentage"] = mps.default_active_thread_percentage
        if limits:
            recorded["pinnedDeviceMemoryLimits"] = limits
        return SharingPlan(
            env=tuple(env),
            mounts=((f"{daemon}/shm", "/dev/shm"), (f"{daemon}/pipe", MPS_PIPE_IN_CONTAINER)),
            directories=(f"{daemon}/pipe", f"{daemon}/shm", f"{daemon}/log"),
            settings=recorded,
            record={"mps": daemon},
        )


MPS = Mps()
