"""Memory shares of a GPU in ``kgpu sim`` (issue 27): the scenario's ``draDriver`` map turns
consumable shares on, the scheduler's allocator places claims by memory, and the release's
``DRAConsumableCapacity`` gate decides whether the API server keeps the shared fields."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.dra.shares import MEMORY, SharePolicy
from kgpu.errors import FieldError
from kgpu.sim.scenario import load_scenario, scenario_from_dict
from kgpu.sim.simulation import Simulation
from kgpu.testing.manifests import memory_share_claim

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "sharing" / "memory-shares-h100.yaml"
runner = CliRunner()


def _claim(name: str, memory: str) -> list[dict[str, Any]]:
    """A ResourceClaim asking ``memory`` of one GPU and a pod (runAsUser set) using it."""
    claim = memory_share_claim(name, memory, namespace=None)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "securityContext": {"runAsUser": 1000 + len(name)},
            "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }
    return [claim, pod]


def _sim(**extra: Any) -> Simulation:
    scenario = scenario_from_dict(
        {
            "nodes": [{"name": "h100", "machine": "h100-80gb"}],
            "devicePlugin": False,
            "draDriver": {"consumableShares": "memory"},
            **extra,
        }
    )
    sim = Simulation(scenario)
    sim.start()
    return sim


def _gpu_device(sim: Simulation) -> dict[str, Any]:
    (slice_,) = sim.store.list("resource.k8s.io/v1", "ResourceSlice")
    return dict(slice_["spec"]["devices"][0])


def test_draDriver_map_is_the_charts_values() -> None:
    scenario = scenario_from_dict(
        {
            "draDriver": {
                "consumableShares": "memory",
                "shareMemoryMinimumMiB": 2048,
                "shareMemoryStepMiB": 512,
            }
        }
    )
    assert scenario.dra_driver
    assert scenario.dra_shares == SharePolicy(MEMORY, 0, 2048, 512)
    assert not scenario_from_dict({"draDriver": {}}).dra_shares.enabled
    assert scenario_from_dict({"draDriver": {}}).dra_driver


@pytest.mark.parametrize(
    ("value", "path", "words"),
    [
        ({"consumableShares": "half"}, "draDriver.consumableShares", "use disabled, memory"),
        (
            {"consumableShares": "memory", "shareMemoryStepMiB": 0},
            "draDriver.shareMemoryStepMiB",
            "positive number of MiB",
        ),
        (
            {"consumableShares": "memory", "shareMemoryMinimumMiB": "1Gi"},
            "draDriver.shareMemoryMinimumMiB",
            "positive number of MiB",
        ),
        ({"consumableshares": "memory"}, "draDriver.consumableshares", "unknown field"),
        ("yes", "draDriver", "must be true, false or a map"),
    ],
)
def test_bad_draDriver_values_name_the_field(value: object, path: str, words: str) -> None:
    with pytest.raises(FieldError) as exc:
        scenario_from_dict({"draDriver": value})
    assert any(p.path == path and words in p.message for p in exc.value.problems), str(exc.value)


def test_claims_are_placed_by_memory_and_the_one_that_does_not_fit_waits() -> None:
    sim = _sim()
    device = _gpu_device(sim)
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"]["memory"]["value"] == "79Gi"  # 81,559 MiB on the 1 GiB grid
    for name, memory in (("a", "20Gi"), ("b", "40Gi"), ("c", "60Gi")):
        for obj in _claim(name, memory):
            sim.apply(obj)
    sim.settle()
    assert [sim.pods[f"default/{n}"].node for n in "abc"] == ["h100", "h100", ""]
    assert "cannot allocate all claims" in sim.pods["default/c"].last_message
    claims = {
        c["metadata"]["name"]: c for c in sim.store.list("resource.k8s.io/v1", "ResourceClaim")
    }
    (result,) = claims["a"]["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-0" and result["shareID"]
    assert result["consumedCapacity"]["memory"] == "20Gi"
    assert "allocation" not in claims["c"].get("status", {})


@pytest.mark.parametrize(
    ("extra", "shared"),
    [
        ({"kubernetesVersion": "1.35"}, False),  # alpha, off: the API server drops the fields
        ({"kubernetesVersion": "1.34"}, False),
        ({"kubernetesVersion": "1.35", "featureGates": {"DRAConsumableCapacity": True}}, True),
        ({"kubernetesVersion": "1.36"}, True),  # beta, on by default
    ],
)
def test_the_release_decides_whether_the_api_server_keeps_the_shared_fields(
    extra: dict[str, Any], shared: bool
) -> None:
    device = _gpu_device(_sim(**extra))
    assert ("allowMultipleAllocations" in device) is shared
    assert ("requestPolicy" in device["capacity"]["memory"]) is shared
    assert device["capacity"]["memory"]["value"] == "79Gi"


def test_shares_off_by_default_publish_an_exclusive_gpu() -> None:
    scenario = scenario_from_dict(
        {"nodes": [{"name": "h100", "machine": "h100-80gb"}], "devicePlugin": False}
    )
    sim = Simulation(scenario)
    sim.start()
    assert "allowMultipleAllocations" not in _gpu_device(sim)


def test_example_two_run_and_the_third_waits_with_the_allocators_reason() -> None:
    result = runner.invoke(app, ["sim", str(EXAMPLE), "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["expect"]["failures"] == [] and data["expect"]["passed"] == 4
    phases = {p["owner"].split("/")[1].rsplit("-", 1)[0]: p["phase"] for p in data["pods"]}
    assert phases == {"chat-20g": "Running", "embed-40g": "Running", "summarize-60g": "Pending"}
    pending = next(p for p in data["pods"] if p["phase"] == "Pending")
    assert "cannot allocate all claims" in pending["message"]
    consumed = sorted(
        r["consumedCapacity"]["memory"]
        for c in data["resourceClaims"]
        for r in (c.get("status", {}).get("allocation") or {}).get("devices", {}).get("results", [])
        if r.get("shareID")
    )
    assert consumed == ["20Gi", "40Gi"]


def test_a_pod_of_another_user_on_a_shared_gpu_fails_to_prepare_saying_why() -> None:
    """A Legacy MPS daemon serves one user per GPU: the fourth pod, of another user, fits the
    GPU's memory (the allocator gives its claim a share) but kgpu refuses it at prepare, as
    the kubelet reports it; the first user's pods keep running."""
    sim = _sim()
    for name, memory in (("a", "20Gi"), ("b", "40Gi"), ("c", "10Gi")):
        claim, pod = _claim(name, memory)
        pod["spec"]["securityContext"]["runAsUser"] = 2000 if name == "c" else 1000
        sim.apply(claim)
        sim.apply(pod)
        sim.settle()
    assert [sim.pods[f"default/{n}"].phase for n in "abc"] == ["Running", "Running", "Pending"]
    message = sim.pods["default/c"].last_message
    assert message.startswith(
        "Failed to prepare dynamic resources: prepare claim default/c: claim default/c: pod "
        "default/c runs as user 2000, but the MPS daemon of GPU 0 serves user 1000 (claim "
        "default/a), and an MPS control daemon runs one user's server at a time"
    ), message
    assert any(
        e.reason == "FailedPrepareDynamicResources" and e.object == "Pod/default/c"
        for e in sim.events
    )
    (claim,) = [
        c
        for c in sim.store.list("resource.k8s.io/v1", "ResourceClaim")
        if c["metadata"]["name"] == "c"
    ]
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-0" and result["shareID"]  # the allocator did place it


def _schema() -> Any:
    from importlib import resources

    from jsonschema import Draft202012Validator

    text = resources.files("kgpu.cli").joinpath("schemas/sim.schema.json").read_text()
    return Draft202012Validator(json.loads(text))


def test_nodes_show_each_gpus_shares_in_json_and_tables() -> None:
    result = runner.invoke(app, ["sim", str(EXAMPLE), "-o", "json", "--watch"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (node,) = doc["nodes"]
    (gpu,) = node["shares"]
    assert gpu["gpu"] == 0 and gpu["uuid"].startswith("GPU-") and gpu["device"] == "gpu-0"
    assert gpu["capacity"] == {"computeShares": "100", "memory": "79Gi"}
    assert gpu["used"] == {"computeShares": "0", "memory": "60Gi"}
    assert [c["consumed"]["memory"] for c in gpu["claims"]] == ["20Gi", "40Gi"]
    assert [c["pods"][0].rsplit("-", 2)[0] for c in gpu["claims"]] == ["chat-20g", "embed-40g"]
    # one user's shares, one MPS server at the largest: the 20Gi share's ceiling is 40Gi
    assert [c.get("ceiling") for c in gpu["claims"]] == ["40Gi", None]
    assert doc["steps"][0]["nodes"][0]["shares"] == node["shares"]
    schema = _schema()
    assert list(schema.iter_errors(doc)) == []
    gpu["used"]["memory"] = 60 * 2**30  # a number is not the report's quantity string
    assert len(list(schema.iter_errors(doc))) == 1
    table = runner.invoke(app, ["sim", str(EXAMPLE)], env={"COLUMNS": "120"})
    assert "GPU 0 shares: 60Gi/79Gi memory, 2 claim(s)" in table.stdout
    assert "20Gi memory, ceiling 40Gi" in table.stdout
    watch = runner.invoke(app, ["sim", str(EXAMPLE), "--watch"], env={"COLUMNS": "120"})
    assert "GPU 0 shares: 60Gi/79Gi memory" in watch.stdout


def test_nodes_without_shares_keep_their_shape() -> None:
    result = runner.invoke(app, ["sim", str(REPO / "examples" / "mps-job.yaml"), "-o", "json"])
    assert result.exit_code == 0
    assert all("shares" not in n for n in json.loads(result.stdout)["nodes"])


def test_the_html_report_draws_one_slot_per_share_and_names_them() -> None:
    from kgpu.sim.html.capture import resolve_claims
    from kgpu.sim.html.gpus import gpu_cells

    sim = Simulation(load_scenario(EXAMPLE)).run()
    try:
        store = sim.store
        claims = store.list("resource.k8s.io/v1", "ResourceClaim")
        gpus, _ = resolve_claims(
            [c for c in claims if (c.get("status") or {}).get("allocation")],
            store.list("resource.k8s.io/v1", "ResourceSlice"),
            {},
        )
        node = sim.node("h100-node")
        assert node.machine is not None
        (cell,) = gpu_cells(node.machine, node.view, {}, dra=gpus["h100-node"])
    finally:
        sim.close()
    (device,) = cell["devices"]
    assert [p.split("/")[1].rsplit("-", 2)[0] for p in device["slots"]] == ["chat-20g", "embed-40g"]
    assert cell["mode"] == "whole" and device["claim"].count("default/") == 2
    assert cell["note"].startswith("DRA memory shares of 79Gi: default/chat-20g-")
    assert cell["note"].endswith(" 40Gi")


def test_share_count_mode_gives_n_claims_a_gpu_each_one_share() -> None:
    from kgpu.sim.report import gpu_shares, share_lines

    sim = _sim(draDriver={"consumableShares": 2})
    for name in "abc":
        claim, pod = _claim(name, "1Gi")
        del claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"]  # no amount: 1 share
        sim.apply(claim)
        sim.apply(pod)
    sim.settle()
    assert [sim.pods[f"default/{n}"].node for n in "abc"] == ["h100", "h100", ""]
    assert "cannot allocate all claims" in sim.pods["default/c"].last_message
    lines = share_lines(gpu_shares(sim._ctx)["h100"])
    assert lines == [
        "GPU 0 shares: 2/2 shares, 2 claim(s)",
        "  default/a: 1 share(s)",
        "  default/b: 1 share(s)",
    ]


def test_the_handler_finds_a_shares_pods_in_the_simulated_api_server() -> None:
    from kgpu.sim.dra_node import DraKubeletPlugin

    sim = _sim()
    for obj in _claim("a", "20Gi"):
        sim.apply(obj)
    sim.settle()
    plugin = next(p for p in sim.kubelet_plugins if isinstance(p, DraKubeletPlugin))
    handler = plugin.handlers["h100"]
    assert handler.shares.enabled
    assert handler.pod_lookup is not None
    pod = handler.pod_lookup("default", "a")
    assert pod is not None and pod["spec"]["securityContext"]["runAsUser"] == 1001
    assert handler.pod_lookup("default", "nobody") is None
