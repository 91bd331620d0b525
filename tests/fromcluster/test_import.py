"""``kgpu sim --from-cluster`` against the API-server stand-in, in every supported release: the
import changes nothing that is running (every bound pod stays on its node, the GPU amounts the
simulated nodes advertise and hold equal what the API server reports), the Pending pods get
the FailedScheduling message kube-scheduler wrote for them, ``--save`` writes a scenario that
``kgpu sim`` and ``kgpu validate`` take and that runs the same, and the import only lists."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.testing.apiserver import RELEASES

from .cluster import event_for, recorded, serve

runner = CliRunner()
DATA = Path(__file__).resolve().parents[1] / "data" / "fromcluster"


def _sim(*args: str) -> tuple[int, Any, str]:
    result = runner.invoke(app, ["sim", *args, "-o", "json"])
    data = json.loads(result.stdout) if result.exit_code == 0 else None
    return result.exit_code, data, result.stderr


def _real_state() -> tuple[dict[str, str], dict[str, int]]:
    """Where each running pod is, and what each node holds of nvidia.com/gpu, as the API
    server has it."""
    objects, _ = recorded()
    placed: dict[str, str] = {}
    held: dict[str, int] = {}
    for obj in objects:
        if obj["kind"] != "Pod" or obj.get("status", {}).get("phase") != "Running":
            continue
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        node = obj["spec"]["nodeName"]
        placed[key] = node
        for c in obj["spec"]["containers"]:
            gpus = int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
            held[node] = held.get(node, 0) + gpus
    return placed, held


@pytest.mark.parametrize("release", list(RELEASES))
def test_import_changes_nothing_and_pending_pods_get_their_events(
    tmp_path: Path, release: str
) -> None:
    with serve(tmp_path, release) as (server, kubeconfig):
        code, report, err = _sim("--from-cluster", "--kubeconfig", str(kubeconfig))
        rules = server.rules()
    assert code == 0, err
    pods = {f"{p['namespace']}/{p['name']}": p for p in report["pods"]}
    placed, held = _real_state()
    for key, node in placed.items():
        assert pods[key]["phase"] == "Running" and pods[key]["nodeName"] == node, key
    assert "ml/done-0" not in pods  # finished: holds nothing, not imported
    nodes = {n["name"]: n for n in report["nodes"]}
    objects, events = recorded()
    for obj in objects:
        if obj["kind"] == "Node":
            name = obj["metadata"]["name"]
            real = obj["status"]["allocatable"].get("nvidia.com/gpu")
            assert nodes[name]["allocatable"].get("nvidia.com/gpu") == real, name
            used = int(nodes[name]["allocated"].get("nvidia.com/gpu", 0))
            assert used == held.get(name, 0), name
    # no node advertises other amounts than the API server (1.32/1.33 are modelled but outside
    # the supported window, which the simulator says once)
    assert [w for w in report["warnings"] if "supported window" not in w] == []
    messages = {
        e["object"].removeprefix("Pod/"): e["message"]
        for e in report["events"]
        if e["reason"] == "FailedScheduling"
    }
    for pod in events:
        assert pods[pod]["phase"] == "Pending"
        assert messages[pod] == event_for(events, pod, release), pod
    # list-only: no get, watch or write by the import
    mine = {r for r in rules if r[2] != "create" and not r[1].endswith("/status")}
    assert {verb for _, _, verb in mine} == {"list"}


def test_saved_scenario_loads_and_replays_the_same(tmp_path: Path) -> None:
    saved = tmp_path / "cluster.yaml"
    with serve(tmp_path) as (_, kubeconfig):
        code, live, err = _sim(
            "--from-cluster", "--kubeconfig", str(kubeconfig), "--save", str(saved)
        )
    assert code == 0, err
    assert f"wrote {saved}" in err
    validated = runner.invoke(app, ["validate", str(saved)])
    assert validated.exit_code == 0, validated.output
    code, replay, err = _sim(str(saved))
    assert code == 0, err

    def placements(report: Any) -> dict[str, Any]:
        return {
            f"{p['namespace']}/{p['name']}": (p["phase"], p["nodeName"]) for p in report["pods"]
        }

    assert placements(replay) == placements(live)


def test_anonymized_save_keeps_the_cluster_and_drops_the_names(tmp_path: Path) -> None:
    saved = tmp_path / "anon.yaml"
    with serve(tmp_path) as (_, kubeconfig):
        code, live, err = _sim(
            "--from-cluster", "--kubeconfig", str(kubeconfig), "--save", str(saved), "--anonymize"
        )
    assert code == 0, err
    text = saved.read_text()
    for secret in ("gpu-a", "train-0", "registry.example.com", "ml", "6f1c1d2e"):
        assert secret not in text.replace("nvidia.com/gpu", ""), secret
    code, replay, err = _sim(str(saved))
    assert code == 0, err
    # the same shape: as many pods running and pending, the same GPUs held per node
    phases = sorted(p["phase"] for p in replay["pods"])
    assert phases == sorted(p["phase"] for p in live["pods"])
    held = sorted(str(n["allocated"].get("nvidia.com/gpu", 0)) for n in replay["nodes"])
    assert held == sorted(str(n["allocated"].get("nvidia.com/gpu", 0)) for n in live["nodes"])


def test_steps_file_on_top_answers_what_if(tmp_path: Path) -> None:
    """A scenario file beside --from-cluster adds its steps: relabel gpu-b with the 4-way
    time-slicing entry and the Pending pod runs there."""
    steps = tmp_path / "what-if.yaml"
    steps.write_text(
        "steps:\n- label: {node: gpu-b, labels: {nvidia.com/device-plugin.config: t4-x4}}\n"
    )
    with serve(tmp_path) as (_, kubeconfig):
        code, report, err = _sim("--from-cluster", "--kubeconfig", str(kubeconfig), str(steps))
    assert code == 0, err
    pods = {f"{p['namespace']}/{p['name']}": p for p in report["pods"]}
    assert pods["ml/train-2"]["nodeName"] == "gpu-b"
    assert pods["ml/a100-job"]["phase"] == "Pending"


def test_namespace_limits_the_pods(tmp_path: Path) -> None:
    with serve(tmp_path) as (_, kubeconfig):
        code, report, err = _sim(
            "--from-cluster", "--kubeconfig", str(kubeconfig), "--namespace", "web"
        )
    assert code == 0, err
    assert [f"{p['namespace']}/{p['name']}" for p in report["pods"]] == ["web/web-0"]
    assert len(report["nodes"]) == 3


@pytest.mark.parametrize("release", list(RELEASES))
def test_dra_claims_stay_allocated_and_pending_claims_get_the_allocators_message(
    tmp_path: Path, release: str
) -> None:
    """A DRA-only node: its GPU found from its ResourceSlice (no GFD label), the running pod
    keeps the claim and device it holds, the Pending one gets kube-scheduler's message."""
    data = yaml.safe_load((DATA / "dra-cluster.yaml").read_text())
    with serve(tmp_path, release, data["objects"]) as (_, kubeconfig):
        code, report, err = _sim("--from-cluster", "--kubeconfig", str(kubeconfig))
    assert code == 0, err
    pods = {p["name"]: p for p in report["pods"]}
    assert (pods["pair"]["phase"], pods["pair"]["nodeName"]) == ("Running", "dra-0")
    claims = {c["metadata"]["name"]: c for c in report["resourceClaims"]}
    results = claims["pair-gpu-x7k2p"]["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in results] == [("dra-0", "gpu-0")]
    messages = [e["message"] for e in report["events"] if e["object"] == "Pod/ml/pair-2"]
    assert messages == [data["events"]["ml/pair-2"]["*"]]
    assert report["unsupported"] == []
    assert [w for w in report["warnings"] if "supported window" not in w] == []
