"""RBAC proven by the code: a pytest plugin that holds every request kgpu's processes made
against the API-server stand-in during the run against the chart's rendered roles.

While the session runs, a ledger (:mod:`kgpu.testing.apiserver.ledger`) collects every request
every stand-in served, each distinct (client, verb, group, resource, subresource, namespace)
once, with the test it was first seen in. At the end the chart is rendered with the real
``helm`` (once per values set in :data:`VALUE_SETS`), the ServiceAccount each process's
workload runs as is looked up, and every shape a process asked for must be allowed by the rules
bound to that account (:mod:`.grants`: a Role or RoleBinding only in its namespace). The run
fails, naming each shape, the test and the path, when one is not; grants no request used are
reported, and do not fail (a grant may serve a path the tests do not take).

Who is who comes from the ``User-Agent``: ``kgpu-agent/<version>`` is the agent,
``kgpu-controller/<identity>`` the controller, ``kgpu-sim/<version>`` ``kgpu sim --from-cluster``
(held to the chart's read-only ClusterRole itself: people run it, not a workload)
(:data:`PROCESSES`); any other ``kgpu``-named
client (``kgpu/<version>`` is what a :class:`~kgpu.cluster.kube.KubeStore` sends when its
process did not name itself) fails the run, since no ServiceAccount can be checked for it;
every other client is test code (fixtures creating objects, ``test-admin``) and is counted
only. A test that sends requests under a process's name by hand (the stand-in's own tests) is
marked ``@pytest.mark.rbac_exempt("why")`` and left out.

A partial run (``pytest tests/dra``) checks what it recorded and says how many requests that
was; with nothing from a process recorded it renders nothing. Without helm (no npm, not
linux-amd64) the check is skipped with the reason, and fails under ``CI=true``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kgpu.testing.apiserver.ledger import Ledger, Tally, Use, close_ledger, open_ledger

from .grants import (
    Atom,
    Grant,
    account_grants,
    atom_covers,
    discovery_allows,
    role_grants,
    workload_account,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MARK = "rbac_exempt"


@dataclass(frozen=True)
class Process:
    """A kgpu process as the chart runs it: its name and the workload whose ServiceAccount
    it runs as."""

    name: str
    kind: str
    component: str


#: User-agent product token -> the process (docs/cluster.md, Permissions).
PROCESSES = {
    "kgpu-agent": Process("agent", "DaemonSet", "agent"),
    "kgpu-controller": Process("controller", "Deployment", "controller"),
    # kgpu sim --from-cluster / kgpu explain: run by a person, held against the read-only
    # ClusterRole itself (whoever it is bound to gets its rules cluster-wide)
    "kgpu-sim": Process("simulator import", "ClusterRole", "from-cluster"),
}
#: Values sets the roles are rendered with: every switchable part on, with the chart's own
#: names and with every name changed (a binding that misses a renamed account shows).
VALUE_SETS: dict[str, tuple[Path, ...]] = {
    "every-part": (HERE / "values" / "every-part.yaml",),
    "every-part-renamed": (
        REPO / "tests" / "deploy" / "values" / "everything-else.yaml",
        HERE / "values" / "every-part.yaml",
    ),
}

Obj = dict[str, Any]
Render = Callable[[tuple[Path, ...]], list[Obj]]


def is_kgpu(client: str) -> bool:
    return client == "kgpu" or client.startswith("kgpu-")


def _where(use: Use) -> str:
    if not use.resource:
        return ""
    return f" in namespace {use.namespace}" if use.namespace else " cluster-wide"


def _seen(use: Use, tally: Tally) -> str:
    test = tally.context or "outside any test"
    return (
        f"{_requests(tally.count)}, first in {test} ({tally.user_agent}: {use.verb} {tally.path})"
    )


@dataclass
class Outcome:
    """What the check found: ``failures`` fail the run, ``notes`` and ``unused`` inform."""

    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    skipped: str = ""
    checked: int = 0  # requests held against the chart's roles


def _unattributed(strays: Mapping[Use, Tally]) -> list[str]:
    """One failure per user agent that names kgpu but no process: what it asked, and where."""
    by_agent: dict[str, list[tuple[Use, Tally]]] = {}
    for use, tally in sorted(strays.items()):
        by_agent.setdefault(tally.user_agent, []).append((use, tally))
    out = []
    for agent, seen in sorted(by_agent.items()):
        tests = sorted({t.context or "outside any test" for _, t in seen})
        shapes = "; ".join(f"{u.rule}{_where(u)}" for u, _ in seen[:5])
        more = f" and {len(seen) - 5} more" if len(seen) > 5 else ""
        out.append(
            f"UNATTRIBUTED  {_requests(sum(t.count for _, t in seen))} by user agent {agent!r}, "
            f"which names no process of the chart ({shapes}{more}), in {', '.join(tests[:5])}"
            f"{' ...' if len(tests) > 5 else ''}. A kgpu process names itself with "
            f"KubeStore(user_agent=...) ({', '.join(p + '/<version>' for p in PROCESSES)}); "
            "test code with a user agent not starting with 'kgpu'"
        )
    return out


def check(
    uses: Mapping[Use, Tally],
    render: Render | None,
    helm_problem: str = "",
    ci: bool = False,
) -> Outcome:
    """Check the recorded ``uses`` against the roles ``render`` gives for each values set
    (``render`` None: helm is unavailable, ``helm_problem`` says why)."""
    out = Outcome()
    mine = {u: t for u, t in uses.items() if u.client in PROCESSES}
    strays = {u: t for u, t in uses.items() if is_kgpu(u.client) and u.client not in PROCESSES}
    by_tests = sum(t.count for u, t in uses.items() if not is_kgpu(u.client))
    out.failures.extend(_unattributed(strays))
    counts = {
        p.name: sum(t.count for u, t in mine.items() if PROCESSES[u.client] == p)
        for p in PROCESSES.values()
    }
    total = sum(counts.values())
    summary = ", ".join(f"{n} by the {p}" for p, n in counts.items())
    if not mine:
        out.notes.append(
            f"no request by a kgpu process was recorded ({by_tests} by test code): nothing to check"
        )
        return out
    if render is None:
        reason = f"helm is not available ({helm_problem})"
        if ci:
            out.failures.append(f"{reason} and CI=true: the chart's RBAC must be checked in CI")
        else:
            out.skipped = f"{reason}: {_requests(total)} ({summary}) not checked"
        return out

    unused: dict[str, list[str]] = {}  # report line -> the values sets it is unused in
    denied: dict[Use, list[str]] = {}  # shape -> "account (values 'x')" that lack it
    hints: dict[Use, str] = {}
    for values, files in VALUE_SETS.items():
        try:
            objects = render(files)
        except RuntimeError as exc:
            out.failures.append(f"NO RENDER  values '{values}': {exc}")
            continue
        for client, process in PROCESSES.items():
            shapes = {u: t for u, t in mine.items() if u.client == client}
            if process.kind == "ClusterRole":
                found = role_grants(objects, process.component)
                account = None if found is None else ("", f"ClusterRole {process.component}")
            else:
                account = workload_account(objects, process.kind, process.component)
                found = None
            if account is None:
                if shapes:
                    out.failures.append(
                        f"NO WORKLOAD  the chart renders no {process.kind} for the "
                        f"{process.name} with values '{values}', yet it made "
                        f"{_requests(sum(t.count for t in shapes.values()))}"
                    )
                continue
            grants = found if found is not None else account_grants(objects, *account)
            used: set[tuple[Grant, Atom]] = set()
            for use, tally in sorted(shapes.items()):
                hits = {
                    (grant, atom)
                    for grant in grants
                    for atom in grant.atoms()
                    if atom_covers(atom, grant, use, tally.names)
                }
                used |= hits
                if not hits and not discovery_allows(use):
                    denied.setdefault(use, []).append(f"{account[0]}/{account[1]} ('{values}')")
                    hints.setdefault(use, _elsewhere(grants, use, tally))
            if not shapes:
                continue  # a process this run never ran: its grants are not in question
            for grant in grants:
                for atom in grant.atoms():
                    if (grant, atom) not in used:
                        line = f"{process.name}: {atom} {grant.where()}"
                        unused.setdefault(line, []).append(values)
    for use, accounts in denied.items():
        out.failures.append(
            f"NOT GRANTED  {PROCESSES[use.client].name}: {use.rule}{_where(use)} is not allowed "
            f"by the chart's roles to ServiceAccount {', '.join(accounts)}{hints[use]}: "
            f"{_seen(use, mine[use])}"
        )
    out.checked = total
    silent = [p.name for p in PROCESSES.values() if not counts[p.name]]
    out.notes.append(
        f"checked {_requests(total)} ({len(mine)} distinct) by kgpu's processes ({summary}) "
        f"against the chart's roles for {len(VALUE_SETS)} values sets "
        f"({', '.join(VALUE_SETS)}); {_requests(by_tests)} by test code not checked"
        + (f"; no request by the {' or the '.join(silent)} in this run" if silent else "")
    )
    for line, sets in unused.items():
        where = "every values set" if len(sets) == len(VALUE_SETS) else ", ".join(sets)
        out.unused.append(f"{line} ({where})")
    return out


def _requests(n: int) -> str:
    return "1 request" if n == 1 else f"{n} requests"


def _elsewhere(grants: list[Grant], use: Use, tally: Tally) -> str:
    """A hint when a Role grants the rule in another namespace only (tests run processes in
    the release namespace, tests/deploy's NAMESPACE)."""
    for grant in grants:
        if grant.namespace is not None and grant.namespace != use.namespace:
            moved = Use(
                use.client, use.verb, use.group, use.resource, use.subresource, grant.namespace
            )
            if any(atom_covers(a, grant, moved, tally.names) for a in grant.atoms()):
                return f"; granted only in namespace {grant.namespace}"
    return ""


def helm_renderer() -> tuple[Render | None, str]:
    """A render function backed by the real helm (installed by scripts/install-helm.sh, as
    tests/deploy does), or None and why not."""
    from deploy.conftest import KUBE_VERSIONS, _install_helm, helm_template

    helm, why = _install_helm()
    if helm is None:
        return None, why
    cache: dict[tuple[Path, ...], list[Obj]] = {}

    def render(files: tuple[Path, ...]) -> list[Obj]:
        if files not in cache:
            args = [a for f in files for a in ("-f", str(f))]
            # the newest supported release: the roles do not vary with it
            done = helm_template(helm, KUBE_VERSIONS[-1], *args)
            if done.returncode != 0:
                raise RuntimeError(f"helm template {' '.join(args)} failed: {done.stderr}")
            cache[files] = [d for d in yaml.safe_load_all(done.stdout) if d]
        return cache[files]

    return render, ""


def add_options(parser: pytest.Parser) -> None:
    parser.addoption(
        "--rbac-report",
        action="store_true",
        help="print every request shape kgpu's processes made against the API-server "
        "stand-in (the rules docs/cluster.md lists)",
    )


class RbacCheck:
    """The plugin: opens the ledger at configure, names each test in it, checks at the end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.ledger: Ledger = open_ledger()
        self.outcome: Outcome | None = None
        self.uses: dict[Use, Tally] = {}
        config.addinivalue_line(
            "markers",
            f"{MARK}(reason): the test sends requests under a kgpu process's user agent by "
            "hand; the session's RBAC check leaves them out",
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Any:
        mark = item.get_closest_marker(MARK)
        self.ledger.context = item.nodeid
        self.ledger.exempt = (str(mark.args[0]) if mark.args else "exempt") if mark else None
        try:
            return (yield)
        finally:
            self.ledger.context = ""
            self.ledger.exempt = None

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        close_ledger(self.ledger)
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return
        self.uses = self.ledger.uses()
        render, why = (None, "")
        if any(u.client in PROCESSES for u in self.uses):
            render, why = helm_renderer()
        ci = os.environ.get("CI", "").lower() == "true"
        self.outcome = check(self.uses, render, why, ci)
        if self.outcome.failures and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        out = self.outcome
        if out is None or (not self.uses and not self.ledger.exempted):
            return  # no stand-in served anything: nothing to say
        tr = terminalreporter
        tr.write_sep("=", "kgpu RBAC (tests/rbac/plugin.py)", red=bool(out.failures))
        for line in out.notes:
            tr.write_line(line)
        if out.skipped:
            tr.write_line(f"SKIPPED: {out.skipped}", yellow=True)
        if self.ledger.exempted:
            tr.write_line(f"{self.ledger.exempted} requests left out by @pytest.mark.{MARK}")
        for line in out.failures:
            tr.write_line(line, red=True, bold=True)
        if out.unused:
            tr.write_line(f"{len(out.unused)} granted rules no request of this run used:")
            for line in out.unused:
                tr.write_line(f"  unused: {line}")
        elif out.checked:
            tr.write_line("every rule granted to a process that ran was used")
        if self.config.getoption("--rbac-report", default=False):
            tr.write_line("request shapes by kgpu's processes:")
            for use, tally in sorted(self.uses.items()):
                if is_kgpu(use.client):
                    tr.write_line(f"  {use.client}: {use.rule}{_where(use)} x{tally.count}")
