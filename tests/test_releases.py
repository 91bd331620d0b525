"""The one release table (kgpu.releases) and what reads it: the gates a release has, their
defaults and locks, the API versions it serves, and the supported window."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kgpu import releases
from kgpu.dra.features import DEFAULT, FeatureGateError, Features


@pytest.mark.parametrize(
    ("minor", "on"),
    [
        (33, False),  # the gate does not exist yet
        (34, False),  # alpha
        (35, False),  # alpha
        (36, True),  # beta
        (37, True),  # GA
    ],
)
def test_extended_resources_follow_the_release(minor: int, on: bool) -> None:
    assert Features.for_release(minor).extended_resource is on


def test_the_newest_release_is_the_default() -> None:
    assert releases.NEWEST == 37
    assert Features.for_release(releases.NEWEST) == DEFAULT
    assert all(DEFAULT.gates().values())


def test_gate_states_as_upstream_lists_them() -> None:
    gate = releases.GATES["DRAExtendedResource"]
    assert gate.at(33) is None
    assert gate.at(34) == releases.GateState(False, releases.ALPHA)
    assert gate.at(36) == releases.GateState(True, releases.BETA)
    assert gate.at(37) == releases.GateState(True, releases.GA, locked=True)
    # beta but off in 1.36: its API version (v1beta2) is off by default; GA and on in 1.37
    rules = releases.GATES["DRADeviceTaintRules"]
    assert rules.at(36) == releases.GateState(False, releases.BETA)
    assert rules.at(37) == releases.GateState(True, releases.GA)


def test_a_gate_the_release_lacks_is_refused_as_kube_scheduler_does() -> None:
    with pytest.raises(FeatureGateError, match=r"1\.33 has no such feature gate.*from 1\.34"):
        Features.for_release(33, "DRAExtendedResource=true")
    assert Features.for_release(35, "DRAExtendedResource=true").extended_resource


def test_a_locked_gate_cannot_be_turned_against_its_lock() -> None:
    with pytest.raises(FeatureGateError, match="locked to true"):
        Features.for_release(37, {"DRAExtendedResource": False})
    assert not Features.for_release(36, {"DRAExtendedResource": False}).extended_resource


def test_device_taint_rules_follow_device_taints_before_they_had_a_gate() -> None:
    assert not Features.for_release(34).device_taint_rules
    assert Features.for_release(34, "DRADeviceTaints=true").device_taint_rules
    with pytest.raises(FeatureGateError, match="DRADeviceTaintRules"):
        Features.for_release(34, "DRADeviceTaintRules=true")


def test_served_versions_and_services_per_release() -> None:
    assert releases.release(32).resource_versions == ("v1beta1",)
    assert releases.release(33).resource_versions == ("v1beta2", "v1beta1")
    for minor in releases.SUPPORTED:
        rel = releases.release(minor)
        assert rel.resource_versions[0] == "v1" and rel.resource_default == ("v1",)
        assert rel.kubelet_services == ("v1.DRAPlugin", "v1beta1.DRAPlugin")
        assert "v1alpha1.DRAResourceHealth" in rel.health_services
    assert releases.release(36).taint_rule_versions[0] == "v1beta2"
    assert releases.release(37).taint_rule_versions[0] == "v1"
    # the kubelet streams health by default from 1.36, and prefers v1 from 1.37
    assert releases.release(35).gate("ResourceHealthStatus") == releases.GateState(
        False, releases.ALPHA
    )
    assert releases.release(36).gate("ResourceHealthStatus") == releases.GateState(
        True, releases.BETA
    )
    assert releases.release(37).health_services[0] == "v1.DRAResourceHealth"


@pytest.mark.parametrize(
    ("text", "minor", "nearest"),
    [("v1.37.0", 37, 37), ("1.36", 36, 36), ("v1.33.4-eks-1", 33, 34), ("v1.39.0", 39, 37)],
)
def test_the_window_and_the_nearest_release(text: str, minor: int, nearest: int) -> None:
    assert releases.parse_minor(text) == minor
    assert releases.nearest(minor) == nearest
    problem = releases.support_problem(minor)
    if minor == nearest:
        assert problem is None
    else:
        assert problem is not None and "1.34-1.37" in problem and f"as for 1.{nearest}" in problem


def test_every_allocator_gate_is_in_the_table() -> None:
    from kgpu.dra.features import GATES

    assert set(GATES) <= set(releases.GATES)
    assert set(releases.RELEASES) == set(releases.MODELLED)
    assert set(releases.SUPPORTED) <= set(releases.MODELLED)


REPO = Path(__file__).resolve().parents[1]


def _gate_rows() -> list[str]:
    rows = []
    for name, gate in releases.GATES.items():
        cells = []
        for minor in releases.MODELLED:
            state = gate.at(minor)
            if state is None:
                cells.append("—")
                continue
            text = f"{'on' if state.default else 'off'} ({state.stage}"
            text += ", locked)" if state.locked else ")"
            cells.append(text + ("*" if minor > gate.read_to else ""))
        rows.append(f"| `{name}` | {gate.component} | " + " | ".join(cells) + " |")
    return rows


def test_the_docs_table_is_the_modules() -> None:
    text = (REPO / "docs" / "releases.md").read_text()
    block = text.split("<!-- gates-table")[1].split("<!-- /gates-table -->")[0]
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    assert rows == _gate_rows()


def test_the_window_is_stated_where_users_read_it() -> None:
    chart = yaml.safe_load((REPO / "deploy" / "helm" / "kgpu" / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">=1.{releases.SUPPORTED[0]}.0-0"
    readme = (REPO / "README.md").read_text()
    assert f"Kubernetes {releases.window()}" in readme.replace("–", "-")


def test_the_gpu_driver_says_what_the_servers_release_leaves_off() -> None:
    from kgpu.drivers.gpu import gate_notes

    notes = gate_notes("1.35", partitionable=True)
    assert notes == [
        "DRADeviceTaints is alpha and off by default in Kubernetes 1.35: an unhealthy GPU's taint "
        "keeps no new claim off it unless the gate is on for kube-apiserver and kube-scheduler",
        "DRAPartitionableDevices is alpha and off by default in Kubernetes 1.35: MIG placements' "
        "counters are dropped and not honoured unless the gate is on for kube-apiserver and "
        "kube-scheduler",
    ]
    assert len(gate_notes("v1.34.3", partitionable=False)) == 1
    assert gate_notes("v1.36.0", partitionable=True) == []
    assert gate_notes(None, partitionable=True) == gate_notes("not a version", True) == []
