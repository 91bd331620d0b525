"""The sharing modes as users meet them: each mode's rules hold wherever a config is read
(``kgpu validate``, ``kgpu plan``, the node view), and the registry is what the view, the
allocator and the DRA driver consult."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kgpu.cli import app
from kgpu.config import load_config_files, load_config_strings
from kgpu.errors import FieldError
from kgpu.hardware.profiles import load_machine
from kgpu.node.sharing import CONFIGURED_MODES, DRA_MODES, MODES, Sharing, mode_of
from kgpu.node.view import build_node_view

runner = CliRunner()

MPS_MIXED = """\
version: v1
flags: {migStrategy: mixed}
sharing: {mps: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}
"""


def test_every_mode_is_registered_once_under_its_name() -> None:
    assert {m.name for m in MODES} == {str(s) for s in Sharing}
    assert all(mode_of(s).name == s for s in Sharing)
    # MPS wins a device both modes select, as upstream runs MPS alone
    assert [m.name for m in CONFIGURED_MODES] == ["mps", "time-slicing"]
    assert list(DRA_MODES) == ["TimeSlicing", "MPS"]


def test_mps_with_mig_strategy_mixed_fails_validate_and_plan(tmp_path: Path) -> None:
    path = tmp_path / "mps-mixed.yaml"
    path.write_text(MPS_MIXED)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert f"{path}: document 0: flags.migStrategy: MPS sharing is not supported" in result.output
    with pytest.raises(FieldError, match=r"flags\.migStrategy: MPS sharing is not supported"):
        build_node_view(load_machine("t4"), load_config_files([path]), {})


def test_a_bad_entry_fails_every_node_not_only_those_selecting_it() -> None:
    configs = load_config_strings(
        {
            "cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n"
            "  good: 'version: v1'\n"
            "  bad: |\n" + "".join(f"    {line}\n" for line in MPS_MIXED.splitlines())
        }
    )
    with pytest.raises(FieldError, match=r"cm\.yaml: bad: flags\.migStrategy"):
        build_node_view(load_machine("t4"), configs, {}, config_name="good")


@pytest.mark.parametrize(
    ("fail", "expected"), [("", True), ("failRequestsGreaterThanOne: false,", False)]
)
def test_mps_refuses_multi_replica_requests_unless_the_config_turns_it_off(
    fail: str, expected: bool
) -> None:
    configs = load_config_strings(
        {"c.yaml": f"sharing: {{mps: {{{fail} resources: [{{name: gpu, replicas: 2}}]}}}}"}
    )
    view = build_node_view(load_machine("t4"), configs, {})
    assert view.resource("nvidia.com/gpu").fail_requests_greater_than_one is expected


def test_time_slicing_follows_the_config_flag() -> None:
    configs = load_config_strings(
        {"c.yaml": "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}"}
    )
    view = build_node_view(load_machine("t4"), configs, {})
    assert view.resource("nvidia.com/gpu").fail_requests_greater_than_one is False
