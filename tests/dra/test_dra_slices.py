"""ResourceSlices from hardware, publishing, and DeviceClasses: real v1 schema, upstream names."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from kgpu.dra.classes import device_classes
from kgpu.dra.slices import resource_slices
from kgpu.drivers.publish import publish_slices, unpublish_slices
from kgpu.hardware.mig import apply_layout
from kgpu.hardware.profiles import load_machine
from kgpu.store import MemoryStore

K8S = "1.34.0"  # first release with resource.k8s.io/v1
REPO = Path(__file__).resolve().parents[2]
API = "resource.k8s.io/v1"


def valid(obj: dict) -> None:
    kubernetes_validate.validate(obj, K8S, strict=True)


def attrs(device: dict) -> dict:
    return {k: next(iter(v.values())) for k, v in device["attributes"].items()}


def test_gb200_node_slice_matches_upstream_shape() -> None:
    machine = load_machine("gb200", hostname="n1", clique="c0ffee00-0000-4000-8000-000000000001.3")
    (s,) = resource_slices(machine, "n1")
    valid(s)
    spec = s["spec"]
    assert spec["driver"] == "gpu.nvidia.com"
    assert spec["nodeName"] == "n1"
    assert spec["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    a = attrs(spec["devices"][2])
    assert a["type"] == "gpu" and a["index"] == 2 and a["minor"] == 2
    assert a["productName"] == "NVIDIA GB200"
    assert a["architecture"] == "blackwell"
    assert a["uuid"] == machine.gpus[2].uuid
    assert a["driverVersion"] == "570.133.20"
    assert a["cudaDriverVersion"] == "12.8.0"
    assert a["cudaComputeCapability"] == "10.0.0"
    assert a["pcieBusID"] == machine.gpus[2].pci_bus_id
    assert "resource.kubernetes.io/pcieRoot" in a
    assert a["cliqueID"] == "c0ffee00-0000-4000-8000-000000000001.3"
    assert spec["devices"][2]["capacity"]["memory"] == {"value": "189471Mi"}


def test_static_mig_devices_use_upstream_canonical_names() -> None:
    machine = load_machine("a100-80gb", hostname="n1")
    machine = apply_layout(machine, {0: {"3g.40gb": 1, "1g.10gb": 2}})
    slices = resource_slices(machine, "n1")
    for s in slices:
        valid(s)
    devices = [d for s in slices for d in s["spec"]["devices"]]
    names = [d["name"] for d in devices]
    # the MIG GPU is not offered whole; its MIG devices are
    assert "gpu-0" not in names
    mig = [d for d in devices if attrs(d)["type"] == "mig"]
    assert len(mig) == 3
    by_profile = {attrs(d)["profile"]: d for d in mig}
    three = by_profile["3g.40gb"]
    assert three["name"] == "gpu-0-mig-3g40gb-9-0"  # gpu-<index>-mig-<profile>-<id>-<start>
    a = attrs(three)
    assert a["parentUUID"] == machine.gpus[0].uuid and a["parentIndex"] == 0
    assert three["capacity"]["multiprocessors"] == {"value": "42"}
    assert sum(k.startswith("memorySlice") for k in three["capacity"]) == 4
    one = [d for d in mig if attrs(d)["profile"] == "1g.10gb"]
    assert sorted(d["name"] for d in one) == ["gpu-0-mig-1g10gb-19-4", "gpu-0-mig-1g10gb-19-5"]
    assert [k for k in one[0]["capacity"] if k.startswith("memorySlice")] == ["memorySlice4"]


def test_partitionable_devices_consume_shared_counters_within_v1_limits() -> None:
    machine = load_machine("dgx-h100", hostname="n1")
    slices = resource_slices(machine, "n1", partitionable=True)
    assert len(slices) > 1
    sets = {c["name"] for s in slices for c in s["spec"].get("sharedCounters", [])}
    for s in slices:
        valid(s)
        spec = s["spec"]
        assert spec["pool"]["resourceSliceCount"] == len(slices)
        assert sum(len(c["counters"]) for c in spec.get("sharedCounters", [])) <= 32
        # 1.35: a slice holds counter sets or devices, never both
        assert not (spec.get("sharedCounters") and spec.get("devices"))
        assert len(spec.get("devices", [])) <= 64
        for d in spec.get("devices", []):
            for use in d.get("consumesCounters", []):
                assert use["counterSet"] in sets  # defined by a counter slice of the pool
    devices = [d for s in slices for d in s["spec"].get("devices", [])]
    full = next(d for d in devices if d["name"] == "gpu-0")
    assert len(full["consumesCounters"][0]["counters"]) == 8
    seven = [d for d in devices if d["name"].startswith("gpu-0-mig-1g10gb-19-")]
    assert len(seven) == 7  # every placement of the profile


def test_pool_is_split_when_it_exceeds_the_device_limit() -> None:
    machine = load_machine("dgx-h100", hostname="n1")
    slices = resource_slices(machine, "n1", max_devices_per_slice=3, generation=4)
    assert [len(s["spec"]["devices"]) for s in slices] == [3, 3, 2]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    assert {s["spec"]["pool"]["generation"] for s in slices} == {4}
    assert len({s["metadata"]["name"] for s in slices}) == 3


def test_publish_bumps_generation_replaces_stale_and_spares_other_drivers() -> None:
    store = MemoryStore()
    other = {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": "n1-compute-domain.nvidia.com-0"},
        "spec": {
            "driver": "compute-domain.nvidia.com",
            "nodeName": "n1",
            "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "channel-0"}],
        },
    }
    store.create(other)
    machine = load_machine("dgx-h100", hostname="n1")
    gen = publish_slices(
        store, "gpu.nvidia.com", "n1", resource_slices(machine, "n1", max_devices_per_slice=3)
    )
    assert gen == 1
    assert (
        publish_slices(
            store, "gpu.nvidia.com", "n1", resource_slices(machine, "n1", max_devices_per_slice=3)
        )
        == 1
    )
    # MIG reconfigured: fewer devices, one slice; the old three are gone
    changed = apply_layout(machine, {0: {"7g.80gb": 1}})
    assert publish_slices(store, "gpu.nvidia.com", "n1", resource_slices(changed, "n1")) == 2
    mine = [s for s in store.list(API, "ResourceSlice") if s["spec"]["driver"] == "gpu.nvidia.com"]
    assert len(mine) == 1 and mine[0]["spec"]["pool"]["generation"] == 2
    assert any(d["name"].startswith("gpu-0-mig-7g80gb-0-0") for d in mine[0]["spec"]["devices"])
    assert (
        store.get(API, "ResourceSlice", "n1-compute-domain.nvidia.com-0")["spec"] == other["spec"]
    )
    unpublish_slices(store, "gpu.nvidia.com", "n1")
    assert [s["spec"]["driver"] for s in store.list(API, "ResourceSlice")] == [
        "compute-domain.nvidia.com"
    ]


def test_device_classes_are_upstream_and_valid(acceptance: Path) -> None:
    classes = device_classes()
    assert [c["metadata"]["name"] for c in classes] == [
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "compute-domain-daemon.nvidia.com",
        "compute-domain-default-channel.nvidia.com",
    ]
    for c in classes:
        valid(c)
    deployed = [
        d for d in yaml.safe_load_all((REPO / "deploy" / "deviceclasses.yaml").read_text()) if d
    ]
    assert deployed == classes
    values = yaml.safe_load((acceptance / "seed-guides" / "dra-driver-values.yaml").read_text())
    only_cd = device_classes(
        gpus=values["resources"]["gpus"]["enabled"] is False, compute_domains=True
    )
    assert len(only_cd) == 2


@pytest.mark.parametrize("profile", ["gb200", "dgx-h100", "a100-80gb", "t4", "rtx-4090"])
def test_every_profile_publishes_valid_slices(profile: str) -> None:
    machine = load_machine(profile, hostname="x")
    for partitionable in (False, True):
        for s in resource_slices(machine, "node-x", partitionable=partitionable):
            valid(s)


def test_slices_from_a_recorded_real_h100() -> None:
    """The NVML snapshot of a real H100 (driver 580.159.04) published as upstream would."""
    from kgpu.dra.allocator import allocate
    from kgpu.hardware.serialize import load_snapshot

    machine = load_snapshot(REPO / "tests" / "data" / "h100-nvml-snapshot.json")
    (s,) = resource_slices(machine, "h100-node")
    valid(s)
    a = attrs(s["spec"]["devices"][0])
    assert a["driverVersion"] == "580.159.4"  # semver drops the leading zero, as upstream
    assert a["cudaDriverVersion"] == "13.0.0"
    assert a["cudaComputeCapability"] == "9.0.0"
    assert a["productName"] == "NVIDIA H100 80GB HBM3"
    partitioned = resource_slices(machine, "h100-node", partitionable=True)
    for p in partitioned:
        valid(p)
    claim = {
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "m",
                        "exactly": {
                            "deviceClassName": "mig.nvidia.com",
                            "selectors": [
                                {
                                    "cel": {
                                        "expression": "device.capacity['gpu.nvidia.com'].memory"
                                        ".compareTo(quantity('20Gi')) >= 0 && "
                                        "device.capacity['gpu.nvidia.com'].memory"
                                        ".compareTo(quantity('40Gi')) < 0"
                                    }
                                }
                            ],
                        },
                    }
                ]
            }
        },
    }
    got = allocate({"name": "h100-node"}, [claim], classes=device_classes(), slices=partitioned)
    assert got is not None
    # NVML's "2g.20gb" has 20096 MiB (< 20Gi) and "3g.40gb" 40448 MiB (< 40Gi)
    assert got[0]["devices"]["results"][0]["device"] == "gpu-0-mig-3g40gb-9-0"
