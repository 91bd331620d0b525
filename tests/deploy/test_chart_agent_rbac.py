"""The agent's rendered ClusterRole and Role grant exactly the rules docs/cluster.md lists for
``kgpu agent``, the rules tests/cluster/test_rbac.py records from the running agent: nothing it
needs is missing (a 403 on a real cluster), nothing it never uses is granted. Values that turn
a part off (DRA, GFD labels, the MIG manager) take that part's rules away."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rbac.documented import documented

from .conftest import Rendered

Render = Callable[[str, str], Rendered]


@pytest.mark.parametrize("version", ["1.34", "1.37"])
def test_everything_on_grants_exactly_the_documented_rules(render: Render, version: str) -> None:
    # everything-else turns the MIG manager on but DRA and GFD off; default has those on
    on, off = render(version, "default"), render(version, "everything-else")
    shares = render(version, "memory-shares")  # consumableShares: memory
    rules = on.rules("agent") | off.rules("agent") | shares.rules("agent")
    assert rules == documented("agent")


def test_parts_turned_off_take_their_rules_away(render: Render) -> None:
    default = render("1.34", "default").rules("agent")
    assert ("", "events", "create") not in default  # the MIG manager is off by default
    assert ("nfd.k8s-sigs.io", "nodefeatures", "patch") in default
    off = render("1.34", "everything-else").rules("agent")  # dra.enabled=false, gfd.enabled=false
    assert not {r for r in off if r[0] in ("resource.k8s.io", "resource.nvidia.com")}
    assert not {r for r in off if r[1] == "nodefeatures"}
    assert ("", "events", "create") in off
    assert {("", "nodes", v) for v in ("list", "watch", "patch")} <= off


def test_memory_shares_alone_add_get_on_pods_and_their_events(render: Render) -> None:
    default = render("1.34", "default").rules("agent")
    assert not {r for r in default if r[1] == "pods"}  # consumableShares: disabled
    shares = render("1.34", "memory-shares").rules("agent")
    # each share's pods (their runAsUser picks its MPS server); its daemons' Warnings
    assert shares - default == {("", "pods", "get"), ("", "events", "create")}
