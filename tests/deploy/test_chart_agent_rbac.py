"""The agent's rendered ClusterRole and Role grant exactly the rules docs/cluster.md lists for
``kgpu agent``, the rules tests/cluster/test_rbac.py records from the running agent: nothing it
needs is missing (a 403 on a real cluster), nothing it never uses is granted. Values that turn
a part off (DRA, GFD labels, the MIG manager) take that part's rules away."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import Rendered

Render = Callable[[str, str], Rendered]
DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"


def documented_agent_rules() -> set[tuple[str, str, str]]:
    text = DOC.read_text()
    table = text.split("<!-- rbac:agent -->")[1].split("<!-- /rbac:agent -->")[0]
    rules = set()
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        group = cells[0].strip("`").strip('"')
        for verb in re.findall(r"`(\w+)`", cells[2]):
            rules.add((group, cells[1].strip("`"), verb))
    return rules


def granted(rendered: Rendered) -> set[tuple[str, str, str]]:
    roles: list[dict[str, Any]] = [
        r
        for r in rendered.of_kind("ClusterRole") + rendered.of_kind("Role")
        if r["metadata"]["labels"]["app.kubernetes.io/component"] == "agent"
    ]
    return {
        (group, resource, verb)
        for role in roles
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize("version", ["1.32", "1.35"])
def test_everything_on_grants_exactly_the_documented_rules(render: Render, version: str) -> None:
    # everything-else turns the MIG manager on but DRA and GFD off; default has those on
    rules = granted(render(version, "default")) | granted(render(version, "everything-else"))
    assert rules == documented_agent_rules()


def test_parts_turned_off_take_their_rules_away(render: Render) -> None:
    default = granted(render("1.34", "default"))
    assert ("", "events", "create") not in default  # the MIG manager is off by default
    assert ("nfd.k8s-sigs.io", "nodefeatures", "patch") in default
    off = granted(render("1.34", "everything-else"))  # dra.enabled=false, gfd.enabled=false
    assert not {r for r in off if r[0] in ("resource.k8s.io", "resource.nvidia.com")}
    assert not {r for r in off if r[1] == "nodefeatures"}
    assert ("", "events", "create") in off
    assert {("", "nodes", v) for v in ("list", "watch", "patch")} <= off
