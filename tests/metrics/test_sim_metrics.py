"""GPU metrics of the simulated cluster (``kgpu sim --serve-metrics``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from kgpu.config.loader import ConfigSet
from kgpu.drivers.attribution import resolve_dra_device
from kgpu.hardware.mig import apply_layout
from kgpu.hardware.profiles import load_machine
from kgpu.kubelet.podresources import ClaimDevice
from kgpu.metrics.simulated import DEFAULT_MEMORY_MIB
from kgpu.node.view import build_node_view
from kgpu.sim.metrics import SimMetrics
from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import run_scenario

from .conftest import parse_series, series


def test_time_sliced_pods_of_row_3_get_their_share(acceptance: Path) -> None:
    sim = run_scenario(
        scenario_from_dict(
            {
                "name": "row-3",
                "nodes": [{"name": "gpu-node", "machine": "t4"}],
                "configs": [str(acceptance / "seed-guides/gpu-sharing-config-any.yaml")],
                "defaultConfig": "any",
                "apply": [str(acceptance / "vks-samples/time-slicing-verification.yaml")],
            }
        )
    )
    try:
        text = SimMetrics(sim).scrape()
    finally:
        sim.close()
    (util,) = series(text, "DCGM_FI_DEV_GPU_UTIL")
    (fb,) = series(text, "DCGM_FI_DEV_FB_USED")
    shares = series(text, "kgpu_pod_gpu_sm_utilization")
    memory = series(text, "kgpu_pod_gpu_memory_used_bytes")
    # Four running pods share the T4: each gets a quarter, none is shown the whole GPU.
    assert len(shares) == 4 and {v for _, v in shares} == {25.0}
    assert util[1] == 100 and "pod" not in util[0]
    assert sum(v for _, v in shares) == util[1]
    assert sum(v for _, v in memory) == fb[1] * 1024 * 1024 == 4 * DEFAULT_MEMORY_MIB * 1024 * 1024
    assert {lab["Hostname"] for lab, _ in shares} == {"gpu-node"}


def test_devices_from_dra_claims_count_too() -> None:
    machine = apply_layout(load_machine("p4de.24xlarge"), {0: {"1g.10gb": 7}})
    view = build_node_view(machine, ConfigSet(), {})
    mig = machine.gpus[0].mig_devices[2]
    whole = machine.gpus[5]
    record = SimpleNamespace(
        finished=False,
        admitted=True,
        env={"main": {"NVIDIA_VISIBLE_DEVICES": f"{mig.uuid},{whole.uuid}"}, "side": {}},
    )
    node = SimpleNamespace(
        name="dra-node", machine=machine, view=view, allocations={}, pods={"ml/claimer": record}
    )
    text = SimMetrics(SimpleNamespace(nodes=[node], now=0.0)).scrape()
    (used,) = series(text, "DCGM_FI_DEV_FB_USED", GPU_I_ID=str(mig.gi_id))
    assert used[0]["pod"] == "claimer" and used[1] == DEFAULT_MEMORY_MIB
    (util,) = series(text, "DCGM_FI_DEV_GPU_UTIL", UUID=whole.uuid)
    assert util[0]["pod"] == "claimer" and util[1] > 0
    # kgpu's DRA driver names MIG devices gpu-<minor>-mig-<profile>-<profile id>-<start>.
    device = ClaimDevice("gpu.nvidia.com", "dra-node", f"gpu-0-mig-1g10gb-19-{mig.placement_start}")
    assert resolve_dra_device(device, machine, {}) == mig.uuid


def test_the_last_injected_xid_is_served_per_gpu_application_xids_included() -> None:
    sim = run_scenario(
        scenario_from_dict({"name": "xid", "nodes": [{"name": "n1", "machine": "dgx-h100"}]})
    )
    try:
        metrics = SimMetrics(sim)
        assert {v for _, v in series(metrics.scrape(), "DCGM_FI_DEV_XID_ERRORS")} == {0}
        sim.inject_xid("n1", 2, 79)
        sim.inject_xid("n1", 5, 13)  # an application XID: no device turns Unhealthy, DCGM shows it
        sim.inject_xid("n1", 2, 48)
        text = metrics.scrape()
    finally:
        sim.close()
    xids = {lab["gpu"]: v for lab, v in series(text, "DCGM_FI_DEV_XID_ERRORS")}
    assert xids == {**{str(i): 0 for i in range(8)}, "2": 48, "5": 13}


def test_every_default_field_is_served_on_a_simulated_hopper_node() -> None:
    """Dashboards can be built on the simulator: a dgx-h100 serves all 25 default fields."""
    from kgpu.metrics import fields as F

    sim = run_scenario(
        scenario_from_dict({"name": "all", "nodes": [{"name": "n1", "machine": "dgx-h100"}]})
    )
    try:
        text = SimMetrics(sim).scrape()
    finally:
        sim.close()
    served = {name for name, _, _ in parse_series(text)}
    assert {spec.name for spec in F.DCGM_METRICS} <= served
