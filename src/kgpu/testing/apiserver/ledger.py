"""A ledger of what every API-server stand-in served while it was open: the requests of a
whole test run, for checking them against the permissions a deployment grants.

One test's :meth:`FakeApiServer.rules <kgpu.testing.apiserver.FakeApiServer.rules>` shows
what one lifecycle asked for; a process's real needs are the union over everything the test
suite makes it do, in whichever test and through whichever server. So every stand-in reports
each request it records to the open ledgers (normally one, opened by the test runner for the
session), which keep one tally per distinct (client, verb, API group, resource, subresource,
namespace): bounded by the distinct request shapes, not by the number of requests.

The client is the ``User-Agent``'s product token (``kgpu-agent`` of ``kgpu-agent/0.1.0``):
the name a process gives itself; which names are kgpu's processes is the reader's business.
``context`` names what is running (a test id), kept with each shape's first request so a
report can say where to look; a context with ``exempt`` set is left out (a test that sends
requests under a process's name by hand, as the stand-in's own tests do), and counted.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol


class _Request(Protocol):
    """What a ledger reads of a recorded request (:class:`~.server.Recorded`)."""

    @property
    def user_agent(self) -> str: ...

    @property
    def verb(self) -> str: ...

    @property
    def group(self) -> str: ...

    @property
    def resource(self) -> str: ...

    @property
    def subresource(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def name(self) -> str: ...


@dataclass(frozen=True, order=True)
class Use:
    """One distinct request shape: who asked for what, where (``namespace`` "" is
    cluster-wide: a cluster-scoped resource, or a namespaced one across all namespaces). A
    non-resource request (discovery, ``/version``) has no resource and its path as ``url``."""

    client: str
    verb: str
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    url: str = ""

    @property
    def rule(self) -> str:
        """``verb resource[/subresource] (group)`` as a report names it; ``core`` for ``""``."""
        if not self.resource:
            return f"{self.verb} {self.url}"
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {resource} ({self.group or 'core'})"


#: Names kept per shape; past this a shape's names are "many" (a name-restricted rule then
#: cannot be shown to cover it).
MAX_NAMES = 32


@dataclass
class Tally:
    """How often a shape was seen, where first, and the object names it named ("" for none:
    a create, a list without a ``metadata.name`` selector); ``names`` is None past
    :data:`MAX_NAMES`."""

    count: int
    user_agent: str
    path: str
    context: str
    names: frozenset[str] | None = frozenset()

    def copy(self) -> Tally:
        return Tally(self.count, self.user_agent, self.path, self.context, self.names)


def client_of(user_agent: str) -> str:
    """The product token a client names itself by: ``kgpu-agent`` of ``kgpu-agent/0.1.0``."""
    return user_agent.split("/", 1)[0].split(" ", 1)[0].strip()


class Ledger:
    """The request shapes seen while open (thread-safe: servers record from their
    connection threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uses: dict[Use, Tally] = {}
        self.context = ""
        self.exempt: str | None = None
        self.requests = 0
        self.exempted = 0

    def note(self, request: _Request) -> None:
        with self._lock:
            if self.exempt is not None:
                self.exempted += 1
                return
            self.requests += 1
            use = Use(
                client_of(request.user_agent),
                request.verb,
                request.group,
                request.resource,
                request.subresource,
                request.namespace,
                "" if request.resource else request.path,
            )
            tally = self._uses.get(use)
            if tally is None:
                tally = self._uses[use] = Tally(0, request.user_agent, request.path, self.context)
            tally.count += 1
            if tally.names is not None and request.name not in tally.names:
                names = tally.names | {request.name}
                tally.names = names if len(names) <= MAX_NAMES else None

    def uses(self) -> dict[Use, Tally]:
        """A snapshot of every shape seen, with its tally."""
        with self._lock:
            return {use: tally.copy() for use, tally in self._uses.items()}


_open: list[Ledger] = []
_open_lock = threading.Lock()


def open_ledger() -> Ledger:
    """Start a ledger every stand-in reports to until :func:`close_ledger`."""
    ledger = Ledger()
    with _open_lock:
        _open.append(ledger)
    return ledger


def close_ledger(ledger: Ledger) -> None:
    with _open_lock:
        if ledger in _open:
            _open.remove(ledger)


def report(request: _Request) -> None:
    """Hand one recorded request to every open ledger (the stand-in calls this)."""
    with _open_lock:
        ledgers = list(_open)
    for ledger in ledgers:
        ledger.note(request)
