"""Read a node's real GPUs through NVML (``nvidia-ml-py``), read-only.

Every query that a GPU, driver or NVML version may not support is made through :meth:`_get`,
which turns an NVML error into the field's default: an old driver without fabric info, a GeForce
card without NVLink or a VM that hides NUMA still yields a complete snapshot. Only a missing NVML
(no driver) is fatal, and it says what to do instead. Nothing here changes GPU state (clocks
and power limits are only read) except the MIG operations mixed in from
:mod:`kgpu.hardware.nvml_mig`, which only the MIG manager calls.
"""

from __future__ import annotations

import ctypes
import importlib
import math
import socket
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kgpu.hardware import hostfacts
from kgpu.hardware.backend import BackendError, ComputeMode, TelemetryAccess, XidEvent
from kgpu.hardware.events import EventHub
from kgpu.hardware.model import NVML_SOURCE, FabricInfo, Gpu, Machine, MigDevice, MigEngines, NvLink
from kgpu.hardware.nvml_mig import NvmlMigOps
from kgpu.hardware.profiles import product_by_name

T = TypeVar("T")

NOT_FOUND_MESSAGE = (
    "NVML not found: is the NVIDIA driver installed? use --machine <profile> to simulate "
    "(kgpu machines lists them)"
)

_ARCHITECTURES = {
    "KEPLER": "kepler",
    "MAXWELL": "maxwell",
    "PASCAL": "pascal",
    "VOLTA": "volta",
    "TURING": "turing",
    "AMPERE": "ampere",
    "ADA": "ada-lovelace",
    "HOPPER": "hopper",
    "BLACKWELL": "blackwell",
    "RUBIN": "rubin",
}
_BRANDS = {
    "GEFORCE": "GeForce",
    "GEFORCE_RTX": "GeForceRTX",
    "NVIDIA": "Nvidia",
    "TESLA": "Tesla",
    "QUADRO": "Quadro",
    "QUADRO_RTX": "QuadroRTX",
    "NVIDIA_RTX": "NvidiaRTX",
    "TITAN": "Titan",
    "TITAN_RTX": "TitanRTX",
    "NVS": "NVS",
    "GRID": "Grid",
}
_FABRIC_STATES = {
    "NOT_STARTED": "not-started",
    "IN_PROGRESS": "in-progress",
    "COMPLETED": "completed",
}
_ADDRESSING = {"NONE": "None", "HMM": "HMM", "ATS": "ATS"}
_VIRTUALIZATION = {
    "NONE": "none",
    "PASSTHROUGH": "passthrough",
    "VGPU": "vgpu",
    "HOST_VGPU": "host-vgpu",
    "HOST_VSGA": "host-vsga",
}
#: kgpu's compute modes by the suffix of NVML's ``NVML_COMPUTEMODE_<NAME>`` constant
_COMPUTE_MODES = {
    "DEFAULT": ComputeMode.DEFAULT,
    "EXCLUSIVE_THREAD": ComputeMode.EXCLUSIVE_THREAD,
    "PROHIBITED": ComputeMode.PROHIBITED,
    "EXCLUSIVE_PROCESS": ComputeMode.EXCLUSIVE_PROCESS,
}
_COMPUTE_MODE_VALUES = {
    "DEFAULT": 0,
    "EXCLUSIVE_THREAD": 1,
    "PROHIBITED": 2,
    "EXCLUSIVE_PROCESS": 3,
}
_NO_ID = 0xFFFFFFFF  # NVML's "not attributed to a MIG device"
SYSFS_PCI_DEVICES = Path("/sys/bus/pci/devices")


def architecture_from_cc(major: int, minor: int) -> str:
    """Fallback when nvmlDeviceGetArchitecture is unsupported (old drivers)."""
    if major >= 10:
        return "blackwell"
    return {
        (9, 0): "hopper",
        (8, 9): "ada-lovelace",
        (7, 5): "turing",
        (7, 0): "volta",
        (7, 2): "volta",
    }.get((major, minor), "ampere" if major == 8 else "pascal" if major == 6 else "unknown")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _sysfs_bdf(bus_id: str) -> str:
    """NVML's ``00000000:1B:00.0`` as sysfs spells it: ``0000:1b:00.0``."""
    domain, _, rest = bus_id.partition(":")
    return f"{domain[-4:]}:{rest}".lower()


class NvmlBackend(NvmlMigOps):
    """The Backend for a real node (and its MigBackend). Construct once per process;
    :meth:`close` shuts NVML down."""

    def __init__(self, nvml: Any = None, *, host_root: Path = Path("/")) -> None:
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError:
                raise BackendError(
                    "nvidia-ml-py is not installed (pip install nvidia-ml-py); "
                    "use --machine <profile> to simulate"
                ) from None
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise BackendError(self._init_message(exc)) from None
        except OSError as exc:  # a broken libnvml.so
            raise BackendError(f"{NOT_FOUND_MESSAGE} ({exc})") from None
        self._lock = threading.Lock()
        self._event_set: Any = None
        self._waiting = False
        self._closed = False
        self._hub = EventHub(self.wait_events)
        self._host_root = Path(host_root)  # where sysfs is read (tests lay one out)

    def _init_message(self, exc: Any) -> str:
        code = getattr(exc, "value", None)
        missing = {
            getattr(self._nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12),
            getattr(self._nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9),
        }
        if code in missing:
            return NOT_FOUND_MESSAGE
        return f"NVML could not start: {exc}"

    def _get(self, default: T, fn_name: str, *args: Any) -> T | Any:
        """Call an NVML function; any NVML error (unsupported, no permission, missing symbol in
        an old library) gives ``default``."""
        fn: Callable[..., Any] | None = getattr(self._nvml, fn_name, None)
        if fn is None:
            return default
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return default

    def _const(self, name: str, default: int) -> int:
        return int(getattr(self._nvml, name, default))

    def _enum_name(self, prefix: str, names: dict[str, str], value: Any) -> str | None:
        """kgpu's name for an NVML enum value, matched against the library's own constants
        (``prefix + suffix``), so a constant an older nvidia-ml-py lacks never matches."""
        for suffix, pretty in names.items():
            if getattr(self._nvml, prefix + suffix, None) == value:
                return pretty
        return None

    # -- snapshot -----------------------------------------------------------------------------

    def snapshot(self) -> Machine:
        nvml = self._nvml
        if self._closed:
            raise BackendError("the NVML backend is closed")
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            raise BackendError(f"NVML cannot count GPUs: {exc}") from None
        handles = []
        for index in range(count):
            handle = self._get(None, "nvmlDeviceGetHandleByIndex", index)
            # A GPU that cannot even say its UUID (fallen off the bus) is left out, as the
            # simulated backend does; the health watcher has already marked it through probe().
            uuid = None if handle is None else self._get(None, "nvmlDeviceGetUUID", handle)
            if uuid is not None:
                handles.append((index, handle, _text(uuid)))
        bus_ids = {index: self._bus_id(handle) for index, handle, _ in handles}
        by_bus = {bus[-12:].upper(): index for index, bus in bus_ids.items() if bus}
        gpus = tuple(
            self._gpu(index, handle, uuid, bus_ids[index], by_bus)
            for index, handle, uuid in handles
        )
        cuda = int(self._get(0, "nvmlSystemGetCudaDriverVersion"))
        extra = self._host_facts([(index, handle) for index, handle, _ in handles], bus_ids)
        return Machine(
            profile="nvml",
            source=NVML_SOURCE,
            driver_version=_text(self._get("", "nvmlSystemGetDriverVersion")),
            cuda_driver_version=(cuda // 1000, (cuda % 1000) // 10),
            gpus=gpus,
            hostname=socket.gethostname(),
            extra=extra,
        )

    def _host_facts(
        self, handles: list[tuple[int, Any]], bus_ids: dict[int, str]
    ) -> dict[str, Any]:
        """What labels and DRA attributes need beside NVML's GPU facts, recorded in
        ``Machine.extra`` so a snapshot reproduces them: the DMI product name
        (``machine_type``), per GPU index its PCI class (``pci_classes``), PCIe root complex
        (``pcie_roots``), NVML addressing mode (``addressing_modes``: ``None``, ``HMM``,
        ``ATS``), virtualization mode (``virtualization_modes``) and the MIG geometry NVML
        reports (``mig_geometry``, :meth:`measured_geometry`)."""
        root = self._host_root
        extra: dict[str, Any] = {}
        product = hostfacts.dmi_product_name(root)
        if product:
            extra["machine_type"] = product
        tables: dict[str, dict[int, str]] = {
            "pci_classes": {},
            "pcie_roots": {},
            "addressing_modes": {},
            "virtualization_modes": {},
        }
        geometries: dict[int, Any] = {}
        for index, handle in handles:
            bus = bus_ids.get(index, "")
            if bus:
                found = hostfacts.pci_class(bus, root)
                if found:
                    tables["pci_classes"][index] = found
                pcie = hostfacts.pcie_root(bus, root)
                if pcie:
                    tables["pcie_roots"][index] = pcie
            mode = self._get(None, "nvmlDeviceGetAddressingMode", handle)
            if mode is not None:
                name = self._enum_name("NVML_DEVICE_ADDRESSING_MODE_", _ADDRESSING, mode)
                tables["addressing_modes"][index] = name or str(mode)
            if self._mig_mode(handle)[0]:
                measured = self.measured_geometry(handle)
                if measured is not None:
                    geometries[index] = measured
            virt = self._get(None, "nvmlDeviceGetVirtualizationMode", handle)
            if virt is not None:
                name = self._enum_name("NVML_GPU_VIRTUALIZATION_MODE_", _VIRTUALIZATION, virt)
                tables["virtualization_modes"][index] = name or str(virt)
        extra.update({key: table for key, table in tables.items() if table})
        if geometries:
            extra["mig_geometry"] = geometries
        return extra

    def _bus_id(self, handle: Any) -> str:
        pci = self._get(None, "nvmlDeviceGetPciInfo", handle)
        return "" if pci is None else _text(pci.busId).upper()

    def _gpu(self, index: int, handle: Any, uuid: str, bus_id: str, by_bus: dict[str, int]) -> Gpu:
        name = _text(self._get("", "nvmlDeviceGetName", handle))
        product = product_by_name(name)
        cc = self._get(None, "nvmlDeviceGetCudaComputeCapability", handle)
        if cc:
            major, minor = int(cc[0]), int(cc[1])
        else:
            major, minor = product.compute_capability if product else (0, 0)
        memory = self._get(None, "nvmlDeviceGetMemoryInfo", handle)
        mig_capable, mig_enabled = self._mig_mode(handle)
        power_mw = self._get(0, "nvmlDeviceGetPowerManagementLimit", handle)
        return Gpu(
            index=index,
            uuid=uuid,
            product_name=name,
            brand=self._brand(handle),
            architecture=self._architecture(handle, major, minor),
            compute_capability=(major, minor),
            memory_mib=int(memory.total) // (1024 * 1024) if memory is not None else 0,
            pci_bus_id=bus_id,
            minor=int(self._get(index, "nvmlDeviceGetMinorNumber", handle)),
            numa_node=self._numa(handle, bus_id),
            nvlinks=self._nvlinks(handle, by_bus),
            mig_capable=mig_capable,
            mig_enabled=mig_enabled,
            mig_devices=self._mig_devices(index, handle, uuid, name) if mig_enabled else (),
            fabric=self._fabric(handle),
            multiprocessor_count=product.multiprocessors if product else 0,
            power_limit_w=float(power_mw) / 1000.0,
        )

    def _brand(self, handle: Any) -> str:
        value = self._get(None, "nvmlDeviceGetBrand", handle)
        if value is None:
            return ""
        return self._enum_name("NVML_BRAND_", _BRANDS, value) or "Unknown"

    def _architecture(self, handle: Any, major: int, minor: int) -> str:
        value = self._get(None, "nvmlDeviceGetArchitecture", handle)
        if value is not None:
            name = self._enum_name("NVML_DEVICE_ARCH_", _ARCHITECTURES, value)
            if name is not None:
                return name
        return architecture_from_cc(major, minor)

    def _numa(self, handle: Any, bus_id: str) -> int | None:
        node = self._get(None, "nvmlDeviceGetNumaNodeId", handle)
        if node is None and bus_id:
            try:
                text = (SYSFS_PCI_DEVICES / _sysfs_bdf(bus_id) / "numa_node").read_text()
                node = int(text.strip())
            except (OSError, ValueError):
                node = None
        return None if node is None or int(node) < 0 else int(node)

    def _nvlinks(self, handle: Any, by_bus: dict[str, int]) -> tuple[NvLink, ...]:
        enabled = self._const("NVML_FEATURE_ENABLED", 1)
        switch = self._const("NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
        counts: dict[int, int] = {}
        for link in range(self._const("NVML_NVLINK_MAX_LINKS", 18)):
            state = self._get(None, "nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                # Links are numbered from 0; the first unsupported one ends the list.
                break
            if state != enabled:
                continue
            kind = self._get(None, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            if kind == switch:
                counts[-1] = counts.get(-1, 0) + 1
                continue
            remote = self._get(None, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            peer = by_bus.get(_text(remote.busId).upper()[-12:]) if remote is not None else None
            if peer is not None:
                counts[peer] = counts.get(peer, 0) + 1
        return tuple(NvLink(peer_index=p, links=n) for p, n in sorted(counts.items()))

    def _mig_mode(self, handle: Any) -> tuple[bool, bool]:
        mode = self._get(None, "nvmlDeviceGetMigMode", handle)
        if mode is None:
            return False, False
        return True, int(mode[0]) == self._const("NVML_DEVICE_MIG_ENABLE", 1)

    def _mig_devices(
        self, parent_index: int, handle: Any, parent_uuid: str, parent_name: str
    ) -> tuple[MigDevice, ...]:
        devices: list[MigDevice] = []
        for slot in range(int(self._get(0, "nvmlDeviceGetMaxMigDeviceCount", handle))):
            mig = self._get(None, "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            if mig is None:
                continue
            gi_id = int(self._get(0, "nvmlDeviceGetGpuInstanceId", mig))
            attrs = self._get(None, "nvmlDeviceGetAttributes", mig)
            start, size = 0, 0
            gi = self._get(None, "nvmlDeviceGetGpuInstanceById", handle, gi_id)
            info = None if gi is None else self._get(None, "nvmlGpuInstanceGetInfo", gi)
            if info is not None:
                start, size = int(info.placement.start), int(info.placement.size)
            if attrs is not None:
                memory_mib = int(attrs.memorySizeMB)
            else:
                memory = self._get(None, "nvmlDeviceGetMemoryInfo", mig)
                memory_mib = int(memory.total) // (1024 * 1024) if memory is not None else 0
            slices = int(attrs.gpuInstanceSliceCount) if attrs is not None else 0
            devices.append(
                MigDevice(
                    parent_index=parent_index,
                    parent_uuid=parent_uuid,
                    index=len(devices),
                    uuid=_text(self._get("", "nvmlDeviceGetUUID", mig)),
                    profile=self._mig_profile(mig, parent_name, slices, memory_mib),
                    gi_id=gi_id,
                    ci_id=int(self._get(0, "nvmlDeviceGetComputeInstanceId", mig)),
                    placement_start=start,
                    placement_size=size,
                    memory_mib=memory_mib,
                    compute_slices=slices,
                    multiprocessor_count=int(attrs.multiprocessorCount) if attrs is not None else 0,
                    compute_instance_slices=int(getattr(attrs, "computeInstanceSliceCount", 0)),
                    engines=self._mig_engines(handle, attrs, info),
                )
            )
        return tuple(devices)

    def _mig_engines(self, handle: Any, attrs: Any, gi_info: Any) -> MigEngines | None:
        """The MIG device's engines as GFD labels them: its device attributes' shared counts,
        else the counts of its GPU-instance profile (``nvmlDeviceGetGpuInstanceProfileInfo``
        for the profile whose id the instance reports)."""
        if attrs is not None and hasattr(attrs, "sharedCopyEngineCount"):
            return MigEngines(
                copy=int(attrs.sharedCopyEngineCount),
                decoder=int(attrs.sharedDecoderCount),
                encoder=int(attrs.sharedEncoderCount),
                jpeg=int(attrs.sharedJpegCount),
                ofa=int(attrs.sharedOfaCount),
            )
        profile_id = getattr(gi_info, "profileId", None)
        if profile_id is None:
            return None
        for profile in range(self._const("NVML_GPU_INSTANCE_PROFILE_COUNT", 0)):
            info = self._get(None, "nvmlDeviceGetGpuInstanceProfileInfo", handle, profile)
            if info is not None and int(info.id) == int(profile_id):
                return MigEngines(
                    copy=int(info.copyEngineCount),
                    decoder=int(info.decoderCount),
                    encoder=int(info.encoderCount),
                    jpeg=int(info.jpegCount),
                    ofa=int(info.ofaCount),
                )
        return None

    def _mig_profile(self, mig: Any, parent_name: str, slices: int, memory_mib: int) -> str:
        """NVML names a MIG device ``<parent name> MIG <profile>``; older drivers may not."""
        name = _text(self._get("", "nvmlDeviceGetName", mig))
        _, sep, profile = name.rpartition("MIG ")
        if sep and profile:
            head, dot, tail = profile.partition(".")
            # "1c.3g.20gb": a compute instance narrower than its GPU instance.
            return tail if dot and head.endswith("c") and "g." in tail else profile
        return f"{slices}g.{math.ceil(memory_mib / 1024)}gb"

    def _fabric(self, handle: Any) -> FabricInfo | None:
        nvml = self._nvml
        info: Any = None
        struct = getattr(nvml, "c_nvmlGpuFabricInfoV_t", None)
        if struct is not None and hasattr(nvml, "nvmlDeviceGetGpuFabricInfoV"):
            candidate = struct()
            candidate.version = getattr(nvml, "nvmlGpuFabricInfo_v2", 0)
            # nvidia-ml-py hands these structs straight to C: they must go by reference.
            ref = ctypes.byref(candidate)
            if self._get(None, "nvmlDeviceGetGpuFabricInfoV", handle, ref) is not None:
                info = candidate
        if info is None and hasattr(nvml, "c_nvmlGpuFabricInfo_t"):
            candidate = nvml.c_nvmlGpuFabricInfo_t()
            ref = ctypes.byref(candidate)
            if self._get(None, "nvmlDeviceGetGpuFabricInfo", handle, ref) is not None:
                info = candidate
        if info is None:
            return None
        state = int(info.state)
        if state == self._const("NVML_GPU_FABRIC_STATE_NOT_SUPPORTED", 0):
            return None
        return FabricInfo(
            cluster_uuid=str(uuidlib.UUID(bytes=bytes(bytearray(info.clusterUuid)))),
            clique_id=int(info.cliqueId),
            state=self._enum_name("NVML_GPU_FABRIC_STATE_", _FABRIC_STATES, state) or "unknown",
            status="success" if int(info.status) == 0 else f"error {int(info.status)}",
        )

    # -- events and health --------------------------------------------------------------------

    def _ensure_event_set(self) -> Any:
        if self._event_set is not None:
            return self._event_set
        nvml = self._nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            raise BackendError(f"NVML cannot create an event set: {exc}") from None
        xid_type = int(getattr(nvml, "nvmlEventTypeXidCriticalError", 8))
        for index in range(int(self._get(0, "nvmlDeviceGetCount"))):
            handle = self._get(None, "nvmlDeviceGetHandleByIndex", index)
            if handle is not None:
                # GPUs that cannot report XIDs (some GeForce, vGPU) are simply not watched.
                self._get(None, "nvmlDeviceRegisterEvents", handle, xid_type, event_set)
        self._event_set = event_set
        return event_set

    def wait_events(self, timeout_s: float) -> list[XidEvent]:
        nvml = self._nvml
        with self._lock:
            if self._closed:
                return []
            event_set = self._ensure_event_set()
            self._waiting = True
        events: list[XidEvent] = []
        try:
            timeout_ms = max(int(timeout_s * 1000), 0)
            while True:
                try:
                    data = nvml.nvmlEventSetWait_v2(event_set, timeout_ms)
                except nvml.NVMLError:
                    break  # timeout (or the set was torn down): what arrived so far
                gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
                events.append(
                    XidEvent(
                        gpu_uuid=_text(self._get("", "nvmlDeviceGetUUID", data.device)),
                        xid=int(data.eventData),
                        gi_id=None if gi == _NO_ID else gi,
                        ci_id=None if ci == _NO_ID else ci,
                        timestamp=time.time(),
                    )
                )
                timeout_ms = 0  # drain whatever else is already queued
        finally:
            with self._lock:
                self._waiting = False
                if self._closed:
                    self._free()
        return events

    def events(self) -> EventHub:
        return self._hub

    def telemetry(self) -> TelemetryAccess:
        """The exporter reads through this backend's NVML library; XIDs come from the hub."""
        return TelemetryAccess(nvml=self._nvml, xids=self._hub.last_xids, hub=self._hub)

    # -- compute mode (ComputeModeBackend) --------------------------------------------------------

    def compute_mode(self, gpu: int) -> ComputeMode:
        value = self._call(f"GPU {gpu} compute mode", "nvmlDeviceGetComputeMode", self._handle(gpu))
        for suffix, mode in _COMPUTE_MODES.items():
            if self._const("NVML_COMPUTEMODE_" + suffix, _COMPUTE_MODE_VALUES[suffix]) == value:
                return mode
        raise BackendError(f"GPU {gpu}: NVML reports an unknown compute mode {value}")

    def set_compute_mode(self, gpu: int, mode: ComputeMode) -> None:
        """Needs root; the mode lasts until changed or the node reboots (not across a reboot:
        NVIDIA's daemon setup sets it each time, and so does kgpu)."""
        suffix = next(s for s, m in _COMPUTE_MODES.items() if m == mode)
        value = self._const("NVML_COMPUTEMODE_" + suffix, _COMPUTE_MODE_VALUES[suffix])
        self._call(
            f"GPU {gpu}: setting compute mode {mode}",
            "nvmlDeviceSetComputeMode",
            self._handle(gpu),
            value,
        )

    def probe(self, gpu_uuid: str) -> bool:
        if self._closed:
            return False
        handle = self._get(None, "nvmlDeviceGetHandleByUUID", gpu_uuid)
        return handle is not None and self._get(None, "nvmlDeviceGetMemoryInfo", handle) is not None

    def _free(self) -> None:
        if self._event_set is not None:
            self._get(None, "nvmlEventSetFree", self._event_set)
            self._event_set = None
        self._get(None, "nvmlShutdown")

    def close(self) -> None:
        self._hub.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if not self._waiting:
                self._free()
