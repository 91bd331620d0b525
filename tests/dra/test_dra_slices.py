"""ResourceSlices from hardware, publishing, and DeviceClasses: the device model of NVIDIA's
current DRA driver (names, attributes, capacities, dynamic-MIG counters), real v1 schemas for
1.34 and 1.35, the API server's limits for each, and upstream's own test tables as data."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kgpu.dra.classes import device_classes
from kgpu.dra.devices import partition_capacities, pci_bus_id
from kgpu.dra.engines import profile_engines
from kgpu.dra.slices import (
    kubernetes_minor,
    pool_problems,
    resource_slices,
    slice_problems,
)
from kgpu.drivers.publish import publish_slices, unpublish_slices
from kgpu.hardware.mig import apply_layout, geometry_for, geometry_for_product
from kgpu.hardware.profiles import load_machine
from kgpu.quantity import format_binary, parse_quantity
from kgpu.store import MemoryStore

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
API = "resource.k8s.io/v1"
VERSIONS = ("1.34", "1.35")  # resource.k8s.io/v1 is served from 1.34
UPSTREAM_GPU_ATTRS = {
    "type",
    "uuid",
    "productName",
    "brand",
    "architecture",
    "cudaComputeCapability",
    "driverVersion",
    "cudaDriverVersion",
    "resource.kubernetes.io/pciBusID",
    "resource.kubernetes.io/pcieRoot",
}


def valid(obj: dict[str, Any], version: str = "1.34") -> None:
    kubernetes_validate.validate(obj, f"{version}.0", strict=True)


def within_limits(slices: list[dict[str, Any]], version: str) -> None:
    problems = [p for s in slices for p in slice_problems(s, version)] + pool_problems(slices)
    assert problems == []


def attrs(device: dict[str, Any]) -> dict[str, Any]:
    return {k: next(iter(v.values())) for k, v in device["attributes"].items()}


def devices_of(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for s in slices for d in s["spec"].get("devices") or []]


def test_gb200_node_slice_matches_upstream_shape() -> None:
    machine = load_machine("gb200", hostname="n1", clique="c0ffee00-0000-4000-8000-000000000001.3")
    (s,) = resource_slices(machine, "n1")
    for version in VERSIONS:
        valid(s, version)
    spec = s["spec"]
    assert spec["driver"] == "gpu.nvidia.com"
    assert spec["nodeName"] == "n1"
    assert spec["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    device = spec["devices"][2]
    a = attrs(device)
    # upstream's attributes (no index, minor or pcieBusID any more), plus kgpu's cliqueID
    assert set(a) == UPSTREAM_GPU_ATTRS | {"cliqueID"}
    assert a["type"] == "gpu"
    assert a["productName"] == "NVIDIA GB200"
    assert a["architecture"] == "Blackwell"  # go-nvlib's name, as upstream publishes it
    assert a["uuid"] == machine.gpus[2].uuid
    assert a["driverVersion"] == "570.133.20"
    assert a["cudaDriverVersion"] == "12.8.0"
    assert a["cudaComputeCapability"] == "10.0.0"
    # NVML's 00000018:01:00.0 in the standard attribute's extended BDF form
    assert machine.gpus[2].pci_bus_id == "00000018:01:00.0"
    assert a["resource.kubernetes.io/pciBusID"] == "0018:01:00.0"
    assert a["resource.kubernetes.io/pcieRoot"] == "pci0018:01"
    assert a["cliqueID"] == "c0ffee00-0000-4000-8000-000000000001.3"
    assert device["capacity"] == {"memory": {"value": "189471Mi"}}


def test_devices_are_named_by_minor_number_in_pci_order() -> None:
    machine = load_machine("dgx-h100", hostname="n1")
    # a node whose minor numbers run the other way round from its NVML indices
    gpus = tuple(replace(g, minor=7 - g.index) for g in machine.gpus)
    machine = replace(machine, gpus=gpus)
    machine = apply_layout(machine, {0: {"7g.80gb": 1}})
    (s,) = resource_slices(machine, "n1")
    names = [d["name"] for d in s["spec"]["devices"]]
    assert names == ["gpu-7-mig-7g80gb-0-0", *(f"gpu-{m}" for m in range(6, -1, -1))]
    buses = [attrs(d)["resource.kubernetes.io/pciBusID"] for d in s["spec"]["devices"]]
    assert buses == sorted(buses)


@pytest.mark.parametrize(
    "case",
    yaml.safe_load((DATA / "upstream-device-attributes.yaml").read_text())["cases"],
    ids=lambda c: c["upstream"].split(":")[0] + "-" + c["type"],
)
def test_attribute_names_are_upstreams(case: dict[str, Any]) -> None:
    machine = load_machine(case["machine"], hostname="n")
    if case.get("mig_layout"):
        machine = apply_layout(machine, {0: case["mig_layout"]})
    machine.extra["addressing_modes"] = {g.index: "HMM" for g in machine.gpus}
    slices = resource_slices(machine, "n", partitionable=case["mode"] == "dynamic")
    device = next(d for d in devices_of(slices) if attrs(d)["type"] == case["type"])
    assert sorted(device["attributes"]) == sorted(case["attributes"])
    assert attrs(device)["addressingMode"] == "HMM"


def test_static_mig_devices_use_upstream_canonical_names_and_capacities() -> None:
    machine = load_machine("a100-80gb", hostname="n1")
    machine = apply_layout(machine, {0: {"3g.40gb": 1, "1g.10gb": 1, "1g.10gb+me": 1}})
    slices = resource_slices(machine, "n1")
    for s in slices:
        valid(s)
    devices = devices_of(slices)
    # the MIG GPU is not offered whole; its MIG devices are, sorted by name as upstream
    assert [d["name"] for d in devices] == [
        "gpu-0-mig-1g10gb-19-4",
        "gpu-0-mig-1g10gb-me-20-5",
        "gpu-0-mig-3g40gb-9-0",
    ]
    one, me, three = devices
    a = attrs(three)
    assert a["parentUUID"] == machine.gpus[0].uuid and a["profile"] == "3g.40gb"
    assert a["uuid"] == next(m.uuid for m in machine.gpus[0].mig_devices if m.profile == "3g.40gb")
    assert three["capacity"] == {
        "multiprocessors": {"value": "42"},
        "copyEngines": {"value": "3"},
        "decoders": {"value": "2"},
        "encoders": {"value": "0"},
        "jpegEngines": {"value": "0"},
        "ofaEngines": {"value": "0"},
        "memory": {"value": "40192Mi"},
        **{f"memorySlice{i}": {"value": "1"} for i in range(4)},
    }
    # only the +me instance has the media engines
    assert (one["capacity"]["jpegEngines"], me["capacity"]["jpegEngines"]) == (
        {"value": "0"},
        {"value": "1"},
    )
    assert [k for k in one["capacity"] if k.startswith("memorySlice")] == ["memorySlice4"]


def test_dynamic_mig_counter_set_and_consumption() -> None:
    machine = load_machine("dgx-h100", hostname="n1")
    counters, devices, *_ = resource_slices(machine, "n1", partitionable=True)
    cset = counters["spec"]["sharedCounters"][0]
    assert cset["name"] == "gpu-0-counter-set"
    assert cset["counters"] == {
        "multiprocessors": {"value": "132"},
        "copy-engines": {"value": "8"},
        "decoders": {"value": "7"},
        "encoders": {"value": "0"},
        "jpeg-engines": {"value": "7"},
        "ofa-engines": {"value": "1"},
        "memory": {"value": "81152Mi"},
        **{f"memory-slice-{i}": {"value": "1"} for i in range(8)},
    }
    by_name = {d["name"]: d for d in devices["spec"]["devices"]}
    # the full GPU: the largest capacities of any profile, consuming the whole set
    full = by_name["gpu-0"]
    assert full["consumesCounters"] == [{"counterSet": cset["name"], "counters": cset["counters"]}]
    assert full["capacity"]["memory"] == {"value": "81152Mi"}  # the 7g profile's
    # a placement: no UUID until it exists, its capacities and memory slices as counters
    two = by_name["gpu-0-mig-2g20gb-14-4"]
    assert "uuid" not in two["attributes"] and attrs(two)["profile"] == "2g.20gb"
    assert two["capacity"] == {
        "multiprocessors": {"value": "32"},
        "copyEngines": {"value": "2"},
        "decoders": {"value": "2"},
        "encoders": {"value": "0"},
        "jpegEngines": {"value": "2"},
        "ofaEngines": {"value": "0"},
        "memory": {"value": "20096Mi"},
    }
    (use,) = two["consumesCounters"]
    assert use["counters"] == {
        "multiprocessors": {"value": "32"},
        "copy-engines": {"value": "2"},
        "decoders": {"value": "2"},
        "encoders": {"value": "0"},
        "jpeg-engines": {"value": "2"},
        "ofa-engines": {"value": "0"},
        "memory": {"value": "20096Mi"},
        "memory-slice-4": {"value": "1"},
        "memory-slice-5": {"value": "1"},
    }
    # every placement of every profile, sorted by name
    geometry = geometry_for(machine.gpus[0])
    assert geometry is not None
    assert len(by_name) == 1 + sum(len(p.placements) for p in geometry.profiles.values())
    assert list(by_name) == sorted(by_name)


@pytest.mark.parametrize(
    ("layout", "full", "placements"),
    [
        ("a100-off", True, False),  # Ampere, MIG off: a reset would be needed, full GPU only
        ("a100-on", False, True),  # Ampere, MIG on: placements, not the whole GPU
        ("h100-on", True, True),  # Hopper: both, whatever the mode is now
    ],
)
def test_which_gpus_take_part_in_dynamic_mig(layout: str, full: bool, placements: bool) -> None:
    machine = load_machine("a100-80gb" if layout.startswith("a100") else "h200", hostname="n")
    if layout.endswith("-on"):
        machine = apply_layout(machine, {0: {"1g.10gb" if "a100" in layout else "1g.18gb": 1}})
    slices = resource_slices(machine, "n", partitionable=True)
    names = [d["name"] for d in devices_of(slices)]
    has_counters = any(s["spec"].get("sharedCounters") for s in slices)
    assert ("gpu-0" in names) is full
    assert any("-mig-" in n for n in names) is placements
    assert has_counters is placements
    within_limits(slices, "1.35")


@pytest.mark.parametrize("profile", ["gb200", "dgx-h100", "a100-80gb", "p4de.24xlarge", "t4"])
@pytest.mark.parametrize("version", VERSIONS)
def test_every_profile_publishes_valid_slices_within_the_version_limits(
    profile: str, version: str
) -> None:
    machine = load_machine(profile, hostname="x")
    if profile == "a100-80gb":
        machine = apply_layout(machine, {0: {"3g.40gb": 2}})
    for partitionable in (False, True):
        slices = resource_slices(
            machine, "node-x", partitionable=partitionable, kubernetes_version=version
        )
        for s in slices:
            valid(s, version)
            assert s["spec"]["pool"]["resourceSliceCount"] == len(slices)
        within_limits(slices, version)


def test_dynamic_mig_slices_follow_the_kubernetes_version() -> None:
    machine = load_machine("dgx-h100", hostname="n1")
    # 1.34: each GPU's counter set and its consumers in one slice
    old = resource_slices(machine, "n1", partitionable=True, kubernetes_version="v1.34.2")
    assert len(old) == 8
    for s in old:
        (cset,) = s["spec"]["sharedCounters"]
        assert {u["counterSet"] for d in s["spec"]["devices"] for u in d["consumesCounters"]} == {
            cset["name"]
        }
    # 1.35+: counter sets first, in slices of their own, then one slice of devices per GPU
    new = resource_slices(machine, "n1", partitionable=True, kubernetes_version="1.35")
    assert len(new) == 9
    assert [len(s["spec"].get("sharedCounters") or []) for s in new] == [8] + [0] * 8
    assert "devices" not in new[0]["spec"]
    assert devices_of(new) == devices_of(old)
    # the 1.34 shape is what a 1.35 API server refuses, and the other way round
    assert [str(p) for p in slice_problems(old[0], "1.35")] == [
        "spec: Invalid value: only one of devices and sharedCounters may be set"
    ]
    assert "must reference a counterSet defined" in str(slice_problems(new[1], "1.34")[0])


def test_more_than_eight_gpus_spread_counter_sets_over_slices() -> None:
    machine = load_machine("dgx-h100", hostname="n1")
    extra = tuple(
        replace(g, index=g.index + 8, minor=g.minor + 8, uuid=g.uuid[:-2] + "ff", pci_bus_id=bus)
        for g, bus in zip(machine.gpus, [f"00000001:{i:02X}:00.0" for i in range(8)], strict=True)
    )
    machine = replace(machine, gpus=machine.gpus + extra)
    slices = resource_slices(machine, "n1", partitionable=True)
    assert [len(s["spec"].get("sharedCounters") or []) for s in slices[:3]] == [8, 8, 0]
    within_limits(slices, "1.35")


def test_a_table_with_rows_missing_never_forbids_a_valid_layout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """GB200's published lgip gives 1g.47gb 32 SMs but no 7g row: four 1g.47gb instances (a
    layout the GPU accepts) need 128 SMs, more than the 7g estimate; the counter covers them."""
    from kgpu.dra import devices as model
    from kgpu.dra.allocator import allocate

    machine = load_machine("gb200", hostname="n")
    real = geometry_for(machine.gpus[0])
    assert real is not None
    published = replace(real.profiles["1g.47gb"], multiprocessor_count=32)
    geometry = replace(real, profiles={**real.profiles, "1g.47gb": published})
    monkeypatch.setattr(model, "geometry_for", lambda gpu: geometry)
    found = partition_capacities(machine.gpus[0])
    assert found is not None
    assert found[1]["multiprocessors"] == 128 > 7 * real.multiprocessors_per_slice
    slices = resource_slices(replace(machine, gpus=machine.gpus[:1]), "n", partitionable=True)
    request = {
        "name": "m",
        "exactly": {
            "deviceClassName": "mig.nvidia.com",
            "count": 4,
            "selectors": [
                {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.47gb'"}}
            ],
        },
    }
    claim = {
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": [request]}},
    }
    got = allocate({"name": "n"}, [claim], classes=device_classes(), slices=slices)
    assert got is not None and len(got[0]["devices"]["results"]) == 4


def test_mig_capacities_take_the_hardware_models_engine_counts() -> None:
    from kgpu.dra import engines

    geometry = geometry_for_product("NVIDIA A100-SXM4-80GB")
    assert geometry is not None
    for name, profile in geometry.profiles.items():
        assert profile_engines("NVIDIA A100-SXM4-80GB", name) == profile.engines
    assert profile_engines("NVIDIA H100 80GB HBM3", "7g.80gb") == engines.Engines(8, 7, 0, 7, 1)
    assert profile_engines("NVIDIA GB200", "7g.186gb") is None  # no published row


def test_pcie_roots_pair_gpus_behind_one_switch() -> None:
    machine = load_machine("p4de.24xlarge", hostname="n")
    (s,) = resource_slices(machine, "n")
    roots = [attrs(d)["resource.kubernetes.io/pcieRoot"] for d in s["spec"]["devices"]]
    assert roots[0] == roots[1] != roots[2]
    assert pci_bus_id(machine.gpus[0]) == "0000:10:1c.0"


@pytest.mark.parametrize(
    "case",
    yaml.safe_load((DATA / "resourceslice-limits.yaml").read_text())["cases"],
    ids=lambda c: c["name"],
)
def test_slice_checks_match_the_api_servers(case: dict[str, Any]) -> None:
    counter_set, counter = case.get("counter_set"), case.get("counter", "memory")
    consuming = case.get("consuming", case["devices"])
    devices: list[dict[str, Any]] = []
    for i in range(case["devices"]):
        n = case.get("consumes", 0) if i < consuming else int(case.get("extra_consumer", 0))
        uses = [
            {
                "counterSet": f"counterset-{j}" if counter_set is None else counter_set,
                "counters": {counter: {"value": "1Gi"}},
            }
            for j in range(n)
        ]
        devices.append({"name": f"d{i}", **({"consumesCounters": uses} if uses else {})})
    spec: dict[str, Any] = {"devices": devices} if devices else {}
    if case["sets"]:
        spec["sharedCounters"] = [
            {"name": f"counterset-{j}", "counters": {"memory": {"value": "80Gi"}}}
            for j in range(case["sets"])
        ]
    problems = [str(p) for p in slice_problems({"spec": spec}, case["version"])]
    assert len(problems) == len(case["expect"]), problems
    for got, want in zip(problems, case["expect"], strict=True):
        assert want in got


@pytest.mark.parametrize(
    ("device", "want"),
    [
        ({"name": "D"}, "spec.devices[0].name: 'D': must be a DNS label"),
        (
            {"name": "d", "attributes": {"x": {"int": 1, "bool": True}}},
            "spec.devices[0].attributes.x: exactly one value must be specified",
        ),
        (
            {"name": "d", "attributes": {"s": {"string": "x" * 65}}},
            "spec.devices[0].attributes.s.string: Too long: may not be more than 64 bytes",
        ),
        (
            {"name": "d", "attributes": {"v": {"version": "1.2"}}},
            "spec.devices[0].attributes.v.version: '1.2': must be a string compatible with semver",
        ),
        (
            {"name": "d", "attributes": {"1gpu": {"int": 1}}},
            "spec.devices[0].attributes.1gpu: '1gpu': must be a C identifier of at most 32",
        ),
        (
            {"name": "d", "capacity": {"memory": {"value": "lots"}}},
            "spec.devices[0].capacity.memory.value: ",
        ),
    ],
)
def test_slice_checks_cover_attributes_and_capacities(device: dict[str, Any], want: str) -> None:
    """The same function refuses what the API server refuses in a device's attributes and
    capacities (kgpu allocate and kgpu validate run it on their input)."""
    problems = [str(p) for p in slice_problems({"spec": {"devices": [device]}}, "1.35")]
    assert len(problems) == 1 and want in problems[0], problems


def test_pool_checks_find_what_makes_a_split_pool_invalid() -> None:
    machine = load_machine("h200", hostname="n")
    counters, devices = resource_slices(machine, "n", partitionable=True)
    assert pool_problems([counters, devices]) == []
    assert (
        pool_problems([devices])
        and "undefined counter set gpu-0-counter-set" in (pool_problems([devices])[0])
    )
    assert pool_problems([counters, counters, devices])[0] == (
        "counter set gpu-0-counter-set is defined twice"
    )


@pytest.mark.parametrize(
    "case",
    yaml.safe_load((DATA / "upstream-dynmig-claims.yaml").read_text())["cases"],
    ids=lambda c: c["upstream"],
)
def test_upstream_dynamic_mig_claims_allocate(case: dict[str, Any]) -> None:
    from kgpu.dra.allocator import allocate

    machine = load_machine(case["machine"], hostname="n")
    slices = resource_slices(machine, "n", partitionable=True)
    requests = [
        {
            "name": r["name"],
            "exactly": {
                "deviceClassName": r["class"],
                **({"selectors": [{"cel": {"expression": r["cel"]}}]} if "cel" in r else {}),
            },
        }
        for r in case["requests"]
    ]
    claim = {
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": requests}},
    }
    got = allocate({"name": "n"}, [claim], classes=device_classes(), slices=slices)
    assert got is not None
    by_name = {d["name"]: d for d in devices_of(slices)}
    taken: set[tuple[str, str]] = set()
    for result in got[0]["devices"]["results"]:
        device = by_name[result["device"]]
        assert attrs(device)["type"] == "mig"
        (use,) = device["consumesCounters"]
        mine = {(use["counterSet"], c) for c in use["counters"] if c.startswith("memory-slice-")}
        assert not mine & taken
        taken |= mine
    mp = {
        r["request"]: parse_quantity(by_name[r["device"]]["capacity"]["multiprocessors"]["value"])
        for r in got[0]["devices"]["results"]
    }
    if "mig1" in mp:
        assert mp["mig1"] < 30 and mp["mig2"] > 50


def test_kubernetes_versions_are_read_like_the_server_reports_them() -> None:
    assert kubernetes_minor("v1.35.2") == (1, 35)
    assert kubernetes_minor("1.34.1-gke.1200") == (1, 34)
    with pytest.raises(ValueError, match=r"expected <major>\.<minor>"):
        kubernetes_minor("latest")


def test_capacities_are_written_as_the_api_server_writes_them() -> None:
    assert [format_binary(n) for n in (0, 132, 1536, 3072, 80 * 2**30, 189471 * 2**20)] == [
        "0",
        "132",
        "1536",
        "3Ki",
        "80Gi",
        "189471Mi",
    ]


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
    assert any(d["name"] == "gpu-0-mig-7g80gb-0-0" for d in mine[0]["spec"]["devices"])
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
    # a pod asking for nvidia.com/gpu gets a full GPU through the gpu.nvidia.com class
    assert [c["spec"].get("extendedResourceName") for c in classes] == [
        "nvidia.com/gpu",
        None,
        None,
        None,
    ]
    for c in classes:
        for version in VERSIONS:
            valid(c, version)
    deployed = [
        d for d in yaml.safe_load_all((REPO / "deploy" / "deviceclasses.yaml").read_text()) if d
    ]
    assert deployed == classes
    values = yaml.safe_load((acceptance / "seed-guides" / "dra-driver-values.yaml").read_text())
    only_cd = device_classes(
        gpus=values["resources"]["gpus"]["enabled"] is False, compute_domains=True
    )
    assert len(only_cd) == 2


@pytest.mark.parametrize(
    ("api", "kubernetes"),
    [("resource.k8s.io/v1beta1", "1.32"), ("resource.k8s.io/v1beta2", "1.33")],
)
def test_device_classes_for_older_apis_have_no_extended_resource(api: str, kubernetes: str) -> None:
    for c in device_classes(api_version=api):
        assert c["apiVersion"] == api and "extendedResourceName" not in c["spec"]
        valid(c, kubernetes)


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
    assert a["resource.kubernetes.io/pciBusID"] == "0000:00:06.0"
    partitioned = resource_slices(machine, "h100-node", partitionable=True)
    for version in VERSIONS:
        for p in resource_slices(
            machine, "h100-node", partitionable=True, kubernetes_version=version
        ):
            valid(p, version)
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
