"""The allocator against a table of cases: classes, slices and claims in; allocation or failure
out, with kube-scheduler's results and messages."""

from __future__ import annotations

import dataclasses
from typing import Any

import kubernetes_validate
import pytest

from kgpu.dra import cel
from kgpu.dra.allocator import AllocationError, Allocator, NodeRef, SliceIndex, allocate
from kgpu.dra.classes import device_classes
from kgpu.dra.slices import resource_slices
from kgpu.hardware.mig import apply_layout
from kgpu.hardware.profiles import load_machine

DRV = "gpu.nvidia.com"
API = "resource.k8s.io/v1"
NODE = {"name": "node-a", "labels": {"rack": "r1", "zone": "z1"}}
CLASSES = [
    *device_classes(),
    {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": {"name": "nic"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nic.example.com'"}}]},
    },
    {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": {"name": "needs-uuid"},
        "spec": {
            "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].uuid != ''"}}]
        },
    },
]


def dev(name: str, **attrs: Any) -> dict:
    out: dict[str, Any] = {}
    for k, v in attrs.items():
        key = k.replace("__", "/").replace("_", ".") if "__" in k else k
        if isinstance(v, bool):
            out[key] = {"bool": v}
        elif isinstance(v, int):
            out[key] = {"int": v}
        elif isinstance(v, str) and v.startswith("v:"):
            out[key] = {"version": v[2:]}
        else:
            out[key] = {"string": v}
    return {"name": name, "attributes": out}


def gpu(i: int, **extra: Any) -> dict:
    return dev(f"gpu-{i}", type="gpu", index=i, productName="NVIDIA H100 80GB HBM3", **extra)


def slice_(
    devices: list[dict],
    *,
    pool: str = "node-a",
    node: str | None = "node-a",
    driver: str = DRV,
    gen: int = 1,
    count: int = 1,
    name: str | None = None,
    selector: dict | None = None,
    all_nodes: bool = False,
    counters: list | None = None,
) -> dict:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool, "generation": gen, "resourceSliceCount": count},
        "devices": devices,
    }
    if node:
        spec["nodeName"] = node
    elif selector:
        spec["nodeSelector"] = selector
    elif all_nodes:
        spec["allNodes"] = True
    if counters:
        spec["sharedCounters"] = counters
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{pool}-{driver}-{gen}-{len(devices)}"},
        "spec": spec,
    }


def req(
    name: str, cls: str = "gpu.nvidia.com", count: int = 1, sel: str | None = None, **extra: Any
) -> dict:
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count, **extra}
    if extra.get("allocationMode") == "All":
        del exactly["count"]
    if sel:
        exactly["selectors"] = [{"cel": {"expression": sel}}]
    return {"name": name, "exactly": exactly}


def claim(
    name: str, *requests: dict, constraints: list | None = None, config: list | None = None
) -> dict:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": devices},
    }


def held(*devices: str, pool: str = "node-a") -> dict:
    return {
        "metadata": {"name": "other", "namespace": "default"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "r", "driver": DRV, "pool": pool, "device": d} for d in devices
                    ]
                }
            }
        },
    }


FOUR = slice_([gpu(i) for i in range(4)])
PAIRED = slice_(
    [gpu(i, resource_kubernetes_io__pcieRoot=f"pci0000:{i // 2:02x}") for i in range(4)]
)


@dataclasses.dataclass
class Case:
    id: str
    slices: list[dict]
    claims: list[dict]
    want: Any  # list per claim of [(request, device[, pool])], None, or ("error", text)
    allocated: list[dict] = dataclasses.field(default_factory=list)
    node: dict = dataclasses.field(default_factory=lambda: NODE)


def counter_slices() -> list[dict]:
    """A MIG-capable GPU as 1.35 publishes it: the counter set in a slice of its own, the
    partitions consuming it in another slice of the same pool."""
    cset = [
        {
            "name": "gpu-0-counter-set",
            "counters": {f"memory-slice-{i}": {"value": "1"} for i in range(8)},
        }
    ]

    def part(name: str, start: int, size: int, kind: str) -> dict:
        d = dev(name, type=kind, profile=name.split("-")[0])
        d["consumesCounters"] = [
            {
                "counterSet": "gpu-0-counter-set",
                "counters": {
                    f"memory-slice-{i}": {"value": "1"} for i in range(start, start + size)
                },
            }
        ]
        return d

    devices = [
        part("7g-0", 0, 8, "gpu"),
        part("4g-0", 0, 4, "mig"),
        part("3g-0", 0, 4, "mig"),
        part("3g-4", 4, 4, "mig"),
    ]
    return [
        slice_([], counters=cset, count=2, name="node-a-counters"),
        slice_(devices, count=2, name="node-a-devices"),
    ]


CASES = [
    Case(
        "exact count picks devices in order",
        [FOUR],
        [claim("c", req("g", count=2))],
        [[("g", "gpu-0"), ("g", "gpu-1")]],
    ),
    Case("not enough devices", [FOUR], [claim("c", req("g", count=5))], None),
    Case(
        "devices held by other claims are skipped",
        [FOUR],
        [claim("c", req("g", count=2))],
        [[("g", "gpu-1"), ("g", "gpu-3")]],
        allocated=[held("gpu-0", "gpu-2")],
    ),
    Case(
        "allocationMode All takes every matching device",
        [FOUR],
        [
            claim(
                "c",
                req(
                    "g", allocationMode="All", sel="device.attributes['gpu.nvidia.com'].index >= 2"
                ),
            )
        ],
        [[("g", "gpu-2"), ("g", "gpu-3")]],
    ),
    Case(
        "All fails when one matching device is in use",
        [FOUR],
        [claim("c", req("g", allocationMode="All"))],
        None,
        allocated=[held("gpu-3")],
    ),
    Case(
        "All on an incomplete pool is an error",
        [slice_([gpu(0)], count=2, name="s0")],
        [claim("c", req("g", allocationMode="All"))],
        (
            "error",
            "claim default/c, request g: asks for all devices, but resource pool "
            "gpu.nvidia.com/node-a is currently being updated",
        ),
    ),
    Case(
        "incomplete pools are skipped",
        [slice_([gpu(0)], count=2, name="s0"), slice_([gpu(0)], pool="pool-b")],
        [claim("c", req("g"))],
        [[("g", "gpu-0", "pool-b")]],
    ),
    Case(
        "complete multi-slice pool is used",
        [slice_([gpu(0)], count=2, name="s0"), slice_([gpu(1)], count=2, name="s1")],
        [claim("c", req("g", count=2))],
        [[("g", "gpu-0"), ("g", "gpu-1")]],
    ),
    Case(
        "only the newest generation counts",
        [slice_([gpu(0), gpu(1)], gen=1, name="old"), slice_([gpu(7)], gen=2, name="new")],
        [claim("c", req("g", count=1))],
        [[("g", "gpu-7")]],
    ),
    Case(
        "old generation devices are gone",
        [slice_([gpu(0), gpu(1)], gen=1, name="old"), slice_([gpu(7)], gen=2, name="new")],
        [claim("c", req("g", count=2))],
        None,
    ),
    Case(
        "request selector narrows the class",
        [FOUR],
        [claim("c", req("g", sel="device.attributes['gpu.nvidia.com'].index == 3"))],
        [[("g", "gpu-3")]],
    ),
    Case(
        "semver selector",
        [slice_([gpu(0, driverVersion="v:535.1.0"), gpu(1, driverVersion="v:570.1.0")])],
        [
            claim(
                "c",
                req(
                    "g",
                    sel="device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))",
                ),
            )
        ],
        [[("g", "gpu-1")]],
    ),
    Case(
        "no conversion between string and int attributes",
        [FOUR],
        [claim("c", req("g", sel="device.attributes['gpu.nvidia.com'].index == '1'"))],
        None,
    ),
    Case(
        "firstAvailable takes the first alternative that fits",
        [FOUR],
        [
            claim(
                "c",
                {
                    "name": "g",
                    "firstAvailable": [
                        {"name": "eight", "deviceClassName": "gpu.nvidia.com", "count": 8},
                        {"name": "four", "deviceClassName": "gpu.nvidia.com", "count": 4},
                        {"name": "one", "deviceClassName": "gpu.nvidia.com", "count": 1},
                    ],
                },
            )
        ],
        [[("g/four", "gpu-0"), ("g/four", "gpu-1"), ("g/four", "gpu-2"), ("g/four", "gpu-3")]],
    ),
    Case(
        "firstAvailable falls back when devices are in use",
        [FOUR],
        [
            claim(
                "c",
                {
                    "name": "g",
                    "firstAvailable": [
                        {"name": "four", "deviceClassName": "gpu.nvidia.com", "count": 4},
                        {"name": "mig", "deviceClassName": "mig.nvidia.com"},
                        {"name": "one", "deviceClassName": "gpu.nvidia.com", "count": 1},
                    ],
                },
            )
        ],
        [[("g/one", "gpu-1")]],
        allocated=[held("gpu-0")],
    ),
    Case(
        "matchAttribute keeps requests on one PCIe root",
        [PAIRED],
        [
            claim(
                "c",
                req("a"),
                req("b"),
                constraints=[
                    {"requests": ["a", "b"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
                ],
            )
        ],
        [[("a", "gpu-2"), ("b", "gpu-3")]],
        allocated=[held("gpu-0")],
    ),
    Case(
        "matchAttribute backtracks to a root with room",
        [PAIRED],
        [
            claim(
                "c",
                req("a", count=2),
                constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
            )
        ],
        [[("a", "gpu-2"), ("a", "gpu-3")]],
        allocated=[held("gpu-1")],
    ),
    Case(
        "matchAttribute on an attribute the devices lack",
        [FOUR],
        [claim("c", req("a"), constraints=[{"matchAttribute": "gpu.nvidia.com/cliqueID"}])],
        None,
    ),
    Case(
        "matchAttribute with the driver domain finds bare names",
        [FOUR],
        [
            claim(
                "c",
                req("a", count=4),
                constraints=[{"matchAttribute": "gpu.nvidia.com/productName"}],
            )
        ],
        [[("a", f"gpu-{i}") for i in range(4)]],
    ),
    Case(
        "All with a constraint that cannot hold is an error",
        [PAIRED],
        [
            claim(
                "c",
                req("a", allocationMode="All"),
                constraints=[{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
            )
        ],
        (
            "error",
            "claim default/c, request a: cannot add device gpu.nvidia.com/node-a/gpu-2 "
            "because a claim constraint would not be satisfied",
        ),
    ),
    Case(
        "adminAccess may use devices in use",
        [FOUR],
        [claim("c", req("g", count=2, adminAccess=True))],
        [[("g", "gpu-0", "node-a", True), ("g", "gpu-1", "node-a", True)]],
        allocated=[held("gpu-0", "gpu-1", "gpu-2", "gpu-3")],
    ),
    Case(
        "slices of another node are invisible",
        [slice_([gpu(0)], node="node-b", pool="node-b")],
        [claim("c", req("g"))],
        None,
    ),
    Case(
        "network-attached slice by nodeSelector",
        [
            slice_(
                [dev("nic-0"), dev("nic-1")],
                pool="fabric",
                node=None,
                driver="nic.example.com",
                selector={
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "rack", "operator": "In", "values": ["r1", "r2"]}
                            ]
                        }
                    ]
                },
            )
        ],
        [claim("c", req("n", cls="nic"))],
        [[("n", "nic-0", "fabric")]],
    ),
    Case(
        "nodeSelector that does not match the node",
        [
            slice_(
                [dev("nic-0")],
                pool="fabric",
                node=None,
                driver="nic.example.com",
                selector={
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "rack", "operator": "NotIn", "values": ["r1"]}
                            ]
                        }
                    ]
                },
            )
        ],
        [claim("c", req("n", cls="nic"))],
        None,
    ),
    Case(
        "allNodes slice",
        [
            slice_(
                [dev("nic-0")], pool="fabric", node=None, driver="nic.example.com", all_nodes=True
            )
        ],
        [claim("c", req("n", cls="nic"))],
        [[("n", "nic-0", "fabric")]],
    ),
    Case(
        "several claims of one pod never share a device",
        [FOUR],
        [claim("c1", req("g", count=3)), claim("c2", req("g", count=2))],
        None,
    ),
    Case(
        "several claims of one pod allocated together",
        [FOUR],
        [claim("c1", req("g", count=3)), claim("c2", req("g"))],
        [[("g", "gpu-0"), ("g", "gpu-1"), ("g", "gpu-2")], [("g", "gpu-3")]],
    ),
    Case(
        "shared counters keep partitions apart",
        counter_slices(),
        [claim("c1", req("m", cls="mig.nvidia.com")), claim("c2", req("m", cls="mig.nvidia.com"))],
        [[("m", "4g-0")], [("m", "3g-4")]],
    ),
    Case(
        "a partition in use blocks the whole GPU",
        counter_slices(),
        [claim("c", req("g"))],
        None,
        allocated=[held("3g-4")],
    ),
    Case(
        "CEL runtime error in a request names the claim",
        [FOUR],
        [claim("c", req("g", sel="device.attributes['gpu.nvidia.com'].uuid == 'x'"))],
        (
            "error",
            "claim default/c: selector #0: CEL runtime error: no such key: uuid",
        ),
    ),
    Case(
        "CEL runtime error in a class names the class",
        [FOUR],
        [claim("c", req("g", cls="needs-uuid"))],
        (
            "error",
            "class needs-uuid: selector #0: CEL runtime error: no such key: uuid",
        ),
    ),
    Case(
        "CEL compile error",
        [FOUR],
        [claim("c", req("g", sel="device.driver =="))],
        ("error", "claim default/c: selector #0: CEL compile error"),
    ),
    Case(
        "unknown device class",
        [FOUR],
        [claim("c", req("g", cls="tpu.example.com"))],
        (
            "error",
            "claim default/c, request g: could not retrieve device class tpu.example.com: "
            'deviceclass.resource.k8s.io "tpu.example.com" not found',
        ),
    ),
    Case(
        "more than 32 devices in one claim",
        [FOUR],
        [claim("c", req("g", count=33))],
        ("error", "claim default/c: number of requested devices 33 exceeds the claim limit of 32"),
    ),
    Case(
        "duplicate device names make a pool invalid",
        [slice_([gpu(0), gpu(0)])],
        [claim("c", req("g"))],
        ("error", "invalid resource pools were encountered"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_allocator_cases(case: Case) -> None:
    def run() -> list[dict] | None:
        return allocate(
            case.node, case.claims, classes=CLASSES, slices=case.slices, allocated=case.allocated
        )

    if isinstance(case.want, tuple):
        with pytest.raises(AllocationError) as err:
            run()
        assert case.want[1] in str(err.value)
        return
    got = run()
    if case.want is None:
        assert got is None
        return
    assert got is not None
    shaped = []
    for result in got:
        items = []
        for r in result["devices"]["results"]:
            item: tuple = (r["request"], r["device"])
            if r["pool"] != "node-a" or r.get("adminAccess"):
                item = (*item, r["pool"])
            if r.get("adminAccess"):
                item = (*item, True)
            items.append(item)
        shaped.append(items)
    assert shaped == case.want
    for c, result in zip(case.claims, got, strict=True):
        done = {**c, "status": {"allocation": result}}
        kubernetes_validate.validate(done, "1.34.0", strict=True)


def test_node_selector_of_results() -> None:
    local = allocate(NODE, [claim("c", req("g"))], classes=CLASSES, slices=[FOUR])
    assert local is not None
    assert local[0]["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        ]
    }
    sel = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }
    fabric = slice_(
        [dev("nic-0")], pool="fabric", node=None, driver="nic.example.com", selector=sel
    )
    net = allocate(NODE, [claim("c", req("n", cls="nic"))], classes=CLASSES, slices=[fabric])
    assert net is not None and net[0]["nodeSelector"] == sel
    anywhere = slice_(
        [dev("nic-0")], pool="fabric", node=None, driver="nic.example.com", all_nodes=True
    )
    everywhere = allocate(
        NODE, [claim("c", req("n", cls="nic"))], classes=CLASSES, slices=[anywhere]
    )
    assert everywhere is not None and "nodeSelector" not in everywhere[0]


def test_per_device_node_selection() -> None:
    devices = [
        dict(dev("nic-b"), nodeName="node-b"),
        dict(dev("nic-a"), nodeName="node-a"),
        dict(dev("nic-all"), allNodes=True),
    ]
    s = slice_(devices, pool="fabric", node=None, driver="nic.example.com")
    s["spec"]["perDeviceNodeSelection"] = True
    kubernetes_validate.validate(s, "1.34.0", strict=True)
    got = allocate(NODE, [claim("c", req("n", cls="nic", count=2))], classes=CLASSES, slices=[s])
    assert got is not None
    assert [r["device"] for r in got[0]["devices"]["results"]] == ["nic-a", "nic-all"]
    assert got[0]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-a"]
    assert (
        allocate(NODE, [claim("c", req("n", cls="nic", count=3))], classes=CLASSES, slices=[s])
        is None
    )


def test_class_and_claim_config_are_passed_on() -> None:
    classes = [
        dict(
            CLASSES[0],
            spec={
                **CLASSES[0]["spec"],
                "config": [{"opaque": {"driver": DRV, "parameters": {"kind": "GpuConfig"}}}],
            },
        )
    ]
    c = claim(
        "c",
        req("a"),
        req("b"),
        config=[{"requests": ["b"], "opaque": {"driver": DRV, "parameters": {"sharing": "x"}}}],
    )
    got = allocate(NODE, [c], classes=classes, slices=[FOUR])
    assert got is not None
    assert got[0]["devices"]["config"] == [
        {
            "source": "FromClass",
            "requests": ["a", "b"],  # the requests using the class, as kube-scheduler lists them
            "opaque": {"driver": DRV, "parameters": {"kind": "GpuConfig"}},
        },
        {
            "source": "FromClaim",
            "requests": ["b"],
            "opaque": {"driver": DRV, "parameters": {"sharing": "x"}},
        },
    ]


def test_one_pod_two_claims_on_one_pcie_root_each() -> None:
    """A pod's two claims, each two GPUs bound to one PCIe root by matchAttribute, on a
    p4de.24xlarge whose eight A100s sit in pairs behind four PCIe switches."""
    machine = load_machine("p4de.24xlarge", hostname="node-a")
    slices = resource_slices(machine, "node-a")
    roots = [
        d["attributes"]["resource.kubernetes.io/pcieRoot"]["string"]
        for d in slices[0]["spec"]["devices"]
    ]
    assert roots[0] == roots[1] != roots[2] == roots[3]

    def pair(name: str) -> dict:
        return claim(
            name,
            req("first"),
            req("second"),
            constraints=[
                {
                    "requests": ["first", "second"],
                    "matchAttribute": "resource.kubernetes.io/pcieRoot",
                }
            ],
        )

    got = allocate(
        NODE,
        [pair("a"), pair("b")],
        classes=CLASSES,
        slices=slices,
        allocated=[held("gpu-1", "gpu-4")],
    )
    assert got is not None
    devices = [[r["device"] for r in res["devices"]["results"]] for res in got]
    assert devices == [["gpu-2", "gpu-3"], ["gpu-6", "gpu-7"]]
    # with one GPU of every pair in use, no claim can get a root to itself
    none = allocate(
        NODE,
        [pair("a"), pair("b")],
        classes=CLASSES,
        slices=slices,
        allocated=[held("gpu-0", "gpu-2", "gpu-4", "gpu-6")],
    )
    assert none is None


def test_mig_on_demand_from_partitionable_slices() -> None:
    machine = load_machine("h200", hostname="node-a")  # Hopper: MIG mode changes without a reset
    slices = resource_slices(machine, "node-a", partitionable=True)
    by_profile = "device.attributes['gpu.nvidia.com'].profile == '{}'"
    claims = [
        claim("big", req("m", cls="mig.nvidia.com", sel=by_profile.format("4g.71gb"))),
        claim("mid", req("m", cls="mig.nvidia.com", sel=by_profile.format("2g.35gb"))),
        claim("small", req("m", cls="mig.nvidia.com", sel=by_profile.format("1g.18gb"))),
    ]
    got = allocate(NODE, claims, classes=CLASSES, slices=slices)
    assert got is not None
    names = [[r["device"] for r in res["devices"]["results"]] for res in got]
    # placements never overlap: 4g takes slices 0-3, 2g 4-5, 1g slice 6
    assert names == [
        ["gpu-0-mig-4g71gb-5-0"],
        ["gpu-0-mig-2g35gb-14-4"],
        ["gpu-0-mig-1g18gb-19-6"],
    ]
    # no 1g placement starts at slice 7, so a fourth instance does not fit
    fourth = claim("more", req("m", cls="mig.nvidia.com", sel=by_profile.format("1g.18gb")))
    assert allocate(NODE, [*claims, fourth], classes=CLASSES, slices=slices) is None
    # the whole GPU is no longer available once a partition is taken
    held_mig = {
        "metadata": {"name": "x"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "m", "driver": DRV, "pool": "node-a", "device": names[0][0]}
                    ]
                }
            }
        },
    }
    assert (
        allocate(
            NODE, [claim("whole", req("g"))], classes=CLASSES, slices=slices, allocated=[held_mig]
        )
        is None
    )


def test_static_mig_devices_match_the_mig_class() -> None:
    machine = apply_layout(load_machine("a100-80gb", hostname="node-a"), {0: {"3g.40gb": 2}})
    got = allocate(
        NODE,
        [claim("c", req("m", cls="mig.nvidia.com", count=2))],
        classes=CLASSES,
        slices=resource_slices(machine, "node-a"),
    )
    assert got is not None
    assert [r["device"] for r in got[0]["devices"]["results"]] == [
        "gpu-0-mig-3g40gb-9-0",
        "gpu-0-mig-3g40gb-9-4",
    ]


def test_identical_devices_share_one_cel_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    original = cel.Selector.evaluate

    def counting(self: cel.Selector, device: dict) -> bool:
        calls.append(self.expression)
        return original(self, device)

    monkeypatch.setattr(cel.Selector, "evaluate", counting)
    monkeypatch.setattr(cel, "_RESULTS", {})
    monkeypatch.setattr(cel, "_RAW_RESULTS", {})
    nodes = [f"n{i}" for i in range(50)]
    slices = [s for n in nodes for s in resource_slices(load_machine("gb200", hostname=n), n)]
    alloc = Allocator({c["metadata"]["name"]: c for c in CLASSES}, SliceIndex(slices))
    c = claim(
        "c",
        req("g", count=4, sel="device.attributes['gpu.nvidia.com'].productName == 'NVIDIA GB200'"),
    )
    for n in nodes:
        assert alloc.allocate({"name": n}, [c]) is not None
    # 200 GPUs with distinct UUIDs: one evaluation per expression, not per device
    assert len(calls) == 2


def test_node_pools_are_assembled_once_whatever_labels_the_caller_passes() -> None:
    """Without slices shared between nodes a node's pools depend on its name alone, so the
    scheduler asking with labels (a claim already allocated) and without (bin-packing score)
    shares one assembly; with a shared slice the labels decide and each label set counts."""
    labelled = NodeRef("node-a", (("zone", "a"),))
    local = SliceIndex([slice_([gpu(0), gpu(1)])])
    assert local.usable_devices(labelled) is local.usable_devices(NodeRef("node-a"))
    assert local.pools_for(labelled) is local.pools_for(NodeRef("node-a"))
    shared = SliceIndex([slice_([gpu(0)], pool="p", node=None, selector=_zone_selector("a"))])
    assert [d.id[2] for d in shared.usable_devices(labelled)] == ["gpu-0"]
    assert shared.usable_devices(NodeRef("node-a")) == []


def _zone_selector(zone: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}
        ]
    }
