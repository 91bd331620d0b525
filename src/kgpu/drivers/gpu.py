"""The ``gpu.nvidia.com`` driver's node side: allocated devices -> CDI edits, opaque configs.

What lands in the container follows upstream's DRA driver: one transient CDI spec per claim,
kind ``k8s.gpu.nvidia.com/claim``, with one device ``<claimUID>-<device name>`` per allocated
device. A full GPU gets its device node ``/dev/nvidia<minor>``; a MIG device gets its parent's
node plus the GPU-instance and compute-instance capability nodes
``/dev/nvidia-caps/nvidia-cap<N>`` (numbers from the driver's fixed ``mig-minors`` table,
checked against a real H100 node's ``/proc/driver/nvidia-caps/mig-minors``). The
spec-level edits add the control nodes (``/dev/nvidiactl``, ``/dev/nvidia-uvm``,
``/dev/nvidia-uvm-tools``) and ``NVIDIA_VISIBLE_DEVICES=void``, which upstream sets so the
NVIDIA runtime hook does not expose GPUs a second time beside CDI. On real GPUs the handler is
given the node's driver (:class:`kgpu.kubelet.nvidia_cdi.NodeDriver`) and the spec-level edits
carry it as upstream's do: libraries, tools, firmware, sockets and the toolkit's hooks.

Opaque ``GpuConfig``/``MigDeviceConfig`` (:mod:`kgpu.dra.opaque`) apply per request, claim
configs over class configs, last one wins. What a sharing strategy adds is its mode's plan
(:mod:`kgpu.node.sharing`): MPS creates upstream's pipe and shm directories under
``<plugin dir>/mps/<claimUID>-<hash>/``, mounts them and sets the client-side limits;
time-slicing records its interval in the claim's checkpoint state (the agent's backend is
read-only: it never changes a GPU's compute policy).

With the node's ownership ledger (:class:`~kgpu.drivers.ownership.GpuOwnership`, shared with
the device plugin) the handler publishes no device of a GPU the device plugin holds or the
policy gives it (:mod:`kgpu.dra.withhold` says how, by Kubernetes version), holds a claim's
GPUs in the ledger when it prepares it (a GPU the device plugin took in the meantime fails the
claim, naming the holder), releases them when it unprepares it, and rebuilds its holdings from
the checkpoint's state on restart.

With consumable shares (:mod:`kgpu.dra.shares`) a result with a ``shareID`` on a GPU published
for sharing is a share of it. In ``memory`` mode the share is enforced: the GPU's MPS daemon
(:class:`~kgpu.drivers.shares.ShareDaemons`) serves it through the GPU's one MPS server, of the
user its pods run as (a share for another user than the GPU's is refused), limited to the
largest share prepared on the GPU (the ceiling, ``ceilingMiB`` in the claim's state); the
claim's CDI edits add the daemon's pipe directory (at upstream's ``/tmp/nvidia-mps``) and shm
and the client environment with the claim's exact share, which only lowers the ceiling. Such a
claim holds that one device only (an MPS client talks to one daemon), and no opaque sharing
config applies to it. In ``unlimited`` and ``N`` modes a share is the whole GPU, time-sliced,
as upstream's; its state says ``enforced: false``. The ledger holds a share as a fraction of
its GPU.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from kgpu import releases
from kgpu.dra import opaque
from kgpu.dra.shares import (
    DISABLED_POLICY,
    MIB,
    ShareLimits,
    SharePolicy,
    share_limits,
    shared_capacity,
)
from kgpu.dra.withhold import withhold_devices, withhold_method
from kgpu.drivers.mps import MPS_DIRECTORY_MODE, EventSink
from kgpu.drivers.ownership import GpuOwnership
from kgpu.drivers.shares import GpuRef, ShareDaemons, share_record
from kgpu.errors import FieldError, FieldProblem
from kgpu.hardware.backend import ComputeModeBackend
from kgpu.hardware.model import Gpu, Machine, MigDevice
from kgpu.kubelet.cdi import ContainerEdits, DeviceNode, Mount
from kgpu.kubelet.dirs import ensure_directory
from kgpu.kubelet.dra.handler import ClaimError, ClaimInfo, OpaqueConfig, PreparedClaim
from kgpu.kubelet.dra.handler import PreparedDevice as Prepared
from kgpu.kubelet.nvidia_cdi import NodeDriver, mig_cap_minors
from kgpu.node.ownership import OwnershipConflict
from kgpu.node.shares import PodLookup as PodLookup  # (namespace, name) -> the Pod or None
from kgpu.node.shares import ShareRefused, client_env, consumer_uid
from kgpu.node.sharing.mps import MPS_PIPE_IN_CONTAINER, MPS_SHM_CONTAINER_PATH
from kgpu.quantity import parse_quantity

log = logging.getLogger(__name__)

DRIVER = "gpu.nvidia.com"
CDI_KIND = "k8s.gpu.nvidia.com/claim"

Obj = dict[str, Any]
BIND = ("rw", "nosuid", "nodev", "bind")


@dataclass(frozen=True)
class Share:
    """One result that is a share of a GPU published for sharing."""

    share_id: str
    fraction: Fraction  # of the GPU's memory, for the ledger
    limits: ShareLimits
    enforced: bool  # memory mode: through the GPU's MPS daemon


@dataclass(frozen=True)
class ResolvedDevice:
    """A published device name resolved to the hardware behind it."""

    name: str
    uuid: str
    gpu: Gpu
    mig: MigDevice | None = None
    dynamic: bool = False  # a partitionable MIG placement materialised for this claim

    @property
    def kind(self) -> str:
        return "mig" if self.mig is not None else "gpu"


def _attr(device: Mapping[str, Any], name: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    return next(iter(value.values()), None) if isinstance(value, Mapping) else None


def resolve_devices(
    machine: Machine, node_name: str, dynamic_mig: bool, partitionable: bool = False
) -> dict[str, ResolvedDevice]:
    """Device name -> hardware, for every device the node publishes (static and partitionable).

    Uses the same slice builder the agent publishes with, so names always agree with the pool.
    A device with a ``uuid`` attribute is that GPU or MIG device; a dynamic MIG placement (no
    UUID until it exists) is found by its parent's ``parentUUID``, its ``profile`` and the
    placement start its name carries.
    """
    from kgpu.dra.slices import resource_slices

    out: dict[str, ResolvedDevice] = {}
    gpus = {g.uuid: g for g in machine.gpus}
    for mode in (False, True) if (partitionable or dynamic_mig) else (False,):
        for slice_ in resource_slices(machine, node_name, partitionable=mode):
            for device in slice_["spec"].get("devices") or []:
                name = device["name"]
                if name in out:
                    continue
                uuid = _attr(device, "uuid")
                if uuid is not None:
                    found = machine.by_uuid(str(uuid))
                    if isinstance(found, Gpu):
                        out[name] = ResolvedDevice(name, found.uuid, found)
                    else:
                        out[name] = ResolvedDevice(name, found.uuid, gpus[found.parent_uuid], found)
                    continue
                parent = gpus.get(str(_attr(device, "parentUUID")))
                if parent is None or not dynamic_mig:
                    continue
                resolved = _placement(device, parent)
                if resolved is not None:
                    out[name] = resolved
    return out


def _placement(device: Mapping[str, Any], parent: Gpu) -> ResolvedDevice | None:
    """A partitionable MIG placement: the MIG device there now, or the one MIG would create."""
    from kgpu.dra.devices import parse_mig_name
    from kgpu.hardware.mig import geometry_for, mig_device

    profile = str(_attr(device, "profile"))
    parsed = parse_mig_name(str(device["name"]))
    geometry = geometry_for(parent)
    if parsed is None or geometry is None or profile not in geometry.profiles:
        return None
    start = parsed.start
    for mig in parent.mig_devices:
        if mig.profile == profile and mig.placement_start == start:
            return ResolvedDevice(device["name"], mig.uuid, parent, mig)
    mig = mig_device(parent, geometry, profile, start, index=len(parent.mig_devices))
    return ResolvedDevice(device["name"], mig.uuid, parent, mig, dynamic=True)


def device_edits(device: ResolvedDevice, dev_root: str = "/dev") -> ContainerEdits:
    nodes = [DeviceNode(f"{dev_root}/nvidia{device.gpu.minor}")]
    if device.mig is not None:
        gi, ci = mig_cap_minors(device.gpu.minor, device.mig.gi_id, device.mig.ci_id)
        nodes += [
            DeviceNode(f"{dev_root}/nvidia-caps/nvidia-cap{gi}"),
            DeviceNode(f"{dev_root}/nvidia-caps/nvidia-cap{ci}"),
        ]
    return ContainerEdits(device_nodes=tuple(nodes))


def common_edits(dev_root: str = "/dev") -> ContainerEdits:
    return ContainerEdits(
        env=("NVIDIA_VISIBLE_DEVICES=void",),
        device_nodes=tuple(
            DeviceNode(f"{dev_root}/{name}")
            for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
        ),
    )


def _choose_config(
    result: Mapping[str, Any],
    device: ResolvedDevice,
    configs: Sequence[tuple[OpaqueConfig, opaque.DeviceConfig]],
) -> tuple[OpaqueConfig, opaque.DeviceConfig] | None:
    """The config that governs one result: the last applicable one. A config that names the
    request explicitly must fit the device type; a catch-all one of the other type is skipped."""
    request = str(result.get("request", ""))
    wanted = opaque.MIG_DEVICE_CONFIG if device.kind == "mig" else opaque.GPU_CONFIG
    for raw, parsed in reversed(configs):
        if not raw.applies_to(request):
            continue
        if parsed.kind == wanted:
            return raw, parsed
        if raw.requests:
            raise FieldError(
                FieldProblem(
                    f"{parsed.kind} cannot configure {device.kind.upper()} device "
                    f"{device.name} of request {request!r}; use {wanted}",
                    f"{raw.path}.kind",
                )
            )
    return None


#: What a release without ``DRAConsumableCapacity`` on does to shared GPUs (its API server
#: drops the fields on write: ``dropDisabledDRAConsumableCapacityFields``).
SHARES_OFF = (
    "no GPU is shared, each stays exclusive (one claim at a time): the API server drops "
    "allowMultipleAllocations and the capacities' requestPolicy from the slices"
)
#: The same where the release does not have the gate at all.
SHARES_MISSING = "no GPU is shared: kgpu publishes every GPU exclusive there"


def served_shares(shares: SharePolicy, kubernetes_version: str) -> SharePolicy:
    """``shares``, or none where the release does not have ``DRAConsumableCapacity`` at all
    (1.33 and older): their API has no ``allowMultipleAllocations`` and a strict write of it
    would be refused, so GPUs are published exclusive there (:func:`gate_notes` says so)."""
    if not shares.enabled:
        return shares
    try:
        minor = releases.parse_minor(kubernetes_version)
    except ValueError:
        return shares
    if releases.GATES["DRAConsumableCapacity"].at(minor) is None:
        return DISABLED_POLICY
    return shares


def gate_notes(
    kubernetes_version: str | None, partitionable: bool, shares: SharePolicy = DISABLED_POLICY
) -> list[str]:
    """What the API server's release leaves off by default of what this driver publishes
    (:mod:`kgpu.releases`): taints on unhealthy GPUs (``DRADeviceTaints``, on from 1.36); with
    ``partitionable``, counter sets (``DRAPartitionableDevices``, on from 1.36); with
    ``shares`` on, shared GPUs (``DRAConsumableCapacity``, on from 1.36)."""
    if not kubernetes_version:
        return []
    try:
        minor = releases.parse_minor(kubernetes_version)
    except ValueError:
        return []
    wanted = [("DRADeviceTaints", "an unhealthy GPU's taint keeps no new claim off it")]
    if partitionable:
        wanted.append(
            ("DRAPartitionableDevices", "MIG placements' counters are dropped and not honoured")
        )
    if shares.enabled:
        missing = releases.GATES["DRAConsumableCapacity"].at(minor) is None
        wanted.append(("DRAConsumableCapacity", SHARES_MISSING if missing else SHARES_OFF))
    notes = (releases.gate_off_note(minor, gate, needs) for gate, needs in wanted)
    return [n for n in notes if n]


class GpuHandler:
    """:class:`~kgpu.kubelet.dra.handler.DriverHandler` for ``gpu.nvidia.com``.

    ``dynamic_mig`` lets a claim use a partitionable MIG placement that does not exist yet
    (the simulator materialises it); on a real node only existing devices are prepared.
    ``kubernetes_version`` is the API server's (``v1.35.2``): it decides how partitionable
    devices and their counters are packed into slices (:mod:`kgpu.dra.slices`); None packs
    them for the newest version. ``shares`` publishes whole GPUs for consumable shares
    (:mod:`kgpu.dra.shares`); in ``memory`` mode ``share_daemons`` enforce them (built here
    when not given: ``compute_modes`` sets the GPUs' compute mode, ``on_event`` records the
    Warnings of a daemon that cannot run), and ``pod_lookup`` finds a share's pods.
    """

    driver = DRIVER
    cdi_kind = CDI_KIND

    def __init__(
        self,
        machine: Machine,
        node_name: str,
        plugin_dir: Path,
        *,
        dev_root: str = "/dev",
        dynamic_mig: bool = False,
        partitionable: bool = False,
        node_driver: NodeDriver | None = None,
        kubernetes_version: str | None = None,
        ownership: GpuOwnership | None = None,
        shares: SharePolicy = DISABLED_POLICY,
        pod_lookup: PodLookup | None = None,
        compute_modes: ComputeModeBackend | None = None,
        on_event: EventSink | None = None,
        share_daemons: ShareDaemons | None = None,
    ) -> None:
        self.node_name = node_name
        self.shares = shares
        self.share_daemons = share_daemons or ShareDaemons(
            plugin_dir / "mps" / "shares", shares, backend=compute_modes, on_event=on_event
        )
        # (namespace, name) -> the Pod object, or None: who consumes a shared GPU's claim (its
        # runAsUser picks the MPS server that enforces the share)
        self.pod_lookup = pod_lookup
        self.ownership = ownership
        self._withheld: dict[str, str] = {}  # what the last slices left out (GPU UUID -> why)
        self._slices: tuple[tuple[object, ...], list[Obj]] | None = None
        self.node_driver = node_driver  # the driver's files for the specs (None: simulated)
        self.plugin_dir = plugin_dir
        # where sharing plans create their per-claim directories (MPS pipes, shm, logs); the
        # name is upstream's
        self.mps_root = plugin_dir / "mps"
        self.dev_root = dev_root
        self.dynamic_mig = dynamic_mig
        self.partitionable = partitionable
        self.kubernetes_version = kubernetes_version
        if shares.enabled and partitionable:
            # as NVIDIA's driver refuses MPS with DynamicMIG: a partitionable full GPU
            # consumes every counter of its GPU, which a share of that GPU must not
            # (``dynamic_mig`` alone only lets the simulator materialise placements of
            # partitionable slices, which are then not published)
            raise FieldError(
                FieldProblem(
                    f"consumable shares ({shares.describe()}) cannot be combined with dynamic "
                    "MIG (partitionable devices): a shared GPU would also be offered whole "
                    "and as MIG placements; turn consumable shares or dynamic MIG off",
                    "--consumable-shares",
                )
            )
        for note in gate_notes(kubernetes_version, partitionable, shares):
            log.warning("gpu.nvidia.com: %s", note)
        self._lock = threading.Lock()
        self._machine = machine
        self._devices: dict[str, ResolvedDevice] | None = None
        self._unhealthy: dict[str, str] = {}

    def set_health(self, unhealthy: Mapping[str, str]) -> bool:
        """Take the node's unhealthy devices (UUID -> reason); True when that changes the
        slices: unhealthy devices are published with NVIDIA's health taint
        (``gpu.nvidia.com/xid=<xid>:NoSchedule``, as its ``NVMLDeviceHealthCheck`` does), so
        the scheduler allocates them to no new claim."""
        with self._lock:
            if dict(unhealthy) == self._unhealthy:
                return False
            self._unhealthy = dict(unhealthy)
            return True

    def update_machine(self, machine: Machine) -> bool:
        """Take a new hardware snapshot; True when it differs (slices must be republished)."""
        with self._lock:
            if machine == self._machine:
                return False
            self._machine = machine
            self._devices = None
            return True

    @property
    def machine(self) -> Machine:
        return self._machine

    @property
    def unhealthy(self) -> dict[str, str]:
        """The unhealthy devices the slices taint (UUID -> reason)."""
        return dict(self._unhealthy)

    def devices(self) -> dict[str, ResolvedDevice]:
        with self._lock:
            if self._devices is None:
                self._devices = resolve_devices(
                    self._machine, self.node_name, self.dynamic_mig, self.partitionable
                )
            return self._devices

    # -- DriverHandler ---------------------------------------------------------------------
    def resource_slices(self, node_name: str) -> list[Obj]:
        from kgpu.dra.slices import DEFAULT_KUBERNETES_VERSION, resource_slices

        version = self.kubernetes_version or DEFAULT_KUBERNETES_VERSION
        key = (
            node_name,
            self._machine,
            tuple(sorted(self._unhealthy.items())),
            version,
            self.shares,
        )
        cached = self._slices
        if cached is None or cached[0] != key:  # built once per hardware and health state:
            slices = resource_slices(  # an ownership change only filters them
                self._machine,
                node_name,
                partitionable=self.partitionable,
                kubernetes_version=version,
                unhealthy=self._unhealthy,
                shares=served_shares(self.shares, version),
            )
            self._slices = cached = (key, slices)
        slices = cached[1]
        if self.ownership is None:
            return list(slices)
        withheld = self.ownership.dra_withheld(self._machine)
        self._withheld = withheld
        return withhold_devices(slices, withheld, withhold_method(version))

    def ownership_changed(self) -> bool:
        """Whether the GPUs to withhold differ from those the last slices withheld (the
        slices must be republished)."""
        if self.ownership is None:
            return False
        return self.ownership.dra_withheld(self._machine) != self._withheld

    def restore(self, states: Mapping[str, Mapping[str, Any]]) -> None:
        """Everything a GPU claim holds is on disk and in its state; the ownership ledger gets
        each prepared claim's GPUs (and shares) back, the share daemons their shares."""
        self.share_daemons.restore(
            record
            for state in states.values()
            for record in state.get("shares") or []
            if isinstance(record, Mapping) and record.get("enforced")
        )
        if self.ownership is None:
            return
        devices = {
            uid: {
                str(name): dev
                for name, dev in (state.get("devices") or {}).items()
                if isinstance(dev, Mapping)
            }
            for uid, state in states.items()
        }
        self.ownership.restore_claims(
            {
                uid: (
                    str(states[uid].get("claim") or uid),
                    [(name, str(dev.get("parentUUID", ""))) for name, dev in held.items()],
                )
                for uid, held in devices.items()
            },
            {
                uid: {
                    name: share
                    for name, dev in held.items()
                    if (share := _fraction(dev.get("share"))) is not None
                }
                for uid, held in devices.items()
            },
        )

    def prepare(self, claim: ClaimInfo) -> PreparedClaim:
        configs = [(c, opaque.parse_config(c.parameters, c.path)) for c in claim.configs]
        known = self.devices()
        resolved: list[tuple[Mapping[str, Any], ResolvedDevice]] = []
        for i, result in enumerate(claim.results):
            name = str(result.get("device", ""))
            pool = str(result.get("pool", ""))
            if pool != self.node_name:
                raise ClaimError(
                    f"device {pool}/{name} (results[{i}]) is not in this node's pool "
                    f"{self.node_name!r}"
                )
            if name not in known:
                raise ClaimError(
                    f"device {name} (status.allocation.devices.results[{i}]) does not exist on "
                    f"node {self.node_name}"
                )
            resolved.append((result, known[name]))
        shares = {i: self._share_of(result, device) for i, (result, device) in enumerate(resolved)}
        fractions: dict[str, Fraction] = {}
        for i, share in shares.items():
            if share is not None:
                name = resolved[i][1].name
                fractions[name] = fractions.get(name, Fraction(0)) + share.fraction
        if self.ownership is not None:  # one owner per GPU: held before any side effect
            try:
                self.ownership.hold_claim(
                    claim.uid,
                    f"{claim.namespace}/{claim.name}",
                    [(device.name, device.gpu.uuid) for _, device in resolved],
                    fractions,
                )
            except OwnershipConflict as exc:
                raise ClaimError(str(exc)) from None
        enforced = [i for i, share in shares.items() if share is not None and share.enforced]
        if enforced:
            return self._prepare_share(claim, resolved, enforced[0], shares, configs)

        groups: dict[int, list[tuple[Mapping[str, Any], ResolvedDevice]]] = {}
        chosen: dict[int, tuple[OpaqueConfig, opaque.DeviceConfig] | None] = {}
        for i, (result, device) in enumerate(resolved):
            choice = _choose_config(result, device, configs)
            _check_share_config(shares[i], choice, device, claim)
            key = id(choice[0]) if choice else 0
            groups.setdefault(key, []).append((result, device))
            chosen[key] = choice

        devices: list[Prepared] = []
        sharing_state: list[Obj] = []
        records: dict[str, list[str]] = {}
        for key, members in groups.items():
            choice = chosen[key]
            uuids = [device.uuid for _, device in members]
            plan = opaque.SharingPlan()
            if choice is not None:
                raw, parsed = choice
                plan = opaque.sharing_plan(parsed, claim.uid, uuids, raw.path)
            extra = ContainerEdits(env=plan.env)
            for directory in plan.directories:
                ensure_directory(self.mps_root / directory, MPS_DIRECTORY_MODE)
            for state_key, value in plan.record.items():
                records.setdefault(state_key, []).append(value)
            if plan.mounts:
                extra = extra.merged(
                    ContainerEdits(
                        mounts=tuple(
                            Mount(
                                str(self.mps_root / host),
                                container,
                                ("rw", "nosuid", "nodev", "bind"),
                            )
                            for host, container in plan.mounts
                        )
                    )
                )
            if plan.settings:
                sharing_state.append({"devices": [d.name for _, d in members], **plan.settings})
            for result, device in members:
                devices.append(
                    Prepared(
                        requests=(str(result.get("request", "")),),
                        pool=str(result.get("pool", "")),
                        device=device.name,
                        cdi_name=f"{claim.uid}-{device.name}",
                        edits=self._device_edits(device).merged(extra),
                    )
                )
        state = self._state(claim, resolved, fractions)
        unenforced = [
            {"device": resolved[i][1].name, "shareID": share.share_id, "enforced": False}
            for i, share in shares.items()
            if share is not None
        ]
        if unenforced:
            state["shares"] = unenforced
        if sharing_state:
            state["sharing"] = sharing_state
        state.update(records)
        return PreparedClaim(tuple(devices), self._common_edits(), state)

    def _common_edits(self) -> ContainerEdits:
        return (
            self.node_driver.common_edits(self._machine.driver_version)
            if self.node_driver is not None
            else common_edits(self.dev_root)
        )

    @staticmethod
    def _state(
        claim: ClaimInfo,
        resolved: Sequence[tuple[Mapping[str, Any], ResolvedDevice]],
        fractions: Mapping[str, Fraction],
    ) -> Obj:
        devices: Obj = {}
        for _, d in resolved:
            devices[d.name] = {
                "uuid": d.uuid,
                "type": d.kind,
                "parentUUID": d.gpu.uuid,
                "dynamic": d.dynamic,
            }
            if d.name in fractions:
                devices[d.name]["share"] = str(fractions[d.name])
        return {"claim": f"{claim.namespace}/{claim.name}", "devices": devices}

    # -- shares ------------------------------------------------------------------------------

    def _share_of(self, result: Mapping[str, Any], device: ResolvedDevice) -> Share | None:
        """The share ``result`` is (None: the device whole): a result with a ``shareID`` on a
        whole GPU this node publishes for sharing."""
        share_id = result.get("shareID")
        if not share_id or device.mig is not None or not self.shares.enabled:
            return None
        gpu_mib = device.gpu.memory_mib
        if shared_capacity(self.shares, gpu_mib) is None:
            return None
        consumed = result.get("consumedCapacity")
        limits = share_limits(consumed if isinstance(consumed, Mapping) else None, gpu_mib)
        if self.shares.enforced:
            fraction = Fraction(limits.memory_mib, gpu_mib)
        else:  # upstream's modes: memory defaults to 0, only what the claim asked counts
            memory = (consumed or {}).get("memory") if isinstance(consumed, Mapping) else None
            asked = int(parse_quantity(str(memory)) // MIB) if memory is not None else 0
            fraction = Fraction(min(asked, gpu_mib), gpu_mib)
        return Share(str(share_id), fraction, limits, self.shares.enforced)

    def _prepare_share(
        self,
        claim: ClaimInfo,
        resolved: Sequence[tuple[Mapping[str, Any], ResolvedDevice]],
        index: int,
        shares: Mapping[int, Share | None],
        configs: Sequence[tuple[OpaqueConfig, opaque.DeviceConfig]],
    ) -> PreparedClaim:
        """A claim holding a memory share: served by its GPU's MPS daemon, through the GPU's
        server (of the user its pods run as), its env carrying its exact share."""
        label = f"{claim.namespace}/{claim.name}"
        result, device = resolved[index]
        share = shares[index]
        assert share is not None
        if len(resolved) > 1:
            others = ", ".join(d.name for i, (_, d) in enumerate(resolved) if i != index)
            raise ClaimError(
                f"claim {label}: results[{index}] is a memory share of GPU {device.gpu.index}, "
                f"served by that GPU's MPS daemon, and an MPS client talks to one daemon: a "
                f"claim with a memory share holds no other device of {DRIVER} (it also has "
                f"{others}); use one claim per share"
            )
        _check_share_config(share, _choose_config(result, device, configs), device, claim)
        try:
            uid, pod = consumer_uid(claim.claim, self.pod_lookup)
        except ShareRefused as exc:
            raise ClaimError(str(exc)) from None
        gpu = GpuRef(device.gpu.uuid, device.gpu.index, device.gpu.memory_mib)
        limits = share.limits
        served = self.share_daemons.serve(
            gpu, claim.uid, label, pod, uid, limits.memory_mib, limits.active_thread_percentage
        )
        pipe, _, shm = self.share_daemons.directories(gpu.uuid)
        extra = ContainerEdits(
            env=client_env(
                MPS_PIPE_IN_CONTAINER, limits.memory_mib, limits.active_thread_percentage
            ),
            mounts=(
                Mount(pipe, MPS_PIPE_IN_CONTAINER, BIND),
                Mount(shm, MPS_SHM_CONTAINER_PATH, BIND),
            ),
        )
        prepared = Prepared(
            requests=(str(result.get("request", "")),),
            pool=str(result.get("pool", "")),
            device=device.name,
            cdi_name=f"{claim.uid}-{device.name}",
            edits=self._device_edits(device).merged(extra),
        )
        state = self._state(claim, resolved, {device.name: share.fraction})
        record = share_record(served, gpu, self.share_daemons.daemon(gpu.uuid), pod)
        state["shares"] = [
            {"device": device.name, "shareID": share.share_id, "enforced": True, **record}
        ]
        return PreparedClaim((prepared,), self._common_edits(), state)

    def _device_edits(self, device: ResolvedDevice) -> ContainerEdits:
        if self.node_driver is None:
            return device_edits(device, self.dev_root)
        mig = (device.mig.gi_id, device.mig.ci_id) if device.mig is not None else None
        nodes = self.node_driver.device_nodes(device.gpu.minor, mig, device.gpu.pci_bus_id)
        return ContainerEdits(device_nodes=nodes)

    def unprepare(self, claim_uid: str, state: Mapping[str, Any] | None) -> None:
        """Remove the claim's MPS directories (by uid prefix, so an incomplete preparation
        whose state was never recorded is cleaned up too), release its share (by uid too) and
        free its GPUs in the ledger."""
        if claim_uid:
            self.share_daemons.release(claim_uid)
        if self.ownership is not None and claim_uid:
            self.ownership.release_claim(claim_uid)
        if not claim_uid or not self.mps_root.is_dir():
            return
        for path in self.mps_root.iterdir():
            if path.name.startswith(f"{claim_uid}-"):
                shutil.rmtree(path, ignore_errors=True)


def _fraction(value: object) -> Fraction | None:
    """A checkpointed share (``"20480/81559"``); None when absent or unreadable (the claim is
    then held whole: the ledger errs on the side of one owner)."""
    if value is None:
        return None
    try:
        return Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        log.warning("checkpoint: share %r is not a fraction; held as a whole GPU", value)
        return None


def _check_share_config(
    share: Share | None,
    choice: tuple[OpaqueConfig, opaque.DeviceConfig] | None,
    device: ResolvedDevice,
    claim: ClaimInfo,
) -> None:
    """A share takes no opaque sharing config that would undo it: in ``memory`` mode none
    (the share is already an MPS client of its GPU's daemon, with the limits its capacity
    asked), otherwise not MPS (upstream refuses MPS with consumable shares; time-slicing is
    what those shares are)."""
    if share is None or choice is None:
        return
    raw, parsed = choice
    sharing = parsed.sharing
    if sharing is None:
        return
    where = f"{raw.path}.sharing.strategy"
    label = f"claim {claim.namespace}/{claim.name}"
    if share.enforced:
        raise FieldError(
            FieldProblem(
                f"{label}: device {device.name} is a memory share of GPU {device.gpu.index}, "
                "already enforced through that GPU's MPS daemon with the limits of the claim's "
                f"capacity requests; a {sharing.strategy} sharing config cannot apply to it: "
                "remove the config (ask for memory and computeShares capacity instead)",
                where,
            )
        )
    if sharing.strategy == "MPS":
        raise FieldError(
            FieldProblem(
                f"{label}: MPS sharing is not supported on a consumable share of device "
                f"{device.name}, as upstream (shares in this mode are time-sliced): remove "
                "the config, or use consumableShares: memory for shares MPS enforces",
                where,
            )
        )


def visible_uuids(state: Mapping[str, Any], device_names: Sequence[str]) -> list[str]:
    """UUIDs of the named devices of a prepared claim (from its checkpoint state)."""
    known = state.get("devices") or {}
    return [str(known[n]["uuid"]) for n in device_names if n in known]
