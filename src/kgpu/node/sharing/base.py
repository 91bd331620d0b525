"""What every way of sharing a device must say, in one place per mode.

A sharing mode (``none``, ``time-slicing``, ``mps``) touches every decision kgpu makes about a
shared device: which device-plugin config entries apply to it, what the hardware must allow, the
per-client limits, what Allocate hands the container, the node labels and, for DRA claims, how
an opaque ``GpuConfig.sharing`` for it is decoded and applied. :class:`SharingMode` names each of
those decisions once; a mode overrides the ones it has a rule for and inherits "nothing to do"
for the rest, so the view, the allocator, the labeler and the DRA driver ask the mode instead of
branching on its name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from kgpu.config.plugin import DevicePluginConfig, ReplicatedResource, ReplicatedResources
from kgpu.errors import FieldError, FieldProblem
from kgpu.hardware.model import Gpu, Machine, MigDevice

if TYPE_CHECKING:
    from kgpu.node.model import AdvertisedDevice, MpsLimits


@dataclass(frozen=True)
class ContainerEdits:
    """What a mode adds to one container's Allocate response: environment variables and
    ``(container path, host path)`` mounts."""

    envs: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class SharingPlan:
    """What preparing DRA devices with an opaque sharing config means, as plain data.

    ``env`` goes into the CDI spec; ``directories`` are created under the driver's sharing root
    before ``mounts`` (host path relative to that root, container path) bind them; ``settings``
    is what the kubelet plugin records (time-slice interval, MPS limits) so a restarted agent
    still knows it; ``record`` adds ``{state key: value}`` to the claim's checkpoint state.
    """

    env: tuple[str, ...] = ()
    mounts: tuple[tuple[str, str], ...] = ()
    directories: tuple[str, ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)
    record: Mapping[str, str] = field(default_factory=dict)

    @property
    def mps_id(self) -> str | None:
        """The MPS control daemon this plan starts, if any (its checkpoint record)."""
        return self.record.get("mps")


def mapping_of(value: Any, path: str) -> Mapping[str, Any]:
    """``value`` as an object, or a FieldError at ``path`` saying what it was instead."""
    if not isinstance(value, Mapping):
        raise FieldError(FieldProblem(f"must be an object, got {type(value).__name__}", path))
    return value


def reject_unknown(obj: Mapping[str, Any], allowed: Sequence[str], path: str) -> None:
    """Upstream decodes opaque configs strictly: an unknown field is an error, not ignored."""
    problems = [
        FieldProblem(f"unknown field; allowed: {', '.join(allowed)}", f"{path}.{key}")
        for key in obj
        if key not in allowed
    ]
    if problems:
        raise FieldError(problems)


class SharingMode:
    """One way of sharing a device. The defaults are the answers of a mode with no rule."""

    #: The mode's name: the ``Sharing`` value and the ``sharing-strategy`` label value.
    name: ClassVar[str] = ""
    #: How messages name it ("MPS", "time-slicing").
    title: ClassVar[str] = ""
    #: Its key under ``sharing:`` in a device-plugin config (None: not configured there).
    config_key: ClassVar[str | None] = None
    #: Where two modes' entries select the same device, the lower one wins (upstream runs MPS
    #: alone when both are configured).
    precedence: ClassVar[int] = 100
    #: Its ``sharing.strategy`` in a DRA ``GpuConfig``/``MigDeviceConfig`` (None: none).
    dra_strategy: ClassVar[str | None] = None
    #: The key of its settings beside ``strategy`` in a DRA config, and the kinds that take it.
    dra_config_key: ClassVar[str | None] = None
    dra_kinds: ClassVar[frozenset[str]] = frozenset()
    #: Every replica one request gets must come from one GPU (a client talks to one daemon).
    one_gpu_per_request: ClassVar[bool] = False

    # -- the device-plugin config -------------------------------------------------------------

    def group(self, config: DevicePluginConfig) -> ReplicatedResources | None:
        """The config's ``sharing.<config_key>`` section, when it has entries."""
        if self.config_key is None:
            return None
        group = config.sharing.group(self.config_key)
        return group if group is not None and group.entries() else None

    def fail_requests_greater_than_one(self, group: ReplicatedResources) -> bool:
        """Whether a request for more than one replica is refused (the config's flag)."""
        return bool(group.fail_requests_greater_than_one)

    def config_problems(
        self, config: DevicePluginConfig, *, file: str = "", entry: str = ""
    ) -> list[FieldProblem]:
        """What upstream refuses in a config that uses this mode, without looking at GPUs."""
        return []

    def strategy_problems(
        self, mig_strategy: str, source: str, *, file: str = "", entry: str = ""
    ) -> list[FieldProblem]:
        """What upstream refuses when this mode meets the node's MIG strategy (from ``source``:
        Helm values or a command-line override, which the config file cannot see)."""
        return []

    # -- the node view -------------------------------------------------------------------------

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
        """Why this mode cannot share one device (a GPU, or a MIG device of ``gpu``) under the
        config entry ``rule`` found at ``path``; empty when it can."""
        return []

    def limits(
        self, config: DevicePluginConfig, gpu: Gpu, resource: str, replicas: int
    ) -> MpsLimits | None:
        """The per-client limits each of ``replicas`` replicas of ``gpu`` gets, if the mode has
        any."""
        return None

    def node_problems(
        self, config: DevicePluginConfig, machine: Machine, *, file: str = "", entry: str = ""
    ) -> list[FieldProblem]:
        """Why a node with these GPUs cannot use this mode at all (GFD refuses to label it)."""
        return []

    def node_labels(self, config: DevicePluginConfig) -> dict[str, str]:
        """Node labels this mode owns (GFD's ``mps.capable``), from the config in force."""
        return {}

    # -- Allocate ------------------------------------------------------------------------------

    def request_problem(
        self, resource: str, devices: Sequence[AdvertisedDevice], too_large: str
    ) -> str | None:
        """Why a request for ``devices`` (all of this mode) must be refused; ``too_large`` is
        upstream's wording for a shared request that is too large."""
        return None

    def container_edits(self, resource: str, devices: Sequence[AdvertisedDevice]) -> ContainerEdits:
        """What a container allocated ``devices`` (all of this mode) gets beyond the device
        list."""
        return ContainerEdits()

    # -- DRA opaque configs --------------------------------------------------------------------

    def parse_dra(self, raw: Mapping[str, Any], path: str, kind: str) -> object:
        """Decode this mode's part of a DRA ``sharing`` object (``raw`` is the whole object, at
        ``path``); FieldError names the offending field."""
        return None

    def dra_plan(
        self, settings: object, claim_uid: str, uuids: Sequence[str], path: str
    ) -> SharingPlan:
        """What preparing the claim's devices ``uuids`` with the decoded ``settings`` means."""
        return SharingPlan()
