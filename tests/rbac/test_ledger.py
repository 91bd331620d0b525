"""The session ledger: every stand-in reports to it, one tally per request shape with the
names it named, nothing after it closes; a test marked ``rbac_exempt`` is left out of the
session's."""

from __future__ import annotations

import pytest

from kgpu.testing.apiserver import FakeApiServer
from kgpu.testing.apiserver.ledger import MAX_NAMES, Tally, Use, close_ledger, open_ledger

AGENT = {"user-agent": "kgpu-agent/0.1.0"}


@pytest.mark.rbac_exempt("sends requests under the agent's name by hand")
def test_every_stand_in_reports_each_request_shape_once(request: pytest.FixtureRequest) -> None:
    plugin = request.config.pluginmanager.get_plugin("kgpu-rbac")
    assert plugin is not None
    session = plugin.ledger
    left_out = session.exempted
    ledger = open_ledger()
    one, two = FakeApiServer(), FakeApiServer(release="1.32")
    try:
        for server in (one, two):
            server.handle("GET", "/api/v1/nodes?fieldSelector=metadata.name%3Dtray-0", b"", AGENT)
        one.handle("GET", "/api/v1/nodes", b"", AGENT)
        one.handle("GET", "/version", b"", {"user-agent": "test-admin"})
    finally:
        close_ledger(ledger)
    one.handle("GET", "/api/v1/nodes", b"", AGENT)  # closed: not counted
    assert ledger.uses() == {
        Use("kgpu-agent", "list", "", "nodes"): Tally(
            3, "kgpu-agent/0.1.0", "/api/v1/nodes", "", frozenset({"tray-0", ""})
        ),
        Use("test-admin", "get", url="/version"): Tally(
            1, "test-admin", "/version", "", frozenset({""})
        ),
    }
    assert ledger.requests == 4
    # the session's ledger saw them, and left them out as the mark says
    assert session.exempted - left_out == 5
    assert session.exempt == "sends requests under the agent's name by hand"


@pytest.mark.rbac_exempt("sends requests under the agent's name by hand")
def test_a_shape_seen_with_more_names_than_kept_has_many() -> None:
    ledger = open_ledger()
    server = FakeApiServer()
    try:
        for i in range(MAX_NAMES + 1):
            server.handle("GET", f"/api/v1/nodes/n{i}", b"", AGENT)
    finally:
        close_ledger(ledger)
    (tally,) = ledger.uses().values()
    assert tally.count == MAX_NAMES + 1 and tally.names is None
