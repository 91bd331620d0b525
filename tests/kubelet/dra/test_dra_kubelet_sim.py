"""The simulator's DRA kubelet plugin: the agent's prepare path, in process, per pod."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dra_kubelet_helpers import NODE, gpu_config, make_claim

from kgpu.hardware.model import Machine
from kgpu.hardware.profiles import load_machine
from kgpu.kubelet import cdi
from kgpu.kubelet.dra.handler import ClaimError
from kgpu.sim.dra_node import DraKubeletPlugin
from kgpu.store import MemoryStore

KIND = "k8s.gpu.nvidia.com/claim"


def pod(
    name: str, claims: list[dict[str, Any]], containers: list[dict[str, Any]], **status: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"resourceClaims": claims, "containers": containers},
        "status": status,
    }


def test_containers_get_the_cdi_devices_and_env_of_their_claims(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    plugin = DraKubeletPlugin(tmp_path)
    plugin.register_node(NODE, machine, store)
    assert any(
        s["spec"]["nodeName"] == NODE for s in store.list("resource.k8s.io/v1", "ResourceSlice")
    )
    direct = make_claim(
        store,
        "direct",
        [("gpus", "gpu-1"), ("gpus", "gpu-2")],
        [([], gpu_config(strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 50}))],
    )
    generated = make_claim(
        store, "p-mig-x1", [("mig", "gpu-0-mig-1g10gb-19-2"), ("other", "gpu-5")]
    )
    p = pod(
        "p",
        [
            {"name": "gpus", "resourceClaimName": "direct"},
            {"name": "mig", "resourceClaimTemplateName": "t"},
        ],
        [
            {"name": "trainer", "resources": {"claims": [{"name": "gpus"}]}},
            {"name": "helper", "resources": {"claims": [{"name": "mig", "request": "mig"}]}},
            {"name": "sidecar"},
        ],
        resourceClaimStatuses=[{"name": "mig", "resourceClaimName": "p-mig-x1"}],
    )
    out = plugin.prepare(p, NODE, store)
    assert set(out) == {"trainer", "helper"}
    uid = direct["metadata"]["uid"]
    assert out["trainer"].devices == [f"{KIND}={uid}-gpu-1", f"{KIND}={uid}-gpu-2"]
    assert (
        out["trainer"].env["NVIDIA_VISIBLE_DEVICES"]
        == f"{machine.gpu(1).uuid},{machine.gpu(2).uuid}"
    )
    assert out["trainer"].env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    mig_uid = generated["metadata"]["uid"]
    assert out["helper"].devices == [f"{KIND}={mig_uid}-gpu-0-mig-1g10gb-19-2"]
    assert out["helper"].env["NVIDIA_VISIBLE_DEVICES"] == machine.gpus[0].mig_devices[2].uuid
    assert set(cdi.transient_specs(plugin.cdi_root(NODE), KIND)) == {uid, mig_uid}

    plugin.unprepare(p, NODE, store)
    assert cdi.transient_specs(plugin.cdi_root(NODE), KIND) == {}


def test_a_shared_claim_is_unprepared_with_its_last_pod(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    plugin = DraKubeletPlugin(tmp_path)
    plugin.register_node(NODE, machine, store)
    shared = make_claim(store, "shared", [("gpu", "gpu-3")])
    uses = [{"name": "g", "resourceClaimName": "shared"}]
    containers = [{"name": "c", "resources": {"claims": [{"name": "g"}]}}]
    a, b = pod("a", uses, containers), pod("b", uses, containers)
    assert (
        plugin.prepare(a, NODE, store)["c"].devices == plugin.prepare(b, NODE, store)["c"].devices
    )
    plugin.unprepare(a, NODE, store)
    assert set(cdi.transient_specs(plugin.cdi_root(NODE), KIND)) == {shared["metadata"]["uid"]}
    plugin.unprepare(b, NODE, store)
    assert cdi.transient_specs(plugin.cdi_root(NODE), KIND) == {}


def test_a_bad_config_fails_the_pod_with_the_field_named(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    plugin = DraKubeletPlugin(tmp_path)
    plugin.register_node(NODE, machine, store)
    make_claim(
        store, "bad", [("gpu", "gpu-1")], [([], gpu_config(strategy="MPS", mpsConfig={"x": 1}))]
    )
    p = pod(
        "p",
        [{"name": "g", "resourceClaimName": "bad"}],
        [{"name": "c", "resources": {"claims": [{"name": "g"}]}}],
    )
    with pytest.raises(ClaimError, match=r"opaque\.parameters\.sharing\.mpsConfig\.x"):
        plugin.prepare(p, NODE, store)
    assert cdi.transient_specs(plugin.cdi_root(NODE), KIND) == {}


def test_claims_of_other_drivers_are_left_alone(
    tmp_path: Path, machine: Machine, store: MemoryStore
) -> None:
    plugin = DraKubeletPlugin(tmp_path)
    plugin.register_node(NODE, machine, store)
    make_claim(store, "channel", [("channel", "channel-0")], driver="compute-domain.nvidia.com")
    p = pod(
        "p",
        [{"name": "ch", "resourceClaimName": "channel"}],
        [{"name": "c", "resources": {"claims": [{"name": "ch"}]}}],
    )
    assert plugin.prepare(p, NODE, store) == {}


def test_partitionable_mig_placement_is_materialised(tmp_path: Path, store: MemoryStore) -> None:
    plugin = DraKubeletPlugin(tmp_path, partitionable=True)
    machine = load_machine("dgx-h100", hostname=NODE)
    plugin.register_node(NODE, machine, store)
    names = {
        d["name"]
        for s in store.list("resource.k8s.io/v1", "ResourceSlice")
        for d in s["spec"].get("devices") or []  # 1.35: counter sets in slices of their own
    }
    placement = next(n for n in sorted(names) if n.startswith("gpu-3-mig-3g"))
    make_claim(store, "shape", [("mig", placement)])
    p = pod(
        "p",
        [{"name": "m", "resourceClaimName": "shape"}],
        [{"name": "c", "resources": {"claims": [{"name": "m"}]}}],
    )
    out = plugin.prepare(p, NODE, store)
    assert out["c"].env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")
    spec = cdi.read_spec(next(iter(cdi.transient_specs(plugin.cdi_root(NODE), KIND).values())))
    paths = [n["path"] for n in spec["devices"][0]["containerEdits"]["deviceNodes"]]
    assert paths[0] == f"/dev/nvidia{machine.gpu(3).minor}"
    assert len(paths) == 3 and all(p.startswith("/dev/nvidia-caps/") for p in paths[1:])


@pytest.mark.slow
def test_simulated_cluster_runs_pods_with_prepared_claims() -> None:
    """Through the whole simulator: allocation by the scheduler, preparation by this plugin."""
    import copy

    from kgpu.dra.classes import device_classes
    from kgpu.sim.scenario import scenario_from_dict
    from kgpu.sim.simulation import Simulation

    good = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "two", "namespace": "default"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2},
                        }
                    ],
                    "config": [
                        {
                            "requests": ["gpu"],
                            "opaque": {
                                "driver": "gpu.nvidia.com",
                                "parameters": gpu_config(
                                    strategy="MPS", mpsConfig={"defaultActiveThreadPercentage": 50}
                                ),
                            },
                        }
                    ],
                }
            }
        },
    }
    bad = copy.deepcopy(good)
    bad["metadata"]["name"] = "bad"
    bad["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["sharing"]["strategy"] = (
        "Mps"
    )

    def sim_pod(name: str, template: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": template}],
                "containers": [
                    {"name": "c", "image": "cuda", "resources": {"claims": [{"name": "g"}]}}
                ],
            },
        }

    scenario = scenario_from_dict(
        {
            "nodes": [{"name": "n", "machine": "dgx-h100"}],
            "apply": [*device_classes(), good, bad, sim_pod("p", "two"), sim_pod("q", "bad")],
        }
    )
    sim = Simulation(scenario)
    sim.run()
    pods = {p["name"]: p for p in sim.report()["pods"]}
    assert pods["p"]["phase"] == "Running"
    assert len(pods["p"]["devices"]["c"]) == 2
    assert all(d.startswith(f"{KIND}=") for d in pods["p"]["devices"]["c"])
    assert len(pods["p"]["env"]["c"]["NVIDIA_VISIBLE_DEVICES"].split(",")) == 2
    assert pods["p"]["env"]["c"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert pods["q"]["phase"] == "Pending"
    assert "opaque.parameters.sharing.strategy" in pods["q"]["message"]
