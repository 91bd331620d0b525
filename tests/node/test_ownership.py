"""The pure ledger and policy of one owner per GPU (issue 21), and how they are configured."""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

import pytest

from kgpu.config.loader import load_config_files
from kgpu.dra.slices import resource_slices
from kgpu.dra.withhold import OMIT, TAINT, withhold_devices, withhold_method
from kgpu.errors import FieldError
from kgpu.hardware.profiles import load_machine
from kgpu.node import ownership as own
from kgpu.node.view import build_node_view


def view_of(tmp_path: Path, machine: str, text: str = "version: v1\n", **labels: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "dp.yaml"
    path.write_text(text)
    return build_node_view(load_machine(machine), load_config_files([path]), labels)


TS = (
    "version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
    "    - {name: nvidia.com/gpu, replicas: 4}\n"
)


def test_a_gpu_held_by_one_api_is_refused_to_the_other_naming_the_holder() -> None:
    dp = own.Holding(own.DEVICE_PLUGIN, "GPU-a::1", "GPU-a::1", "GPU-a", "nvidia.com/gpu", "ns/p")
    ledger = own.acquire(own.EMPTY, [dp])
    claim = own.Holding(own.DRA, "uid-1", "gpu-0-mig-1g-10gb-19-0", "GPU-a", pod="ns/c")
    with pytest.raises(own.OwnershipConflict) as err:
        own.acquire(ledger, [claim])
    assert str(err.value) == (
        "GPU GPU-a is held by the device plugin (pod ns/p, nvidia.com/gpu device GPU-a::1); "
        "DRA cannot use it (device gpu-0-mig-1g-10gb-19-0) until that holder is gone"
    )
    # another replica of the same GPU through the same API is fine; so is a claim elsewhere
    more = own.acquire(ledger, [own.Holding(own.DEVICE_PLUGIN, "GPU-a::2", "GPU-a::2", "GPU-a")])
    both = own.acquire(more, [own.Holding(own.DRA, "uid-2", "gpu-1", "GPU-b")])
    assert both.owner("GPU-a") == own.DEVICE_PLUGIN and both.owner("GPU-b") == own.DRA
    assert own.problems(both) == []
    # all or none: a claim of two GPUs, one of them held, takes neither
    with pytest.raises(own.OwnershipConflict):
        own.acquire(both, [own.Holding(own.DRA, "u3", "gpu-2", "GPU-c"), claim])
    assert both.owner("GPU-c") is None
    assert own.release(both, own.DRA, ["uid-2"]).owner("GPU-b") is None


def test_pod_resources_releases_only_ids_it_no_longer_lists_after_the_grace() -> None:
    old = own.Holding(own.DEVICE_PLUGIN, "GPU-a", "GPU-a", "GPU-a", "nvidia.com/gpu", at=10.0)
    new = own.Holding(own.DEVICE_PLUGIN, "GPU-b", "GPU-b", "GPU-b", "nvidia.com/gpu", at=19.5)
    kept = own.Holding(own.DEVICE_PLUGIN, "GPU-c", "GPU-c", "GPU-c", "nvidia.com/gpu", at=1.0)
    ledger = own.acquire(own.EMPTY, [old, new, kept])
    after = own.release_absent(ledger, {"GPU-c": "ns/pod-c"}, fetched_at=20.0, grace_s=2.0)
    assert after.owner("GPU-a") is None  # the pod is gone
    assert after.owner("GPU-b") == own.DEVICE_PLUGIN  # allocated just now: not recorded yet
    assert after.holdings("GPU-c")[0].pod == "ns/pod-c"  # named once PodResources lists it


def test_device_plugin_drops_every_replica_and_mig_device_of_a_claimed_gpu(tmp_path: Path) -> None:
    view = view_of(tmp_path, "rtx-2080ti", TS)
    gpu = view.machine.gpus[0].uuid
    ledger = own.acquire(own.EMPTY, [own.Holding(own.DRA, "u", "gpu-0", gpu)])
    listed = own.device_plugin_view(view, ledger, own.policy_of(view))
    assert listed.resource("nvidia.com/gpu").count == 0  # all 4 replicas dropped, not Unhealthy
    assert own.device_plugin_view(view, own.EMPTY, own.policy_of(view)) is view


def test_policy_dra_keeps_only_the_ids_pods_hold_and_withholds_the_rest(tmp_path: Path) -> None:
    view = view_of(tmp_path, "rtx-2080ti", TS + "gpuOwnership: dra\n")
    gpu = view.machine.gpus[0].uuid
    policy = own.policy_of(view)
    assert policy.mode(gpu) == own.DRA
    held = own.acquire(own.EMPTY, [own.Holding(own.DEVICE_PLUGIN, f"{gpu}::1", f"{gpu}::1", gpu)])
    listed = own.device_plugin_view(view, held, policy)
    # the running pod's replica stays counted; no new pod can join it
    assert [d.id for d in listed.resource("nvidia.com/gpu").devices] == [f"{gpu}::1"]
    assert own.dra_withheld(view.machine, held, policy) == {
        gpu: f"held by the device plugin ({gpu}::1)"
    }
    # once the pod is gone, DRA offers it and the device plugin lists nothing
    assert own.dra_withheld(view.machine, own.EMPTY, policy) == {}
    assert own.device_plugin_view(view, own.EMPTY, policy).resource("nvidia.com/gpu").count == 0
    # a policy naming an API that does not run falls back to the one that does
    alone = policy.running([own.DEVICE_PLUGIN])
    assert own.device_plugin_view(view, own.EMPTY, alone).resource("nvidia.com/gpu").count == 4


def test_split_by_index_and_uuid_and_what_plan_offers(tmp_path: Path) -> None:
    machine = load_machine("dgx-h100")
    uuid = machine.gpus[1].uuid
    text = (
        "version: v1\ngpuOwnership:\n  default: devicePlugin\n  gpus:\n"
        f"  - {{devices: [0, {uuid}], owner: dra}}\n  - {{devices: [0, 2], owner: shared}}\n"
    )
    view = view_of(tmp_path, "dgx-h100", text)
    modes = [m for _, m in view.gpu_ownership]
    assert modes == ["dra", "dra", "shared", *["devicePlugin"] * 5]  # the first entry wins
    offers = own.offers(view)
    assert [o.offered_by for o in offers[:4]] == [("dra",), ("dra",), own.APIS, ("devicePlugin",)]


@pytest.mark.parametrize(
    ("text", "path", "says"),
    [
        ("gpuOwnership: both\n", "gpuOwnership", "unknown mode 'both'"),
        ("gpuOwnership: {default: DRA}\n", "gpuOwnership.default", "unknown mode 'DRA'"),
        (
            "gpuOwnership: {gpus: [{devices: ['0:1'], owner: dra}]}\n",
            "gpuOwnership.gpus[0].devices",
            "is a MIG device; ownership is per physical GPU",
        ),
        (
            "gpuOwnership: {gpus: [{devices: [0], owner: nobody}]}\n",
            "gpuOwnership.gpus[0].owner",
            "unknown mode 'nobody'",
        ),
        ("gpuOwnership: {gpus: [{devices: [0]}]}\n", "gpuOwnership.gpus[0].owner", "required"),
    ],
)
def test_bad_policy_names_the_file_and_field(
    tmp_path: Path, text: str, path: str, says: str
) -> None:
    file = tmp_path / "dp.yaml"
    file.write_text("version: v1\n" + text)
    with pytest.raises(FieldError) as err:
        load_config_files([file])
    message = str(err.value)
    assert str(file) in message and f"{path}:" in message and says in message, message


def test_a_policy_naming_a_gpu_the_node_lacks_is_an_error(tmp_path: Path) -> None:
    text = "version: v1\ngpuOwnership:\n  gpus:\n  - {devices: [0, 3], owner: dra}\n"
    with pytest.raises(FieldError) as err:
        view_of(tmp_path, "a40", text)
    assert str(err.value) == (
        f"{tmp_path / 'dp.yaml'}: dp: gpuOwnership.gpus[0].devices[1]: 3 names no GPU of this node "
        "(a40: GPU indices 0, or their UUIDs)"
    )


def test_chart_value_is_the_default_of_configs_without_their_own(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "mig: {strategy: none}\ndevicePlugin:\n  gpuOwnership: dra\n  config:\n"
        "    default: plain\n    data:\n      plain: 'version: v1'\n"
        "      own: 'gpuOwnership: devicePlugin'\n"
    )
    configs = load_config_files([values])
    plain = build_node_view(load_machine("a40"), configs, {})
    assert plain.gpu_ownership[0][1] == "dra"
    own_view = build_node_view(
        load_machine("a40"), configs, {"nvidia.com/device-plugin.config": "own"}
    )
    assert own_view.gpu_ownership[0][1] == "devicePlugin"
    values.write_text("devicePlugin:\n  gpuOwnership: mine\n  config: {default: x}\n")
    with pytest.raises(FieldError) as err:
        load_config_files([values])
    assert "devicePlugin.gpuOwnership: unknown mode 'mine'" in str(err.value)


def test_dra_withholds_by_omitting_before_1_36_and_tainting_from_it() -> None:
    assert [withhold_method(v) for v in ("1.32", "v1.35.2", "1.36", "1.37.0", "junk")] == [
        OMIT,
        OMIT,
        TAINT,
        TAINT,
        OMIT,
    ]
    machine = load_machine("p4de.24xlarge")
    slices = resource_slices(machine, "n", partitionable=True)
    held = {machine.gpus[0].uuid: "held"}
    names = [d["name"] for s in withhold_devices(slices, held, OMIT) for d in s["spec"]["devices"]]
    assert not any(n == "gpu-0" or n.startswith("gpu-0-") for n in names)  # placements too
    assert len(withhold_devices(slices, held, OMIT)) == len(slices)  # the pool stays whole
    tainted = [
        d
        for s in withhold_devices(slices, held, TAINT)
        for d in s["spec"]["devices"]
        if d.get("taints")
    ]
    assert tainted and all(
        d["taints"]
        == [{"key": "gpu.nvidia.com/owner", "value": "device-plugin", "effect": "NoSchedule"}]
        for d in tainted
    )


def _share(holder: str, gpu: str, share: Fraction | None, device: str = "gpu-0") -> own.Holding:
    return own.Holding(own.DRA, holder, device, gpu, pod=f"ns/{holder}", share=share)


def test_shares_of_one_gpu_sum_to_at_most_the_whole_and_exclude_a_whole_holding() -> None:
    """Issue 27: a memory share is a DRA holding with a fraction of its GPU; many shares of
    one GPU are fine, a whole-GPU holding beside them or shares beyond the whole are not."""
    ledger = own.acquire(own.EMPTY, [_share("a", "GPU-a", Fraction(1, 4))])
    ledger = own.acquire(ledger, [_share("b", "GPU-a", Fraction(1, 2))])
    assert own.problems(ledger) == [] and len(ledger.holdings("GPU-a")) == 2
    with pytest.raises(own.OwnershipConflict) as err:
        own.acquire(ledger, [_share("c", "GPU-a", Fraction(1, 2))])
    assert str(err.value).startswith("GPU GPU-a is shared beyond its whole (1.25 of it) by")
    with pytest.raises(own.OwnershipConflict) as err:
        own.acquire(ledger, [_share("w", "GPU-a", None)])
    assert str(err.value).startswith(
        "GPU GPU-a is held whole by DRA claim ns/w (device gpu-0) and in shares by DRA claim "
        "ns/a (device gpu-0, share 1/4 of it)"
    )
    # problems() flags the same in a ledger built around acquire (a checkpoint, a bug)
    bad = own.Ledger({"GPU-a": (*ledger.holdings("GPU-a"), _share("w", "GPU-a", None))})
    assert [p.split(" by ")[0] for p in own.problems(bad)] == ["GPU GPU-a is held whole"]
    # the device plugin is not offered a GPU with a share
    dp = own.Holding(own.DEVICE_PLUGIN, "GPU-a", "GPU-a", "GPU-a", "nvidia.com/gpu")
    with pytest.raises(own.OwnershipConflict):
        own.acquire(ledger, [dp])
    assert ledger.held_by(own.DRA) == {"GPU-a"}
    # the last share released frees the GPU
    assert own.release(ledger, own.DRA, ["a", "b"]).owner("GPU-a") is None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_shares_and_whole_claims_keep_the_ledger_sound(seed: int) -> None:
    """Seeded random steps of share claims, whole claims, device-plugin ids and releases over
    three GPUs: whatever acquire accepts, problems() finds nothing wrong, and a refused step
    leaves the ledger as it was."""
    rng = random.Random(seed)
    gpus = ["GPU-a", "GPU-b", "GPU-c"]
    ledger = own.EMPTY
    holders: list[tuple[str, str]] = []
    refused = 0
    for n in range(300):
        roll = rng.random()
        if roll < 0.25 and holders:
            api, holder = holders.pop(rng.randrange(len(holders)))
            ledger = own.release(ledger, api, [holder])
            continue
        gpu = rng.choice(gpus)
        if roll < 0.7:
            new = [_share(f"s{n}", gpu, Fraction(rng.choice([1, 2, 4, 8]), 16))]
        elif roll < 0.85:
            if any(h.share is None for h in ledger.holdings(gpu)):
                continue  # the allocator never gives a whole device twice (not the ledger's rule)
            new = [_share(f"w{n}", gpu, None)]
        else:
            new = [own.Holding(own.DEVICE_PLUGIN, f"{gpu}::{n}", f"{gpu}::{n}", gpu)]
        try:
            after = own.acquire(ledger, new)
        except own.OwnershipConflict:
            refused += 1
            continue
        ledger = after
        holders.append((new[0].api, new[0].holder))
        assert own.problems(ledger) == []
        for g in gpus:
            shares = [h.share for h in ledger.holdings(g) if h.share is not None]
            assert sum(shares, Fraction(0)) <= 1
    assert refused > 0 and len(ledger) > 0
