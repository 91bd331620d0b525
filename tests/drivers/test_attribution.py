"""Device ids, DRA devices, cgroups and pod UIDs mapped back to physical GPUs and pods."""

from __future__ import annotations

from dataclasses import replace

from kgpu.config.loader import load_config_strings
from kgpu.drivers.attribution import AttributionCache, build_attribution, resolve_dra_device
from kgpu.hardware.mig import apply_layout
from kgpu.hardware.model import Machine
from kgpu.hardware.profiles import load_machine
from kgpu.kubelet.podresources import (
    CheckpointEntry,
    ClaimDevice,
    ContainerResources,
    DynamicClaim,
    PodResources,
)
from kgpu.metrics.attribution import resolve_device_id
from kgpu.metrics.cgroups import CgroupIdentity, parse_cgroup
from kgpu.metrics.sources import PodRef
from kgpu.node.view import build_node_view

UID = "5a5b5c5d-1111-2222-3333-444455556666"
CID = "0123456789abcdef" * 4


def mig_a100() -> Machine:
    machine = load_machine("a100-40gb")
    return apply_layout(machine, {0: {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}})


def test_cgroup_paths_of_both_drivers_and_versions() -> None:
    systemd_v2 = (
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
    )
    cgroupfs_v1 = f"12:memory:/kubepods/besteffort/pod{UID}/{CID}\n11:cpu:/kubepods\n"
    guaranteed_crio = (
        f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope\n"
    )
    for text in (systemd_v2, cgroupfs_v1, guaranteed_crio):
        assert parse_cgroup(text) == CgroupIdentity(UID, CID)
    assert parse_cgroup("0::/user.slice/user-1000.slice/session-2.scope\n") is None
    assert parse_cgroup(f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice\n") == (
        CgroupIdentity(UID, "")
    )


def test_device_ids_resolve_through_view_and_fallbacks() -> None:
    h100 = load_machine("dgx-h100")
    gpu = h100.gpus[1]
    view = build_node_view(
        h100,
        load_config_strings(
            {
                "mps.yaml": "version: v1\nsharing:\n  mps:\n    resources:\n"
                "    - name: nvidia.com/gpu\n      rename: gpu-slice\n      replicas: 3\n"
            }
        ),
        {},
    )
    renamed = [d for d in view.resources[0].devices if d.gpu_uuid == gpu.uuid]
    index = {d.id: d.backing_uuid for r in view.resources for d in r.devices}
    assert all(resolve_device_id(d.id, index, h100) == gpu.uuid for d in renamed)
    # Without a view: UUIDs with any replica suffix, index ids, MIG index ids.
    assert resolve_device_id(f"{gpu.uuid}::7", {}, h100) == gpu.uuid
    assert resolve_device_id("1", {}, h100) == gpu.uuid
    a100 = mig_a100()
    mig = a100.gpus[0].mig_devices[1]
    assert resolve_device_id(f"0:{mig.index}", {}, a100) == mig.uuid
    assert resolve_device_id(f"{mig.uuid}::2", {}, a100) == mig.uuid
    assert resolve_device_id("GPU-not-here", {}, a100) is None


def test_dra_devices_resolve_by_name_cdi_or_explicit_map() -> None:
    from kgpu.dra.devices import gi_profile_id
    from kgpu.dra.slices import resource_slices

    a100 = mig_a100()
    gpu = a100.gpus[0]
    whole = load_machine("dgx-h100")
    # gpu.nvidia.com names GPUs by minor number, not NVML index
    renumbered = replace(whole, gpus=tuple(replace(g, minor=7 - g.index) for g in whole.gpus))
    assert resolve_dra_device(ClaimDevice("gpu.nvidia.com", "n", "gpu-3"), renumbered, {}) == (
        whole.gpus[4].uuid
    )
    # every MIG device by the name the driver publishes for it ...
    (published,) = resource_slices(a100, "n")
    for device in published["spec"]["devices"]:
        uuid = device["attributes"]["uuid"]["string"]
        claimed = ClaimDevice("gpu.nvidia.com", "n", device["name"])
        assert resolve_dra_device(claimed, a100, {}) == uuid
    # ... and by the name NVIDIA's 25.8 driver gave it: gpu-<minor>-mig-<GI id>-<start>-<size>
    for mig in gpu.mig_devices:
        pid = gi_profile_id(mig.profile, mig.placement_size, None)
        name = f"gpu-0-mig-{pid}-{mig.placement_start}-{mig.placement_size}"
        assert resolve_dra_device(ClaimDevice("gpu.nvidia.com", "n", name), a100, {}) == mig.uuid
    assert (
        resolve_dra_device(ClaimDevice("gpu.nvidia.com", "n", "gpu-0-mig-1g5gb-19-7"), a100, {})
        is None
    )
    cdi = ClaimDevice("other", "n", "x", (f"vendor.com/gpu={gpu.mig_devices[0].uuid}",))
    assert resolve_dra_device(cdi, a100, {}) == gpu.mig_devices[0].uuid
    explicit = {("gpu.nvidia.com", "n", "weird-name"): gpu.uuid}
    assert resolve_dra_device(ClaimDevice("gpu.nvidia.com", "n", "weird-name"), a100, explicit) == (
        gpu.uuid
    )


def test_holders_uids_and_process_resolution() -> None:
    h100 = load_machine("dgx-h100")
    g0, g1 = h100.gpus[0], h100.gpus[1]
    pods = [
        PodResources(
            "a", "p1", (ContainerResources("c1", (("nvidia.com/gpu", (f"{g0.uuid}::0",)),)),)
        ),
        PodResources(
            "b", "p2", (ContainerResources("c2", (("nvidia.com/gpu", (f"{g0.uuid}::1",)),)),)
        ),
        PodResources(
            "c",
            "dra",
            (
                ContainerResources(
                    "c3",
                    claims=(
                        DynamicClaim("claim", "c", (ClaimDevice("gpu.nvidia.com", "n", "gpu-1"),)),
                    ),
                ),
            ),
        ),
    ]
    checkpoint = [CheckpointEntry("uid-1", "c1", "nvidia.com/gpu", (f"{g0.uuid}::0",))]
    att = build_attribution(pods, checkpoint, machine=h100)
    assert att.holders[g0.uuid] == (PodRef("a", "p1", "c1"), PodRef("b", "p2", "c2"))
    assert att.owner(g0.uuid) is None  # shared: DCGM series stay unattributed
    assert att.owner(g1.uuid) == PodRef("c", "dra", "c3")
    assert att.pod_uids == {"uid-1": ("a", "p1")}
    assert att.resolve_process(CgroupIdentity("uid-1"), g0.uuid) == PodRef("a", "p1", "c1")
    # Unknown UID on a shared GPU: cannot tell which pod, so nobody gets it.
    assert att.resolve_process(CgroupIdentity("uid-x"), g0.uuid) is None
    # Only one pod holds GPU 1 and its UID is unknown: the process is its.
    assert att.resolve_process(CgroupIdentity("uid-x"), g1.uuid) == PodRef("c", "dra", "c3")
    assert att.resolve_process(None, g1.uuid) == PodRef("c", "dra", "c3")


def test_cache_keeps_the_last_answer_when_the_kubelet_fails() -> None:
    h100 = load_machine("dgx-h100")
    answers: list[list[PodResources] | Exception] = [
        [
            PodResources(
                "a", "p", (ContainerResources("c", (("nvidia.com/gpu", (h100.gpus[0].uuid,)),)),)
            )
        ],
        ConnectionError("kubelet restarting"),
    ]
    errors: list[str] = []

    def fetch() -> list[PodResources]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    cache = AttributionCache(fetch, on_error=lambda op, reason: errors.append(op))
    cache.set_machine(h100)
    assert cache.refresh()
    assert not cache.refresh()
    assert cache.current().owner(h100.gpus[0].uuid) == PodRef("a", "p", "c")
    assert errors == ["PodResources.List"]
    # New hardware re-joins the last answer at once, without asking the kubelet: GPU 0 is gone.
    cache.set_machine(replace(h100, gpus=h100.gpus[1:]))
    assert cache.current().holders == {}
    assert cache.current().unresolved == (h100.gpus[0].uuid,)
