"""The NVML backend against a stand-in ``pynvml`` module.

The fake follows nvidia-ml-py's calling conventions (functions raising ``NVMLError`` subclasses
with NVML return codes, ctypes-like structs with the same field names) so the backend code that
runs here is the code that runs on a real node; tests/data/h100-nvml-snapshot.json holds what it
read from a real H100.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kgpu.hardware import nvml as nvml_module
from kgpu.hardware.backend import BackendError
from kgpu.hardware.nvml import NOT_FOUND_MESSAGE, NvmlBackend

NOT_SUPPORTED, LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED, TIMEOUT, NOT_FOUND = 3, 12, 9, 10, 6
CLUSTER = bytes(range(16))


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class FabricStruct(ctypes.Structure):
    """nvidia-ml-py's c_nvmlGpuFabricInfoV_t layout: the backend must pass it by reference."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_ubyte * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_uint),
        ("healthMask", ctypes.c_uint),
    ]


class FakeNvml:
    """A tiny NVML: two GPUs described by dicts; a key missing from a GPU's dict makes that call
    raise NOT_SUPPORTED, as NVML does for features a GPU lacks."""

    NVMLError = NVMLError
    NVML_ERROR_LIBRARY_NOT_FOUND = LIBRARY_NOT_FOUND
    NVML_ERROR_DRIVER_NOT_LOADED = DRIVER_NOT_LOADED
    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_DEVICE_TYPE_GPU = 0
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_BRAND_NVIDIA = 14
    NVML_BRAND_GEFORCE = 5
    NVML_DEVICE_ARCH_HOPPER = 9
    NVML_DEVICE_ARCH_TURING = 6
    NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
    NVML_GPU_FABRIC_STATE_COMPLETED = 3
    nvmlEventTypeXidCriticalError = 8
    nvmlGpuFabricInfo_v2 = 2
    c_nvmlGpuFabricInfoV_t = FabricStruct

    def __init__(self, gpus: list[dict[str, Any]], init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.events: list[SimpleNamespace] = []
        self.cond = threading.Condition()
        self.calls: list[str] = []
        self.shutdown = False

    # -- helpers
    def _field(self, handle: int, key: str) -> Any:
        gpu = self.gpus[handle]
        if gpu.get("lost"):
            raise NVMLError(15)  # GPU_IS_LOST
        if key not in gpu:
            raise NVMLError(NOT_SUPPORTED)
        return gpu[key]

    # -- system
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.124.06"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12080

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        for i, gpu in enumerate(self.gpus):
            if gpu["uuid"] == uuid:
                if gpu.get("lost"):
                    raise NVMLError(15)
                return i
        raise NVMLError(NOT_FOUND)

    # -- device
    def nvmlDeviceGetName(self, h: Any) -> Any:
        if isinstance(h, tuple):  # MIG handle
            return self.gpus[h[0]]["mig"][h[1]]["name"]
        return self._field(h, "name")

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        if isinstance(h, tuple):
            return str(self.gpus[h[0]]["mig"][h[1]]["uuid"])
        return str(self._field(h, "uuid"))

    def nvmlDeviceGetBrand(self, h: int) -> int:
        return int(self._field(h, "brand"))

    def nvmlDeviceGetArchitecture(self, h: int) -> int:
        return int(self._field(h, "arch"))

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return tuple(self._field(h, "cc"))  # type: ignore[return-value]

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> SimpleNamespace:
        if isinstance(h, tuple):
            return SimpleNamespace(total=self.gpus[h[0]]["mig"][h[1]]["mem"] * 1024 * 1024)
        return SimpleNamespace(total=self._field(h, "mem") * 1024 * 1024)

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._field(h, "bus").encode())

    def nvmlDeviceGetMinorNumber(self, h: int) -> int:
        return int(self._field(h, "minor"))

    def nvmlDeviceGetNumaNodeId(self, h: int) -> int:
        return int(self._field(h, "numa"))

    def nvmlDeviceGetPowerManagementLimit(self, h: int) -> int:
        return int(self._field(h, "power_mw"))

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        links = self._field(h, "links")
        if link >= len(links):
            raise NVMLError(NOT_SUPPORTED)
        return 1

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:
        return 2 if self._field(h, "links")[link] == "switch" else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> SimpleNamespace:
        return SimpleNamespace(busId=self._field(h, "links")[link])

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        return list(self._field(h, "mig_mode"))

    def nvmlDeviceGetMaxMigDeviceCount(self, h: int) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: int, i: int) -> tuple[int, int]:
        if i >= len(self.gpus[h].get("mig", [])):
            raise NVMLError(NOT_FOUND)
        return (h, i)

    def nvmlDeviceGetGpuInstanceId(self, h: tuple[int, int]) -> int:
        return int(self.gpus[h[0]]["mig"][h[1]]["gi"])

    def nvmlDeviceGetComputeInstanceId(self, h: tuple[int, int]) -> int:
        return 0

    def nvmlDeviceGetAttributes(self, h: tuple[int, int]) -> SimpleNamespace:
        mig = self.gpus[h[0]]["mig"][h[1]]
        return SimpleNamespace(
            memorySizeMB=mig["mem"],
            gpuInstanceSliceCount=mig["slices"],
            multiprocessorCount=16 * mig["slices"],
        )

    def nvmlDeviceGetGpuInstanceById(self, h: int, gi: int) -> tuple[int, int]:
        return (h, gi)

    def nvmlGpuInstanceGetInfo(self, gi: tuple[int, int]) -> SimpleNamespace:
        for mig in self.gpus[gi[0]]["mig"]:
            if mig["gi"] == gi[1]:
                return SimpleNamespace(
                    placement=SimpleNamespace(start=mig["start"], size=mig["size"])
                )
        raise NVMLError(NOT_FOUND)

    def nvmlDeviceGetGpuFabricInfoV(self, h: int, ref: Any) -> int:
        fabric = self._field(h, "fabric")
        info = ref._obj  # a ctypes.byref() of the struct, as C needs; a bare struct would crash
        assert isinstance(info, FabricStruct) and info.version == 2
        info.clusterUuid = (ctypes.c_ubyte * 16)(*CLUSTER)
        info.cliqueId, info.state, info.status = fabric
        return 0

    # -- events
    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, h: int, kind: int, es: str) -> None:
        self.calls.append(f"register {h}")
        self._field(h, "xid_events")

    def nvmlEventSetWait_v2(self, es: str, timeout_ms: int) -> SimpleNamespace:
        with self.cond:
            if not self.events:
                self.cond.wait(timeout_ms / 1000)
            if not self.events:
                raise NVMLError(TIMEOUT)
            return self.events.pop(0)

    def nvmlEventSetFree(self, es: str) -> None:
        self.calls.append("free")

    def push_event(self, handle: int, xid: int, gi: int = 0xFFFFFFFF, ci: int = 0xFFFFFFFF) -> None:
        with self.cond:
            self.events.append(
                SimpleNamespace(
                    device=handle,
                    eventType=8,
                    eventData=xid,
                    gpuInstanceId=gi,
                    computeInstanceId=ci,
                )
            )
            self.cond.notify_all()


def h100(index: int, **overrides: Any) -> dict[str, Any]:
    gpu: dict[str, Any] = {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-0000000{index}-1111-2222-3333-444444444444",
        "brand": 14,
        "arch": 9,
        "cc": (9, 0),
        "mem": 81559,
        "bus": f"00000000:{0x1B + index:02X}:00.0",
        "minor": index,
        "numa": 0,
        "power_mw": 700000,
        "links": ["switch"] * 18,
        "mig_mode": (0, 0),
        "xid_events": True,
    }
    gpu.update(overrides)
    return gpu


def test_full_discovery() -> None:
    mig = [
        {
            "name": "NVIDIA H100 80GB HBM3 MIG 3g.40gb",
            "uuid": "MIG-a",
            "gi": 1,
            "start": 0,
            "size": 4,
            "mem": 40320,
            "slices": 3,
        },
        {
            "name": "NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb",
            "uuid": "MIG-b",
            "gi": 2,
            "start": 4,
            "size": 4,
            "mem": 40320,
            "slices": 3,
        },
    ]
    fake = FakeNvml([h100(0), h100(1, mig_mode=(1, 1), mig=mig, fabric=(5, 3, 0))])
    machine = NvmlBackend(fake).snapshot()
    assert machine.driver_version == "570.124.06" and machine.cuda_version == "12.8"
    g0, g1 = machine.gpus
    assert g0.product_name == "NVIDIA H100 80GB HBM3" and g0.brand == "Nvidia"
    assert g0.architecture == "hopper" and g0.cc == "9.0" and g0.memory_mib == 81559
    assert g0.pci_bus_id == "00000000:1B:00.0" and g0.numa_node == 0 and g0.minor == 0
    assert g0.nvlinks[0].peer_index == -1 and g0.nvlinks[0].links == 18
    assert g0.mig_capable and not g0.mig_enabled and g0.fabric is None
    assert g0.power_limit_w == 700.0 and g0.multiprocessor_count == 132  # from the product table
    assert g1.mig_enabled and [d.profile for d in g1.mig_devices] == ["3g.40gb", "3g.40gb"]
    assert [(d.gi_id, d.placement_start, d.placement_size) for d in g1.mig_devices] == [
        (1, 0, 4),
        (2, 4, 4),
    ]
    assert g1.mig_devices[0].parent_uuid == g1.uuid and g1.mig_devices[0].multiprocessor_count == 48
    assert g1.fabric is not None and g1.fabric.clique_id == 5 and g1.fabric.state == "completed"
    assert g1.fabric.cluster_uuid == "00010203-0405-0607-0809-0a0b0c0d0e0f"


def test_unsupported_calls_leave_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml_module, "SYSFS_PCI_DEVICES", tmp_path)
    bare = {
        "name": "NVIDIA GeForce RTX 2080 Ti",
        "uuid": "GPU-x",
        "cc": (7, 5),
        "mem": 11264,
        "bus": "00000000:01:00.0",
    }
    fake = FakeNvml([bare])
    gpu = NvmlBackend(fake).snapshot().gpus[0]
    assert gpu.product_name == "NVIDIA GeForce RTX 2080 Ti" and gpu.memory_mib == 11264
    assert gpu.architecture == "turing"  # from compute capability when NVML cannot say
    assert gpu.brand == "" and gpu.nvlinks == () and not gpu.mig_capable and gpu.fabric is None
    assert gpu.minor == 0 and gpu.power_limit_w == 0.0
    assert gpu.numa_node is None  # not from NVML, and sysfs (patched empty here) has no entry


def test_numa_falls_back_to_sysfs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    device = tmp_path / "0000:3b:00.0"
    device.mkdir()
    (device / "numa_node").write_text("1\n")
    (tmp_path / "0000:3c:00.0").mkdir()
    (tmp_path / "0000:3c:00.0" / "numa_node").write_text("-1\n")  # no NUMA affinity
    monkeypatch.setattr(nvml_module, "SYSFS_PCI_DEVICES", tmp_path)
    gpus = [h100(0, bus="00000000:3B:00.0"), h100(1, bus="00000000:3C:00.0")]
    for gpu in gpus:
        del gpu["numa"]
    machine = NvmlBackend(FakeNvml(gpus)).snapshot()
    assert [g.numa_node for g in machine.gpus] == [1, None]


def test_linked_gpus_resolve_peers_by_pci_bus() -> None:
    a = h100(0, links=["00000000:1C:00.0"] * 4)
    b = h100(1, links=["00000000:1B:00.0"] * 4)
    machine = NvmlBackend(FakeNvml([a, b])).snapshot()
    assert machine.nvlink_connected(0, 1) == 4 and machine.gpus[0].nvlink_peers == (1,)


@pytest.mark.parametrize("code", [LIBRARY_NOT_FOUND, DRIVER_NOT_LOADED])
def test_missing_nvml_says_what_to_do(code: int) -> None:
    with pytest.raises(BackendError) as info:
        NvmlBackend(FakeNvml([], init_error=code))
    assert str(info.value) == NOT_FOUND_MESSAGE
    assert "--machine" in str(info.value)


def test_other_init_failures_are_backend_errors() -> None:
    with pytest.raises(BackendError, match="NVML could not start"):
        NvmlBackend(FakeNvml([], init_error=999))


def test_missing_pynvml_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    with pytest.raises(BackendError, match="nvidia-ml-py is not installed"):
        NvmlBackend()


def test_real_pynvml_without_a_driver_explains_itself() -> None:
    """On a machine without the NVIDIA driver (CI), the real library fails cleanly."""
    try:
        backend = NvmlBackend()
    except BackendError as exc:
        assert str(exc) == NOT_FOUND_MESSAGE
    else:  # a GPU node: discovery must work instead
        try:
            assert backend.snapshot().profile == "nvml"
        finally:
            backend.close()


def test_xid_events_and_probe() -> None:
    fake = FakeNvml([h100(0), h100(1, xid_events=None)])
    del fake.gpus[1]["xid_events"]  # this GPU cannot report XIDs
    backend = NvmlBackend(fake)
    assert backend.wait_events(0.01) == []
    assert fake.calls[:2] == ["register 0", "register 1"]
    threading.Timer(0.05, fake.push_event, args=(0, 79)).start()
    events = backend.wait_events(5.0)
    assert [(e.gpu_uuid, e.xid, e.gi_id) for e in events] == [(fake.gpus[0]["uuid"], 79, None)]
    fake.push_event(0, 48, gi=2, ci=0)
    assert [(e.gi_id, e.ci_id) for e in backend.wait_events(1.0)] == [(2, 0)]
    assert backend.probe(fake.gpus[1]["uuid"])
    fake.gpus[1]["lost"] = True
    assert not backend.probe(fake.gpus[1]["uuid"])
    assert [g.index for g in backend.snapshot().gpus] == [0]  # the lost GPU is left out
    backend.close()
    assert fake.shutdown and "free" in fake.calls
    assert not backend.probe(fake.gpus[0]["uuid"])


def test_close_while_waiting_frees_after_the_wait() -> None:
    fake = FakeNvml([h100(0)])
    backend = NvmlBackend(fake)
    waiter = threading.Thread(target=backend.wait_events, args=(0.3,))
    waiter.start()
    time.sleep(0.05)
    backend.close()
    assert "free" not in fake.calls  # not torn down under the waiter
    waiter.join(timeout=5)
    assert "free" in fake.calls and fake.shutdown
