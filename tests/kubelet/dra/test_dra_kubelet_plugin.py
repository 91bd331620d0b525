"""The DRA plugin core in process: prepare/unprepare semantics, per-claim errors, opaque configs
applied to the CDI spec, and crash consistency at every step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dra_kubelet_helpers import NODE, gpu_config, make_claim, ref_of

from kgpu.drivers.gpu import GpuHandler
from kgpu.hardware.model import Machine
from kgpu.kubelet import cdi
from kgpu.kubelet.checkpoint import Checkpoint, CheckpointError, ClaimState
from kgpu.kubelet.dra.handler import ClaimRef
from kgpu.kubelet.dra.plugin import CRASH_POINTS, DraPlugin
from kgpu.store import MemoryStore

KIND = "k8s.gpu.nvidia.com/claim"


class Crash(BaseException):
    """Stands for the process dying: nothing after the hook runs, nothing is cleaned up."""


def new_plugin(
    root: Path, machine: Machine, store: MemoryStore, crash_at: str | None = None
) -> DraPlugin:
    def hook(point: str) -> None:
        if point == crash_at:
            raise Crash(point)

    plugin_dir = root / "kubelet" / "plugins" / "gpu.nvidia.com"
    handler = GpuHandler(machine, NODE, plugin_dir)
    return DraPlugin(handler, plugin_dir, root / "cdi", store, crash_hook=hook)


def refs(*claims: dict[str, Any]) -> list[ClaimRef]:
    return [ClaimRef(*ref_of(c)) for c in claims]


def specs(root: Path) -> dict[str, Path]:
    return cdi.transient_specs(root / "cdi", KIND)


def test_prepare_writes_one_valid_spec_per_claim_and_returns_its_ids(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    plugin = new_plugin(tmp_path, machine, store)
    a = make_claim(store, "a", [("gpu", "gpu-1"), ("gpu", "gpu-2")])
    b = make_claim(store, "b", [("mig", "gpu-0-mig-1g10gb-19-3")])
    out = plugin.prepare(refs(a, b))
    uid_a, uid_b = a["metadata"]["uid"], b["metadata"]["uid"]
    assert {uid: r.error for uid, r in out.items()} == {uid_a: "", uid_b: ""}
    assert [d.cdi_device_ids for d in out[uid_a].devices] == [
        (f"{KIND}={uid_a}-gpu-1",),
        (f"{KIND}={uid_a}-gpu-2",),
    ]
    assert [(d.request_names, d.pool_name, d.device_name) for d in out[uid_b].devices] == [
        (("mig",), NODE, "gpu-0-mig-1g10gb-19-3")
    ]
    files = specs(tmp_path)
    assert set(files) == {uid_a, uid_b}
    assert files[uid_a].name == f"k8s.gpu.nvidia.com-claim_{uid_a}.yaml"
    for path in files.values():
        spec = cdi.read_spec(path)
        assert cdi.validate_spec(spec) == []
        assert spec["kind"] == KIND
    spec_a = cdi.read_spec(files[uid_a])
    nodes = {
        d["name"]: [n["path"] for n in d["containerEdits"]["deviceNodes"]]
        for d in spec_a["devices"]
    }
    assert nodes == {f"{uid_a}-gpu-1": ["/dev/nvidia1"], f"{uid_a}-gpu-2": ["/dev/nvidia2"]}
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec_a["containerEdits"]["env"]
    assert "/dev/nvidiactl" in [n["path"] for n in spec_a["containerEdits"]["deviceNodes"]]
    # A MIG device gets its parent's node and the GI/CI capability nodes.
    mig_nodes = cdi.read_spec(files[uid_b])["devices"][0]["containerEdits"]["deviceNodes"]
    mig = machine.gpus[0].mig_devices[3]
    gi_minor = 3 + mig.gi_id * 9
    assert [n["path"] for n in mig_nodes] == [
        "/dev/nvidia0",
        f"/dev/nvidia-caps/nvidia-cap{gi_minor}",
        f"/dev/nvidia-caps/nvidia-cap{gi_minor + 1}",
    ]


def test_prepare_and_unprepare_are_idempotent(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    plugin = new_plugin(tmp_path, machine, store)
    claim = make_claim(store, "a", [("gpu", "gpu-3")])
    first = plugin.prepare(refs(claim))
    again = plugin.prepare(refs(claim))
    assert first == again
    assert len(specs(tmp_path)) == 1
    uid = claim["metadata"]["uid"]
    assert plugin.unprepare(refs(claim)) == {uid: ""}
    assert plugin.unprepare(refs(claim)) == {uid: ""}
    assert specs(tmp_path) == {}
    assert plugin.checkpoint.records() == {}


def test_prepared_claims_survive_a_restart(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    claim = make_claim(store, "a", [("gpu", "gpu-4")])
    first = new_plugin(tmp_path, machine, store).prepare(refs(claim))
    store.delete("resource.k8s.io/v1", "ResourceClaim", "a", "default")
    restarted = new_plugin(tmp_path, machine, store)
    # Known from the checkpoint: same answer without reading the (now deleted) claim.
    assert restarted.prepare(refs(claim)) == first
    assert restarted.unprepare(refs(claim)) == {claim["metadata"]["uid"]: ""}
    assert specs(tmp_path) == {}


def test_failures_are_per_claim(tmp_path: Path, machine: Machine, store: MemoryStore) -> None:
    plugin = new_plugin(tmp_path, machine, store)
    good = make_claim(store, "good", [("gpu", "gpu-1")])
    bad_config = make_claim(
        store,
        "bad-config",
        [("gpu", "gpu-2")],
        [((), gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 150}))],
    )
    missing_device = make_claim(store, "missing", [("gpu", "gpu-99")])
    other_pool = make_claim(store, "elsewhere", [("gpu", "gpu-1")], pool="node-b")
    unallocated = store.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "pending", "namespace": "default"},
            "spec": {},
        }
    )
    stale = ClaimRef("default", "not-the-uid", "good")
    out = plugin.prepare([*refs(good, bad_config, missing_device, other_pool, unallocated), stale])
    errors = {uid: r.error for uid, r in out.items()}
    assert errors[good["metadata"]["uid"]] == ""
    assert (
        "status.allocation.devices.config[0].opaque.parameters.sharing.mpsConfig"
        ".defaultActiveThreadPercentage" in errors[bad_config["metadata"]["uid"]]
    )
    assert "gpu-99" in errors[missing_device["metadata"]["uid"]]
    assert "node-b" in errors[other_pool["metadata"]["uid"]]
    assert "not allocated" in errors[unallocated["metadata"]["uid"]]
    assert "recreated" in errors["not-the-uid"]
    # Only the good claim left anything behind.
    assert set(specs(tmp_path)) == {good["metadata"]["uid"]}
    assert set(plugin.checkpoint.records()) == {good["metadata"]["uid"]}
    assert not (plugin.plugin_dir / "mps").exists() or not any(
        (plugin.plugin_dir / "mps").iterdir()
    )


def test_mps_and_time_slicing_configs_are_applied(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    plugin = new_plugin(tmp_path, machine, store)
    gpu2, gpu3 = machine.gpu(2).uuid, machine.gpu(3).uuid
    claim = make_claim(
        store,
        "shared",
        [("mps", "gpu-2"), ("mps", "gpu-3"), ("ts", "gpu-5")],
        [
            (
                ["mps"],
                gpu_config(
                    strategy="MPS",
                    mpsConfig={
                        "defaultActiveThreadPercentage": 40,
                        "defaultPinnedDeviceMemoryLimit": "10Gi",
                        "defaultPerDevicePinnedMemoryLimit": {gpu3: "5Gi"},
                    },
                ),
            ),
            (["ts"], gpu_config(strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"})),
        ],
    )
    uid = claim["metadata"]["uid"]
    assert plugin.prepare(refs(claim))[uid].error == ""
    spec = cdi.read_spec(specs(tmp_path)[uid])
    edits = {d["name"].removeprefix(f"{uid}-"): d["containerEdits"] for d in spec["devices"]}
    assert (
        edits["gpu-2"]["env"]
        == edits["gpu-3"]["env"]
        == [
            "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M,1=5120M",
        ]
    )
    mounts = {m["containerPath"]: Path(m["hostPath"]) for m in edits["gpu-2"]["mounts"]}
    assert set(mounts) == {"/dev/shm", "/tmp/nvidia-mps"}
    assert all(p.is_dir() and p.name in ("shm", "pipe") for p in mounts.values())
    assert "env" not in edits["gpu-5"]  # time-slicing changes the GPU, not the container
    state = plugin.checkpoint.get(uid).handler_state  # type: ignore[union-attr]
    sharing = {s["strategy"]: s for s in state["sharing"]}
    assert sharing["TimeSlicing"]["interval"] == "Long"
    assert sharing["TimeSlicing"]["devices"] == ["gpu-5"]
    assert sharing["MPS"]["pinnedDeviceMemoryLimits"] == {gpu2: "10240M", gpu3: "5120M"}
    plugin.unprepare(refs(claim))
    assert not mounts["/dev/shm"].parent.exists()


def test_class_config_is_overridden_by_claim_config(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    plugin = new_plugin(tmp_path, machine, store)
    claim = make_claim(store, "c", [("gpu", "gpu-1")])
    claim["status"]["allocation"]["devices"]["config"] = [
        {
            "source": "FromClaim",
            "requests": [],
            "opaque": {
                "driver": "gpu.nvidia.com",
                "parameters": gpu_config(
                    strategy="TimeSlicing", timeSlicingConfig={"interval": "Short"}
                ),
            },
        },
        {
            "source": "FromClass",
            "opaque": {
                "driver": "gpu.nvidia.com",
                "parameters": gpu_config(
                    strategy="TimeSlicing", timeSlicingConfig={"interval": "Long"}
                ),
            },
        },
        {"source": "FromClaim", "opaque": {"driver": "other.example.com", "parameters": {"x": 1}}},
    ]
    store.update(claim)
    uid = claim["metadata"]["uid"]
    assert plugin.prepare(refs(claim))[uid].error == ""
    state = plugin.checkpoint.get(uid).handler_state  # type: ignore[union-attr]
    assert state["sharing"][0]["interval"] == "Short"


def test_gpu_config_on_a_mig_request_names_the_kind(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    plugin = new_plugin(tmp_path, machine, store)
    claim = make_claim(
        store, "m", [("mig", "gpu-0-mig-1g10gb-19-0")], [(["mig"], gpu_config(strategy="MPS"))]
    )
    error = plugin.prepare(refs(claim))[claim["metadata"]["uid"]].error
    assert "status.allocation.devices.config[0].opaque.parameters.kind" in error
    assert "MigDeviceConfig" in error


def test_lost_spec_is_restored_and_orphans_and_temporaries_removed(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    claim = make_claim(store, "a", [("gpu", "gpu-1")])
    uid = claim["metadata"]["uid"]
    new_plugin(tmp_path, machine, store).prepare(refs(claim))
    path = specs(tmp_path)[uid]
    content = path.read_text()
    path.unlink()
    orphan = cdi.spec_path(tmp_path / "cdi", KIND, "orphan-uid")
    orphan.write_text(content)
    tmp = tmp_path / "cdi" / f".k8s.gpu.nvidia.com-claim_{uid}.yaml.x.tmp"
    tmp.write_text("half")
    foreign = tmp_path / "cdi" / "k8s.device-plugin.nvidia.com-gpu.json"
    foreign.write_text("{}")
    ckpt_dir = tmp_path / "kubelet" / "plugins" / "gpu.nvidia.com"
    half_checkpoint = ckpt_dir / ".checkpoint.json.abc.tmp"
    half_checkpoint.write_text("{")
    plugin = new_plugin(tmp_path, machine, store)
    assert not half_checkpoint.exists()
    assert plugin.last_reconcile.restored_specs == [uid]
    assert plugin.last_reconcile.removed_orphans == ["orphan-uid"]
    assert path.read_text() == content
    assert not orphan.exists() and not tmp.exists()
    assert foreign.exists()  # another driver's spec is never touched


def test_damaged_checkpoint_is_an_error_not_an_empty_state(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    claim = make_claim(store, "a", [("gpu", "gpu-1")])
    plugin = new_plugin(tmp_path, machine, store)
    plugin.prepare(refs(claim))
    text = plugin.checkpoint.path.read_text()
    plugin.checkpoint.path.write_text(text.replace("gpu-1", "gpu-2"))
    with pytest.raises(CheckpointError, match="checksum"):
        Checkpoint(plugin.checkpoint.path)


PREPARE_POINTS = [
    p
    for p in CRASH_POINTS
    if not p.startswith(("unprepare", "cdi-removed", "handler-un", "record"))
]
UNPREPARE_POINTS = [p for p in CRASH_POINTS if p not in PREPARE_POINTS]


@pytest.mark.parametrize("point", PREPARE_POINTS)
def test_crash_during_prepare_then_kubelet_retry_converges(
    tmp_path: Path, machine: Machine, store: MemoryStore, point: str
) -> None:
    done = make_claim(store, "done", [("gpu", "gpu-6")])
    claim = make_claim(store, "a", [("gpu", "gpu-1")], [((), gpu_config(strategy="MPS"))])
    uid = claim["metadata"]["uid"]
    baseline = new_plugin(tmp_path / "clean", machine, store).prepare(refs(claim))[uid]
    new_plugin(tmp_path, machine, store).prepare(refs(done))

    with pytest.raises(Crash):
        new_plugin(tmp_path, machine, store, crash_at=point).prepare(refs(claim))
    restarted = new_plugin(tmp_path, machine, store)
    records = restarted.checkpoint.records()
    # After restart: spec files are exactly the completed claims, nothing half-done remains.
    assert set(specs(tmp_path)) == {
        u for u, r in records.items() if r.state == ClaimState.PREPARE_COMPLETED
    }
    assert all(r.state == ClaimState.PREPARE_COMPLETED for r in records.values())
    assert done["metadata"]["uid"] in records
    mps = restarted.plugin_dir / "mps"
    assert (uid in records) == any(p.name.startswith(uid) for p in mps.glob("*"))
    # The kubelet never got an answer, so it calls again: same result as a clean run.
    again = restarted.prepare(refs(claim))[uid]
    assert again == baseline
    assert set(specs(tmp_path)) == {uid, done["metadata"]["uid"]}
    assert len([p for p in mps.iterdir() if p.name.startswith(uid)]) == 1


@pytest.mark.parametrize("point", UNPREPARE_POINTS)
def test_crash_during_unprepare_then_kubelet_retry_converges(
    tmp_path: Path, machine: Machine, store: MemoryStore, point: str
) -> None:
    keep = make_claim(store, "keep", [("gpu", "gpu-6")])
    claim = make_claim(store, "a", [("gpu", "gpu-1")], [((), gpu_config(strategy="MPS"))])
    uid = claim["metadata"]["uid"]
    new_plugin(tmp_path, machine, store).prepare(refs(keep, claim))
    with pytest.raises(Crash):
        new_plugin(tmp_path, machine, store, crash_at=point).unprepare(refs(claim))
    restarted = new_plugin(tmp_path, machine, store)
    # An unprepare that had started is finished on restart; the retry is then a no-op.
    assert set(specs(tmp_path)) == {keep["metadata"]["uid"]}
    assert set(restarted.checkpoint.records()) == {keep["metadata"]["uid"]}
    assert restarted.unprepare(refs(claim)) == {uid: ""}
    assert not any(p.name.startswith(uid) for p in (restarted.plugin_dir / "mps").iterdir())
    assert set(specs(tmp_path)) == {keep["metadata"]["uid"]}


def test_crash_while_reconciling_still_converges(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    claim = make_claim(store, "a", [("gpu", "gpu-1")])
    plugin = new_plugin(tmp_path, machine, store)
    plugin.prepare(refs(claim))
    with pytest.raises(Crash):
        new_plugin(tmp_path, machine, store, crash_at="cdi-removed").unprepare(refs(claim))
    # The restart itself dies while finishing the unprepare, at a later step.
    with pytest.raises(Crash):
        new_plugin(tmp_path, machine, store, crash_at="handler-unprepared")
    final = new_plugin(tmp_path, machine, store)
    assert final.checkpoint.records() == {}
    assert specs(tmp_path) == {}


def test_mig_capability_minors_match_a_real_driver_table() -> None:
    """Entries of /proc/driver/nvidia-caps/mig-minors read on a real H100 node (driver 5xx)."""
    from kgpu.drivers.gpu import mig_cap_minors

    table = {
        ("gpu0/gi0/access", "gpu0/gi0/ci0/access"): (3, 4),
        ("gpu0/gi1/access", "gpu0/gi1/ci0/access"): (12, 13),
        ("gpu0/gi2/access", "gpu0/gi2/ci0/access"): (21, 22),
        ("gpu1/gi0/access", "gpu1/gi0/ci0/access"): (138, 139),
        ("gpu3/gi7/access", "gpu3/gi7/ci0/access"): (471, 472),
    }
    for (gi_entry, _), minors in table.items():
        gpu = int(gi_entry.split("/")[0][3:])
        gi = int(gi_entry.split("/")[1][2:])
        assert mig_cap_minors(gpu, gi, 0) == minors
    assert mig_cap_minors(0, 14, 7)[1] == 137  # the last CI of the last GI of gpu0


def test_claim_references_and_results_are_checked_before_any_file_is_named(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    plugin = new_plugin(tmp_path, machine, store)
    twice = make_claim(store, "twice", [("a", "gpu-1"), ("b", "gpu-1")])
    escaping = ClaimRef("default", "../../../escape", "x")
    empty = ClaimRef("", "", "")
    upper = ClaimRef("Default", "u-1", "x")
    out = plugin.prepare([*refs(twice), escaping, empty, upper])
    errors = {uid: r.error for uid, r in out.items()}
    assert errors[twice["metadata"]["uid"]] == (
        "claim default/twice: status.allocation.devices.results[1]: device node-a/gpu-1 of "
        "gpu.nvidia.com is allocated twice (also results[0])"
    )
    assert "uid must be letters, digits" in errors["../../../escape"]
    assert "a claim reference needs a namespace, a uid and a name" in errors[""]
    assert "namespace must be a DNS label" in errors["u-1"]
    assert not any("internal error" in e for e in errors.values())
    assert plugin.unprepare([escaping])["../../../escape"].startswith("claim 'default'/'x'")
    # nothing was named after the bad uids, inside the plugin dir or outside it
    assert not list(tmp_path.parent.glob("escape*")) and not list(tmp_path.rglob("*escape*"))
    assert plugin.checkpoint.records() == {}


def test_a_device_name_that_is_not_a_dns_label_fails_its_claim(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    plugin = new_plugin(tmp_path, machine, store)
    claim = make_claim(store, "odd", [("gpu", "../gpu-1")])
    (result,) = plugin.prepare(refs(claim)).values()
    assert "results[0].device: must be a DNS label, got '../gpu-1'" in result.error
