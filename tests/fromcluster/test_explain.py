"""``kgpu explain pod``: the verdict per node in kube-scheduler's words, the allocator's
reasons per claim, and suggestions that are each proven by a re-run (a suggestion that would
not let the pod run, or would move another pod, is never given)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.sim.explain import explain_pod
from kgpu.sim.scenario import load_scenario

from .cluster import serve

DATA = Path(__file__).resolve().parents[1] / "data" / "fromcluster"
runner = CliRunner()


def _explain(*args: str) -> tuple[int, Any, str]:
    result = runner.invoke(app, ["explain", "pod", *args, "-o", "json"])
    data = json.loads(result.stdout) if result.exit_code == 0 else None
    return result.exit_code, data, result.stderr


def test_pending_pod_on_the_cluster_gets_node_verdicts_and_a_verified_config_change(
    tmp_path: Path,
) -> None:
    with serve(tmp_path) as (_, kubeconfig):
        code, found, err = _explain("ml/train-2", "--from-cluster", "--kubeconfig", str(kubeconfig))
    assert code == 0, err
    assert found["phase"] == "Pending"
    assert found["message"].startswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    verdicts = {n["name"]: n["verdict"] for n in found["nodes"]}
    assert verdicts == {n: "Insufficient nvidia.com/gpu" for n in ("cpu-0", "gpu-a", "gpu-b")}
    advertised = {n["name"]: n["allocatable"] for n in found["nodes"]}
    assert advertised["gpu-a"] == {"nvidia.com/gpu": 4}
    assert {n["name"]: n.get("deviceConfig") for n in found["nodes"]}["gpu-a"] == "t4-x4"
    first = found["suggestions"][0]
    assert first["change"] == "label node gpu-b nvidia.com/device-plugin.config=t4-x4"
    assert first["result"] == "ml/train-2 runs on gpu-b"
    assert first["steps"] == [
        {"label": {"node": "gpu-b", "labels": {"nvidia.com/device-plugin.config": "t4-x4"}}}
    ]


def test_suggested_steps_do_what_they_say(tmp_path: Path) -> None:
    """Each suggestion's steps, laid on the scenario by hand, let the pod run."""
    scenario = DATA / "explain-time-slicing.yaml"
    found = explain_pod(load_scenario(scenario), "default/b")
    assert found.suggestions, found
    steps = tmp_path / "steps.yaml"
    text = scenario.read_text() + "steps: " + json.dumps(found.suggestions[0].steps) + "\n"
    steps.write_text(text)
    result = runner.invoke(app, ["sim", str(steps), "-o", "json"])
    assert result.exit_code == 0, result.output
    pods = {p["name"]: p for p in json.loads(result.stdout)["pods"]}
    assert pods["b"]["phase"] == "Running" and pods["a"]["phase"] == "Running"


def test_more_time_slicing_replicas() -> None:
    found = explain_pod(load_scenario(DATA / "explain-time-slicing.yaml"), "default/b")
    changes = [s.change for s in found.suggestions]
    assert changes[0].startswith("time-slicing with 2 replicas on node t4")
    assert found.suggestions[0].result == "default/b runs on t4"


def test_mig_layout_label() -> None:
    found = explain_pod(load_scenario(DATA / "explain-mig.yaml"), "default/small")
    assert found.nodes[0]["verdict"] == "Insufficient nvidia.com/mig-1g.10gb"
    changes = [s.change for s in found.suggestions]
    assert "label node a100 nvidia.com/mig.config=all-1g.10gb" in changes


def test_node_of_the_product_the_selector_names(tmp_path: Path) -> None:
    with serve(tmp_path) as (_, kubeconfig):
        code, found, err = _explain(
            "ml/a100-job", "--from-cluster", "--kubeconfig", str(kubeconfig)
        )
    assert code == 0, err
    verdicts = {n["name"]: n["verdict"] for n in found["nodes"]}
    assert verdicts["gpu-b"] == "node(s) had untolerated taint {nvidia.com/gpu: true}"
    assert verdicts["gpu-a"] == "node(s) didn't match Pod's node affinity/selector"
    assert [s["change"] for s in found["suggestions"]] == [
        "add a node of machine a100-80gb (GPU product NVIDIA-A100-SXM4-80GB)"
    ]


def test_claims_get_the_allocators_reasons_and_no_unproven_suggestion() -> None:
    found = explain_pod(load_scenario(DATA / "explain-dra.yaml"), "default/pair")
    assert found.nodes[0]["verdict"] == "cannot allocate all claims"
    why = found.claims[0]["nodes"]["t4"]
    assert "wants 2 devices of class gpu.nvidia.com; 1 on t4 match" in why
    assert found.suggestions == []  # another 1-GPU node would not help, and was not offered
    assert found.tried >= 1


def test_running_pod_and_unknown_pod() -> None:
    found = explain_pod(load_scenario(DATA / "explain-time-slicing.yaml"), "default/a")
    assert (found.phase, found.node, found.suggestions) == ("Running", "t4", [])
    code, _, err = _explain("default/nope", str(DATA / "explain-time-slicing.yaml"))
    assert code == 1
    assert "no pod default/nope in the cluster; its pods: default/a, default/b" in err
    assert "Traceback" not in err
