"""Rows 9 and 10 and healing in the full simulator (``kgpu sim``), from the acceptance files
unchanged; the DeviceClasses a DRA driver install creates are applied first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.computedomain.imex import hosts_addresses
from kgpu.dra.classes import device_classes
from kgpu.sim.scenario import scenario_from_dict
from kgpu.sim.simulation import Simulation

pytestmark = pytest.mark.slow

RACK_A = "7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.0"
RACK_B = "1f0c0a3e-2c4b-4d8e-9a51-6b8e2f3d4c5a.0"
CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "computedomain"


def _run(tmp: Path, nodes: list[dict[str, Any]], apply: list[Path], steps: Any = ()) -> Simulation:
    classes = tmp / "classes.yaml"
    classes.write_text(yaml.safe_dump_all(device_classes()))
    scenario = scenario_from_dict(
        {"nodes": nodes, "apply": [str(classes), *map(str, apply)], "steps": list(steps)},
        base=tmp,
    )
    return Simulation(scenario, work_dir=tmp / "work").run()


def _domain(sim: Simulation, name: str) -> dict[str, Any]:
    return sim.store.get("resource.nvidia.com/v1beta1", "ComputeDomain", name, "default")


def _nodes_config(tmp: Path, node: str, uid: str) -> list[str]:
    """The peer addresses a node's IMEX daemon resolves (its hosts mapping)."""
    (path,) = (tmp / "work" / "computedomain" / node).rglob(f"domains/{uid}/hosts")
    return hosts_addresses(path.read_text())


def test_row9_in_the_simulator(acceptance: Path, tmp_path: Path) -> None:
    sim = _run(
        tmp_path,
        [{"name": "gb200", "count": 4, "machine": "gb200", "clique": RACK_A}],
        [acceptance / "seed-guides" / "imex-channel-injection.yaml"],
    )
    rec = sim.pods["default/imex-channel-injection"]
    assert rec.phase == "Running"
    assert CHANNEL0 in rec.devices["ctr"]
    cd = _domain(sim, "imex-channel-injection")
    assert cd["status"]["status"] == "Ready"
    (node,) = cd["status"]["nodes"]
    assert node["name"] == rec.node
    assert _nodes_config(tmp_path, rec.node, cd["metadata"]["uid"]) == [node["ipAddress"]]
    (reported,) = sim.report()["computeDomains"]  # what `kgpu sim -o json` prints
    assert reported["status"]["status"] == "Ready"
    assert reported["status"]["nodes"][0]["ipAddress"] == node["ipAddress"]


@pytest.mark.parametrize("per_rack", [18, 9])  # 2 x 18 trays (NVL72 racks); 18 in all
def test_row10_in_the_simulator(acceptance: Path, tmp_path: Path, per_rack: int) -> None:
    sim = _run(
        tmp_path,
        [
            {"name": "rack-a", "count": per_rack, "machine": "gb200", "clique": RACK_A},
            {"name": "rack-b", "count": per_rack, "machine": "gb200", "clique": RACK_B},
        ],
        [acceptance / "seed-guides" / "nvbandwidth-test-job.yaml"],
    )
    workers = [r for k, r in sim.pods.items() if "nvbandwidth-test-worker" in k]
    assert len(workers) == 2 and all(w.phase == "Running" for w in workers)
    nodes = {w.node for w in workers}
    assert len(nodes) == 2
    labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in sim.store.list("v1", "Node")}
    assert len({labels[n]["nvidia.com/gpu.clique"] for n in nodes}) == 1
    for w in workers:
        (devices,) = w.devices.values()
        assert CHANNEL0 in devices
        assert sum(d.startswith("GPU-") for d in devices) == 4
    assert _domain(sim, "nvbandwidth-test-compute-domain")["status"]["status"] == "Ready"


@pytest.mark.parametrize("step", ["failNode", "deleteNode"])
def test_failed_node_heals_in_the_simulator(tmp_path: Path, step: str) -> None:
    sim = _run(
        tmp_path,
        [
            {"name": "rack-a", "count": 6, "machine": "gb200", "clique": RACK_A},
            {"name": "rack-b", "count": 6, "machine": "gb200", "clique": RACK_B},
        ],
        [EXAMPLES / "manifests" / "four-node-domain.yaml"],
        [{step: "rack-a-0"}],
    )
    cd = _domain(sim, "train-4")
    assert cd["status"]["status"] == "Ready"
    names = sorted(n["name"] for n in cd["status"]["nodes"])
    assert "rack-a-0" not in names and len(names) == 4
    assert all(n.startswith("rack-a-") for n in names)
    ips = sorted(n["ipAddress"] for n in cd["status"]["nodes"])
    assert len(set(ips)) == 4  # every node keeps its own address after rack-a-0 goes
    for node in names:
        assert sorted(_nodes_config(tmp_path, node, cd["metadata"]["uid"])) == ips
    rewrites = [e for e in sim.events if e.reason == "IMEXNodesConfigUpdated"]
    assert rewrites and all(
        e.message == "IMEX daemon of ComputeDomain default/train-4 rewrote its hosts mapping"
        for e in rewrites
    )
    reasons = [e.reason for e in sim.events if e.object == "ComputeDomain/default/train-4"]
    assert "ComputeDomainNotReady" in reasons
    assert reasons.index("ComputeDomainNotReady") < len(reasons) - 1 - reasons[::-1].index(
        "ComputeDomainReady"
    )


def test_two_domains_on_one_node_in_the_simulator(tmp_path: Path) -> None:
    """With a channel class that selects any channel slot (kgpu's recommendation), two domains
    share a node: each gets its own IMEX channel and its own daemon with its own config."""
    from kgpu.sim.scenario import load_scenario

    sim = Simulation(
        load_scenario(EXAMPLES / "two-domains-one-node.yaml"), work_dir=tmp_path / "work"
    ).run()
    a, b = sim.pods["default/pod-a"], sim.pods["default/pod-b"]
    assert a.phase == b.phase == "Running" and a.node == b.node == "tray"
    channels = {d for rec in (a, b) for d in rec.devices["ctr"] if d.startswith("/dev/nvidia-caps")}
    assert channels == {
        "/dev/nvidia-caps-imex-channels/channel0",
        "/dev/nvidia-caps-imex-channels/channel1",
    }
    uids = [_domain(sim, n)["metadata"]["uid"] for n in ("dom-a", "dom-b")]
    dirs = [
        p.parent for uid in uids for p in (tmp_path / "work").rglob(f"domains/{uid}/imexd.cfg.tmpl")
    ]
    assert len(dirs) == 2 and dirs[0] != dirs[1]
    assert all(_domain(sim, n)["status"]["status"] == "Ready" for n in ("dom-a", "dom-b"))
    daemons = [k for k in sim.pods if k.startswith("nvidia-dra-driver-gpu/")]
    assert len(daemons) == 2
