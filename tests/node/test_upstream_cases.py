"""NVIDIA/k8s-device-plugin's own test tables (tests/node/upstream/*.yaml) run against kgpu.

Each YAML suite names the upstream test it transcribes and a ``run`` kind below; each case is
one pytest case. The runners only translate a case into kgpu inputs (a config document, a
machine, a node view) and compare what kgpu answers with upstream's expectation.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.config import load_config_strings
from kgpu.config.plugin import (
    DeviceSelection,
    is_gpu_index,
    is_gpu_uuid,
    is_mig_index,
    is_mig_uuid,
    parse_plugin_config,
)
from kgpu.errors import FieldError
from kgpu.hardware.model import Gpu, Machine, MigDevice, MigEngines
from kgpu.node.allocate import AllocationError, container_allocation, preferred_allocation
from kgpu.node.labels import node_labels, sanitize_value
from kgpu.node.model import AdvertisedDevice, MpsLimits, NodeView, ResourceView, Sharing
from kgpu.node.sharing.mps import mps_max_clients
from kgpu.node.view import build_node_view

UPSTREAM = Path(__file__).parent / "upstream"
RESOURCE = "nvidia.com/gpu"


def _suites() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(UPSTREAM.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for suite in data["suites"]:
            suite["_additions"] = data.get("kgpu_additions", [])
            out.append((path.name, suite))
    return out


def _cases() -> list[Any]:
    params = []
    for file, suite in _suites():
        for i, case in enumerate(suite["cases"]):
            name = case.get("name") or str(case.get("input", i))
            params.append(pytest.param(suite, case, id=f"{file}:{suite['name']}:{name}"))
    return params


@pytest.mark.parametrize(("suite", "case"), _cases())
def test_upstream_case(suite: dict[str, Any], case: dict[str, Any]) -> None:
    RUNNERS[suite["run"]](suite, case)


def test_every_file_says_what_it_does_not_port() -> None:
    for path in sorted(UPSTREAM.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        assert data["not_ported"], path
        assert all(item["test"] and item["why"] for item in data["not_ported"]), path
        for suite in data["suites"]:
            assert suite["upstream"] and suite["cases"], (path, suite["name"])


# -- api/config/v1 ---------------------------------------------------------------------------


def _placed(at: str, value: Any) -> dict[str, Any]:
    """``value`` at the dotted path ``at`` (``a.b[0].c``) of an otherwise minimal config."""
    doc: dict[str, Any] = {}
    cur: Any = doc
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", at)
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part.startswith("["):
            continue
        nxt = parts[i + 1] if not last else None
        if last:
            cur[part] = value
        elif nxt is not None and nxt.startswith("["):
            entry: dict[str, Any] = {"name": "gpu", "replicas": 2}
            cur[part] = [entry]
            if i + 1 == len(parts) - 1:
                cur[part] = [value]
                break
            cur = entry
        else:
            cur = cur.setdefault(part, {})
    return doc


def _load(suite: dict[str, Any], case: dict[str, Any]) -> Any:
    doc = _placed(suite["at"], yaml.safe_load(case["input"]))
    if "error" in case:
        with pytest.raises(FieldError) as info:
            parse_plugin_config(doc, file="case.yaml")
        if isinstance(case["error"], str):
            assert case["error"] in str(info.value)
        return None
    return parse_plugin_config(doc, file="case.yaml").config


def _devices(selection: DeviceSelection) -> dict[str, Any]:
    if selection.all:
        return {"all": True}
    if selection.count is not None:
        return {"count": selection.count}
    return {"list": list(selection.refs)}


def _resource(entry: Any) -> dict[str, Any]:
    out = {"name": entry.name, "devices": _devices(entry.devices), "replicas": entry.replicas}
    if entry.rename:
        out["rename"] = entry.rename
    return out


def run_flags(suite: dict[str, Any], case: dict[str, Any]) -> None:
    config = _load(suite, case)
    if config is None:
        return
    flags = config.flags.model_dump(by_alias=True, exclude_none=True)
    if "plugin" in flags and "deviceListStrategy" in flags["plugin"]:
        flags["plugin"]["deviceListStrategy"] = list(config.device_list_strategy)
    assert flags == case["expect"]


def run_device_ref(suite: dict[str, Any], case: dict[str, Any]) -> None:
    ref = case["input"]
    kinds = {
        "gpuIndex": is_gpu_index(ref),
        "migIndex": is_mig_index(ref),
        "uuid": is_gpu_uuid(ref) or is_mig_uuid(ref),
    }
    assert [k for k, v in kinds.items() if v] == [case["expect"]]


def run_devices(suite: dict[str, Any], case: dict[str, Any]) -> None:
    config = _load(suite, case)
    if config is not None:
        entry = config.sharing.time_slicing.entries()[0]
        assert _devices(entry.devices) == case["expect"]


def run_resource(suite: dict[str, Any], case: dict[str, Any]) -> None:
    config = _load(suite, case)
    if config is not None:
        assert _resource(config.sharing.time_slicing.entries()[0]) == case["expect"]


def run_resources(suite: dict[str, Any], case: dict[str, Any]) -> None:
    config = _load(suite, case)
    if config is not None:
        assert [_resource(e) for e in config.sharing.time_slicing.entries()] == case["expect"]


def run_imex(suite: dict[str, Any], case: dict[str, Any]) -> None:
    config = _load(suite, case)
    if config is not None:
        imex = config.imex
        assert (imex.channel_ids if imex is not None else None) == case["expect"]


def run_fail_requests(suite: dict[str, Any], case: dict[str, Any]) -> None:
    configs = load_config_strings({"config.yaml": case["input"]})
    view = build_node_view(_mock_machine([_full(0)]), configs, {})
    assert view.resource(RESOURCE).fail_requests_greater_than_one is case["expect"]


# -- internal/lm, cmd/gpu-feature-discovery: labels -------------------------------------------

MOCK_UUID = "GPU-00000000-0000-0000-0000-00000000000{}"


def _full(index: int, cc: tuple[int, int] = (8, 0)) -> Gpu:
    return Gpu(
        index=index,
        uuid=MOCK_UUID.format(index),
        product_name="MOCKMODEL",
        brand="Nvidia",
        architecture="ampere",
        compute_capability=cc,
        memory_mib=300,
        pci_bus_id=f"00000000:{index:02X}:00.0",
        minor=index,
    )


def _mig_enabled(index: int, migs: list[dict[str, Any]]) -> Gpu:
    gpu = _full(index, cc=(0, 0))  # upstream's mock reports no compute capability for it
    devices = []
    for j, m in enumerate(migs):
        engines = m.get("engines", [0, 0, 0, 0, 0])
        devices.append(
            MigDevice(
                parent_index=index,
                parent_uuid=gpu.uuid,
                index=j,
                uuid=f"MIG-{index:08x}-0000-0000-0000-{j:012x}",
                profile=m.get("profile", f"{m['gi']}g.{m['gb']}gb"),
                gi_id=j,
                ci_id=0,
                placement_start=j,
                placement_size=1,
                memory_mib=m["gb"],
                compute_slices=m["gi"],
                compute_instance_slices=m["ci"],
                multiprocessor_count=m.get("multiprocessors", 0),
                engines=MigEngines(*engines),
            )
        )
    return replace(gpu, mig_capable=True, mig_enabled=True, mig_devices=tuple(devices))


def _mock_machine(gpus: list[Gpu]) -> Machine:
    return Machine(
        profile="mock", driver_version="400.300", cuda_driver_version=(8, 0), gpus=tuple(gpus)
    )


def _case_machine(case: dict[str, Any]) -> Machine:
    gpus = [
        _full(i) if spec == "full" else _mig_enabled(i, spec["mig"])
        for i, spec in enumerate(case["gpus"])
    ]
    return _mock_machine(gpus)


def _case_view(suite: dict[str, Any], case: dict[str, Any]) -> NodeView:
    files = {}
    if "sharing" in case:
        files["config.yaml"] = f"version: v1\nsharing: {case['sharing']}\n"
    strategy = case.get("strategy", suite.get("strategy", "none"))
    return build_node_view(
        _case_machine(case), load_config_strings(files), {}, mig_strategy=strategy
    )


def _in_scope(key: str, scope: str) -> bool:
    if scope != "resource":
        return key == scope
    own = ("nvidia.com/gpu.present", "nvidia.com/gpu.clique", "nvidia.com/gpu.machine")
    return key not in own and (
        key.startswith(("nvidia.com/gpu.", "nvidia.com/mig-")) or key == "nvidia.com/mig.strategy"
    )


def run_labels(suite: dict[str, Any], case: dict[str, Any]) -> None:
    if "error" in case:
        with pytest.raises(FieldError, match=re.escape(case["error"])):
            _case_view(suite, case)
        return
    view = _case_view(suite, case)
    scope = suite.get("scope", "resource")
    if "only" in case:
        got = {k: v for k, v in view.labels.items() if k.startswith(case["only"])}
    else:
        got = {k: v for k, v in view.labels.items() if _in_scope(k, scope)}
    assert got == case["labels"]
    if "refused" in case:
        # GFD labels the node; the device plugin refuses it, and kgpu serves nothing
        assert view.counts() == {}
        assert [r.resource for r in view.refused] == [RESOURCE]
        assert case["refused"] in view.refused[0].reason
    else:
        assert not view.refused


def run_sanitise(suite: dict[str, Any], case: dict[str, Any]) -> None:
    assert sanitize_value(case["input"]) == case["expect"]


def run_patterns(suite: dict[str, Any], case: dict[str, Any]) -> None:
    view = _case_view(suite, case)
    patterns = [re.compile(p) for p in case["patterns"]]
    assert view.labels
    for key, value in view.labels.items():
        if key in suite["_additions"]:
            continue
        line = f"{key}={value}"
        assert any(p.search(line) for p in patterns), f"{line} matches no upstream pattern"


# -- cmd/mps-control-daemon ---------------------------------------------------------------------


def run_mps_clients(suite: dict[str, Any], case: dict[str, Any]) -> None:
    major, minor = (int(n) for n in case["cc"].removeprefix("v").split("."))
    if "max_clients" in case:
        assert mps_max_clients((major, minor)) == case["max_clients"]
    if "replicas" not in case:
        return
    machine = _mock_machine([_full(0, cc=(major, minor))])
    text = f"sharing: {{mps: {{resources: [{{name: gpu, replicas: {case['replicas']}}}]}}}}"
    configs = load_config_strings({"mps.yaml": text})
    if case["refused"]:
        with pytest.raises(FieldError, match="an MPS server accepts at most"):
            build_node_view(machine, configs, {})
    else:
        assert build_node_view(machine, configs, {}).counts() == {RESOURCE: case["replicas"]}


# -- internal/rm, internal/plugin ----------------------------------------------------------------


def _replica_view(gpus: dict[str, int], policy: str = "distributed") -> NodeView:
    devices = [
        AdvertisedDevice(
            id=f"{gpu}::{n}",
            resource=RESOURCE,
            visible_id=gpu,
            gpu_index=i,
            gpu_uuid=gpu,
            replica=n,
            sharing=Sharing.TIME_SLICING,
        )
        for i, (gpu, count) in enumerate(gpus.items())
        for n in range(count)
    ]
    res = ResourceView(RESOURCE, tuple(devices), Sharing.TIME_SLICING, max(gpus.values()))
    return NodeView(
        machine=_mock_machine([]), resources=(res,), shared_devices_allocation_policy=policy
    )


def run_preferred(suite: dict[str, Any], case: dict[str, Any]) -> None:
    view = _replica_view(case["gpus"], case.get("policy", suite.get("policy", "distributed")))
    available = case.get("available") or [d.id for d in view.resource(RESOURCE).devices]
    if "error" in case:
        with pytest.raises(AllocationError, match=case["error"]):
            preferred_allocation(view, RESOURCE, available, [], case["size"])
        return
    got = preferred_allocation(view, RESOURCE, available, [], case["size"])
    per_gpu = Counter(i.split("::")[0] for i in got)
    assert len(got) == case.get("count", case["size"])
    if "per_gpu" in case:
        assert dict(per_gpu) == case["per_gpu"]
    if "gpus_used" in case:
        assert len(per_gpu) == case["gpus_used"]
    if "max_per_gpu" in case:
        assert max(per_gpu.values()) == case["max_per_gpu"]
    if "min_per_gpu" in case:
        assert min(per_gpu.values()) == case["min_per_gpu"]


def run_preferred_whole(suite: dict[str, Any], case: dict[str, Any]) -> None:
    devices = tuple(
        AdvertisedDevice(id=u, resource=RESOURCE, visible_id=u, gpu_index=i, gpu_uuid=u)
        for i, u in enumerate(case["gpus"])
    )
    machine = _mock_machine([replace(_full(i), uuid=u) for i, u in enumerate(case["gpus"])])
    answers = []
    for policy in ("distributed", "packed"):
        view = NodeView(
            machine=machine,
            resources=(ResourceView(RESOURCE, devices),),
            shared_devices_allocation_policy=policy,
        )
        answers.append(preferred_allocation(view, RESOURCE, list(case["gpus"]), [], case["size"]))
    assert answers[0] == answers[1] and len(answers[0]) == case["size"]


def _plain_view(ids: list[str], case: dict[str, Any]) -> NodeView:
    sharing = Sharing(case.get("sharing", "none"))
    devices = []
    for dev_id in ids:
        base, sep, replica = dev_id.partition("::")
        mps = MpsLimits(
            50, 100, f"/run/nvidia/mps/{RESOURCE}/{base}/pipe", "", "/run/nvidia/mps/shm"
        )
        devices.append(
            AdvertisedDevice(
                id=dev_id,
                resource=RESOURCE,
                visible_id=base,
                gpu_index=int(base[-1]) if base[-1].isdigit() else 0,
                gpu_uuid=base,
                replica=int(replica) if sep else None,
                sharing=sharing,
                mps=mps if sharing is Sharing.MPS else None,
            )
        )
    res = ResourceView(
        RESOURCE,
        tuple(devices),
        sharing,
        fail_requests_greater_than_one=bool(case.get("fail_requests_greater_than_one")),
    )
    return NodeView(machine=_mock_machine([]), resources=(res,))


def run_validate(suite: dict[str, Any], case: dict[str, Any]) -> None:
    view = _plain_view(case["devices"], case)
    if case["error"] is None:
        container_allocation(view, RESOURCE, case["request"])
        return
    with pytest.raises(AllocationError) as info:
        container_allocation(view, RESOURCE, case["request"])
    assert case["error"] in str(info.value)


def run_allocate(suite: dict[str, Any], case: dict[str, Any]) -> None:
    view = _plain_view(case["devices"], case)
    assert container_allocation(view, RESOURCE, case["request"]).envs == case["envs"]


def run_cdi(suite: dict[str, Any], case: dict[str, Any]) -> None:
    view = replace(
        _plain_view(case["ids"], case),
        device_list_strategy=("cdi-annotations",),
        cdi_annotation_prefix=case["prefix"],
    )
    got = container_allocation(view, RESOURCE, case["ids"], response_id="uuid")
    assert got.annotations == case["annotations"]


def run_gpu_mode(suite: dict[str, Any], case: dict[str, Any]) -> None:
    """Upstream's mock devices carry only a PCI class; here the snapshot records it as the NVML
    backend does (``extra["pci_classes"]``, sysfs's ``0x030200`` spelling)."""
    machine = _mock_machine([_full(i) for i in range(len(case["classes"]))])
    machine.extra["pci_classes"] = {i: f"0x{c:06x}" for i, c in enumerate(case["classes"])}
    labels = node_labels(machine, [], "none")
    assert labels["nvidia.com/gpu.mode"] == case["expect"]


RUNNERS = {
    name.removeprefix("run_"): fn for name, fn in globals().items() if name.startswith("run_")
}
