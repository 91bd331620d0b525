"""The RBAC rules docs/cluster.md lists per process, as (apiGroup, resource, verb) triples.

Each process's table sits between ``<!-- rbac:<name> -->`` and ``<!-- /rbac:<name> -->``; one
row is ``| `group` | `resource` | `verb`, `verb` |`` (the core group written ``""``). The same
table is checked against the requests a running process makes (tests/cluster/test_rbac.py) and
against the roles the chart renders (tests/deploy/test_chart_*): one parser serves both.
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "cluster.md"

Rule = tuple[str, str, str]


def documented(name: str) -> set[Rule]:
    """The rules docs/cluster.md's ``rbac:<name>`` table lists (``agent``, ``controller``)."""
    text = DOC.read_text()
    table = text.split(f"<!-- rbac:{name} -->")[1].split(f"<!-- /rbac:{name} -->")[0]
    rules = set()
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        group = cells[0].strip("`").strip('"')
        for verb in re.findall(r"`(\w+)`", cells[2]):
            rules.add((group, cells[1].strip("`"), verb))
    return rules
