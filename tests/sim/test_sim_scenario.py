"""Scenario files: relative paths, validation before anything runs, steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kgpu.errors import FieldError
from kgpu.sim.scenario import load_scenario
from kgpu.sim.simulation import Simulation


def write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    text = (
        data
        if isinstance(data, str)
        else yaml.safe_dump_all(data)
        if isinstance(data, list)
        else yaml.safe_dump(data)
    )
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(FieldError) as err:
        load_scenario(path)
    return [str(p) for p in err.value.problems]


def test_relative_paths_resolve_against_scenario_folder(tmp_path: Path, acceptance: Path) -> None:
    sub = tmp_path / "cluster"
    sub.mkdir()
    (sub / "pod.yaml").write_text(
        (acceptance / "seed-guides/gpu-operator-test-pod.yaml").read_text()
    )
    path = write(sub, "s.yaml", {"nodes": [{"name": "g", "machine": "t4"}], "apply": ["pod.yaml"]})
    sim = Simulation(load_scenario(path), plugins=False).run()
    assert sim.pods["default/gpu-operator-test"].phase == "Running"


def test_malformed_manifest_names_file_document_and_field(tmp_path: Path) -> None:
    good = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "replicas": "two",
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {
                    "containers": [
                        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "lots"}}}
                    ]
                },
            },
        },
    }
    write(tmp_path, "objs.yaml", [good, bad])
    path = write(tmp_path, "s.yaml", {"nodes": [], "apply": ["objs.yaml"]})
    found = problems(path)
    assert "objs.yaml: document 1: spec.replicas: 'two': must be a non-negative integer" in found
    assert any(
        p.startswith(
            "objs.yaml: document 1: "
            "spec.template.spec.containers[0].resources.limits.nvidia.com/gpu"
        )
        for p in found
    )


def test_scenario_fields_checked(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "s.yaml",
        {
            "nodes": [
                {"name": "a", "machine": "no-such-gpu", "colour": "red"},
                {"name": "b", "taints": [{"key": "k", "effect": "Sometimes"}]},
                {"name": "c", "machine": "t4", "clique": "7bd2ae60-8d26-4a5a-b5a0-2b1d4ec1f0c5.1"},
            ],
            "devicePlugin": "yes",
            "extra": 1,
            "steps": [{"label": {"node": "ghost", "labels": {"x": "y"}}}, {"fly": 1}],
        },
    )
    found = "\n".join(problems(path))
    assert "nodes[0].machine: unknown machine profile 'no-such-gpu'" in found
    assert "nodes[0].colour: unknown field 'colour'" in found
    assert "nodes[1].taints[0].effect: 'Sometimes'" in found
    assert "nodes[2].clique: machine profile 't4'" in found
    assert "devicePlugin: must be true or false" in found
    assert "extra: unknown field 'extra'" in found
    assert "steps[0].label.node: 'ghost': no such node" in found
    assert "steps[1]: unknown action 'fly'" in found


def test_bad_config_rejected_before_running(tmp_path: Path) -> None:
    write(
        tmp_path,
        "cfg.yaml",
        {
            "version": "v1",
            "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": -3}]}},
        },
    )
    path = write(tmp_path, "s.yaml", {"nodes": [], "configs": ["cfg.yaml"]})
    assert any("cfg.yaml" in p and "replicas" in p for p in problems(path))


def test_unknown_kinds_are_reported_not_skipped(tmp_path: Path, acceptance: Path) -> None:
    path = write(
        tmp_path,
        "s.yaml",
        {
            "nodes": [],
            "apply": [
                str(acceptance / "vks-samples/scale-gpu.yaml"),
                {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
            ],
        },
    )
    sim = Simulation(load_scenario(path), plugins=False).run()
    assert sim.unsupported == ["Widget w (example.com/v1)"]
    assert any(e.reason == "Unsupported" and e.type == "Warning" for e in sim.events)
    # pass-through kinds are stored, unchanged
    assert (
        sim.store.get("keda.sh/v1alpha1", "ScaledObject", "scaled-object")["spec"][
            "maxReplicaCount"
        ]
        == 3
    )


def test_steps_change_the_cluster(tmp_path: Path, acceptance: Path) -> None:
    path = write(
        tmp_path,
        "s.yaml",
        {
            "nodes": [{"name": "g", "machine": "rtx-2080ti"}],
            "configs": [str(acceptance / "vks-samples/multiple-gpu-sharing.yaml")],
            "defaultConfig": "rtx-2080ti",
            "apply": [str(acceptance / "vks-samples/time-slicing-verification.yaml")],
            "steps": [
                {
                    "name": "MPS x8",
                    "label": {
                        "node": "g",
                        "labels": {"nvidia.com/device-plugin.config": "rtx-4090"},
                    },
                },
                {"scale": {"name": "time-slicing-verification", "replicas": 2}},
                {"cordon": "g"},
                {"delete": [str(acceptance / "vks-samples/time-slicing-verification.yaml")]},
            ],
        },
    )
    sim = Simulation(load_scenario(path), plugins=False, record_steps=True)
    sim.start()
    assert sum(r.phase == "Running" for r in sim.pods.values()) == 4
    sim.step(sim.scenario.steps[0])
    assert sim.node("g").capacity["nvidia.com/gpu"] == 8
    assert sum(r.phase == "Running" for r in sim.pods.values()) == 5
    sim.step(sim.scenario.steps[1])
    assert len(sim.pods) == 2
    sim.step(sim.scenario.steps[2])
    assert sim.node("g").obj["spec"]["unschedulable"] is True
    sim.step(sim.scenario.steps[3])
    assert sim.pods == {} and sim.node("g").requested.get("nvidia.com/gpu", 0) == 0
    assert [s["title"] for s in sim.snapshots][:2] == ["initial state", "MPS x8"]


def test_manual_steps_do_not_skip_scenario_steps(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "s.yaml",
        {
            "nodes": [{"name": "g", "machine": "t4"}],
            "steps": [{"cordon": "g"}],
        },
    )
    sim = Simulation(load_scenario(path), plugins=False)
    sim.step({"label": {"node": "g", "labels": {"team": "a"}}})
    sim.run()
    node = sim.node("g")
    assert node.labels["team"] == "a" and node.unschedulable


def _internal_ips(sim: Simulation) -> dict[str, str]:
    return {
        n["metadata"]["name"]: next(
            a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP"
        )
        for n in sim.store.list("v1", "Node")
    }


def test_node_addresses_survive_node_deletion(tmp_path: Path) -> None:
    """A node keeps the InternalIP it joined with; a deleted node's address is not handed to
    another node, nor to one added later (IMEX peers are listed by address)."""
    path = write(
        tmp_path,
        "s.yaml",
        {
            "nodes": [{"name": "rack-a", "count": 4, "machine": "t4"}],
            "steps": [
                {"deleteNode": "rack-a-1"},
                {"addNodes": [{"name": "late", "count": 2, "machine": "t4"}]},
                {"deleteNode": "late-0"},
                {"addNodes": [{"name": "late-0", "machine": "t4"}]},
            ],
        },
    )
    sim = Simulation(load_scenario(path), plugins=False)
    sim.start()
    before = _internal_ips(sim)
    assert len(set(before.values())) == 4
    seen = set(before.values())
    sim.step(sim.scenario.steps[0])
    after = _internal_ips(sim)
    assert after == {n: ip for n, ip in before.items() if n != "rack-a-1"}
    for step in sim.scenario.steps[1:]:
        sim.step(step)
        now = _internal_ips(sim)
        assert len(set(now.values())) == len(now)
        assert all(now[n] == after[n] for n in after if n in now)
        seen |= set(now.values())
    # 4 + 2 + 1 nodes joined: each got its own address, none reused
    assert len(seen) == 7
    assert _internal_ips(sim)["late-0"] not in after.values()


def test_malformed_compute_domain_rejected_before_running(tmp_path: Path) -> None:
    """A ComputeDomain typo stops the scenario at load time, like other kinds, instead of an
    InvalidSpec warning once the controller meets it."""
    good = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "ok"},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "ok-ch"}}},
    }
    bad = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "train"},
        "spec": {
            "numNode": 4,
            "channel": {"resourceClaimTemplate": {"name": "Train_Channel"}, "allocationMode": "X"},
        },
    }
    write(tmp_path, "cd.yaml", [good, bad])
    path = write(tmp_path, "s.yaml", {"nodes": [], "apply": ["cd.yaml"]})
    found = problems(path)
    assert any(p.startswith("cd.yaml: document 1: spec.numNode: unknown field") for p in found)
    assert any(
        p.startswith("cd.yaml: document 1: spec.channel.resourceClaimTemplate.name: ")
        and "'Train_Channel'" in p
        for p in found
    )
    assert any(
        p.startswith("cd.yaml: document 1: spec.channel.allocationMode: must be one of")
        for p in found
    )
    assert not any("document 0" in p for p in found)
    # inline objects of a step are checked the same way, before the first step runs
    steps = write(tmp_path, "t.yaml", {"nodes": [], "steps": [{"apply": [bad]}]})
    assert any("spec.numNode: unknown field" in p for p in problems(steps))


def test_sim_and_validate_number_documents_alike(tmp_path: Path) -> None:
    """An empty document between two others does not make ``kgpu sim`` and ``kgpu validate``
    disagree about which document is wrong."""
    from typer.testing import CliRunner

    from kgpu.cli import app

    objs = tmp_path / "objs.yaml"
    objs.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"
        "---\n"
        "---\n"
        "apiVersion: resource.nvidia.com/v1beta1\nkind: ComputeDomain\nmetadata: {name: cd}\n"
        "spec: {numNodes: 2, channel: {resourceClaimTemplate: {name: c}, allocationMode: X}}\n"
    )
    path = write(tmp_path, "s.yaml", {"nodes": [], "apply": ["objs.yaml"]})
    (found,) = problems(path)
    assert found.startswith("objs.yaml: document 1: spec.channel.allocationMode:")
    validated = CliRunner().invoke(app, ["validate", str(objs)])
    assert validated.exit_code == 1
    assert f"{objs}: document 1: spec.channel.allocationMode:" in validated.output
