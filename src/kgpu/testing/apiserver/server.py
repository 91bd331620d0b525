"""A Kubernetes API server stand-in on loopback, faithful where kgpu depends on kube-apiserver.

No kube-apiserver binary can run here, so kgpu's API-server shell (:mod:`kgpu.cluster.kube`) and
the processes built on it are tested against this server: real HTTP (Python's ``http.server``,
one thread per connection), the real client (``kubernetes``), the real wire formats. It
reproduces, per Kubernetes release (``release="1.32"`` ... ``"1.37"``, :mod:`kgpu.releases`):

- **URLs and discovery**: ``/api/v1/...``, ``/apis/<group>/<version>/...``,
  ``namespaces/<ns>/`` for namespaced kinds; ``GET /api``, ``/apis``, ``/apis/<group>``,
  ``/apis/<group>/<version>``, ``/version``. ``resource.k8s.io`` is served in the versions the
  release serves (1.32: ``v1beta1``; 1.33: ``+v1beta2``; 1.34+: ``+v1``): a ``v1`` DeviceClass
  sent to a 1.33 server is 404 as on a real one.
- **Schemas**: every write of a built-in kind is checked against that release's official
  OpenAPI schema (kubernetes-validate); a violation is 422 ``Invalid`` naming the field.
  Unknown fields are refused with ``fieldValidation=Strict`` (what kgpu sends) and kept
  otherwise (a real server drops them with a warning). Objects are stored once and served in
  any version the release serves, converted by :mod:`kgpu.dra.versions`; every converted answer
  is checked against the schema too, so a conversion bug is a 500, not a silent pass.
- **Feature gates**: fields whose gate is off in the release (or in ``feature_gates``, the
  server's ``--feature-gates``) are dropped on write as kube-apiserver's strategies drop them
  (:mod:`.gates`: ``DRAConsumableCapacity``'s ``allowMultipleAllocations`` and
  ``requestPolicy`` on ResourceSlices at 1.34-1.35).
- **resourceVersion**: one counter, bumped by every write (a no-op write keeps it); per object
  and per list (the collection's version when the list was taken); a PUT or patch with a stale
  one is 409 ``Conflict``; a PUT of a custom resource without one is 422.
- **Watches** (``?watch=true``): chunked streams of JSON events; ``resourceVersion`` resumes
  from the server's bounded event history, older is an ``ERROR`` event with code 410
  (``Expired``, "too old resource version"); none starts with the current objects as
  ``ADDED``; objects entering/leaving the selectors arrive as ``ADDED``/``DELETED``;
  ``allowWatchBookmarks`` gets a ``BOOKMARK`` every ``bookmark_interval_s``; the stream ends
  cleanly after ``timeoutSeconds``.
- **Selectors**: label selectors (equality and set-based), field selectors limited to each
  kind's selectable fields (400 ``field label not supported`` otherwise).
- **Pagination**: ``limit``/``continue``; the pages of one list come from one snapshot; a
  ``continue`` older than the last compaction is 410 ``Expired``.
- **Writes**: POST (409 ``AlreadyExists``, ``generateName``), PUT, merge patch
  (``application/merge-patch+json``), server-side apply (``application/apply-patch+yaml``,
  ``fieldManager`` required, conflicts unless ``force``; see :mod:`.apply`), DELETE with
  finalizers (``deletionTimestamp`` until the last finalizer goes). ``uid``,
  ``creationTimestamp``, ``generation`` are the server's.
- **Status subresource**: writes to the main resource keep the stored ``status``; writes to
  ``.../status`` change only ``status``.
- **Errors**: ``Status`` bodies with the real ``reason``, ``code``, ``details`` and wording.
- **Auth**: with ``token`` set, requests without ``Authorization: Bearer <token>`` get 401.
- **Operations**: :meth:`FakeApiServer.restart` (same port and objects, the watch history is
  lost as a restarted kube-apiserver's watch cache is), :meth:`~FakeApiServer.drop_watches`
  (streams cut mid-way), :meth:`~FakeApiServer.compact` (history and continue tokens expire).

Every request is recorded (:class:`Recorded`: method, path, query, body, headers, and the RBAC
view of it: verb, API group, resource, subresource, namespace, user agent, classified from the
URL as kube-apiserver's authorizer sees it, :mod:`.requestinfo`, so a request for an API this
server does not serve still counts) so tests assert the wire traffic and RBAC rules can be
compared with what a process really did (:meth:`FakeApiServer.rules`); every open
:mod:`.ledger` gets it too, so a test run can check all of them (tests/rbac).

Not reproduced: admission, defaulting, semantic validation beyond the OpenAPI schema, garbage
collection of owned objects, strategic merge patch and JSON patch (415), ``managedFields`` in
answers (ownership is kept beside the object), ``resourceVersionMatch``, watch-list.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import copy
import itertools
import json
import socket
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

from kgpu.dra import versions as dra_versions
from kgpu.store.objects import merge_patch
from kgpu.testing.apiserver import apply as ssa
from kgpu.testing.apiserver import gates, ledger
from kgpu.testing.apiserver.kinds import (
    BOOL_FIELDS,
    DEFAULT_RELEASE,
    DRA_GROUP,
    KINDS,
    Kind,
    api_group,
    api_group_list,
    api_resource_list,
    kinds_for,
    version_info,
)
from kgpu.testing.apiserver.requestinfo import request_info
from kgpu.testing.apiserver.selectors import (
    FieldTerm,
    Requirement,
    SelectorError,
    fields_match,
    labels_match,
    parse_fields,
    parse_labels,
)

Obj = dict[str, Any]
Key = tuple[str, str, str, str]  # group, plural, namespace, name

#: How long a watch without ``timeoutSeconds`` stays open (kube-apiserver's minRequestTimeout).
DEFAULT_WATCH_TIMEOUT_S = 1800.0
_SNAPSHOTS = 64  # lists whose continue tokens stay valid (until a compaction)


@dataclass(frozen=True)
class Recorded:
    """One request as the server saw it, and as RBAC sees it."""

    method: str
    path: str
    query: dict[str, str]
    body: Obj | None
    headers: dict[str, str]
    verb: str = ""  # get list watch create update patch delete deletecollection (lower-case
    # HTTP method for a non-resource URL)
    group: str = ""
    version: str = ""
    resource: str = ""  # plural; "" for discovery and other non-resource URLs
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def user_agent(self) -> str:
        return self.headers.get("user-agent", "")

    @property
    def rule(self) -> tuple[str, str, str] | None:
        """(API group, resource[/subresource], verb) as an RBAC rule grants it; None for a
        non-resource URL (discovery, which every authenticated user may read)."""
        if not self.resource:
            return None
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return self.group, resource, self.verb


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


def _status(exc: ApiError) -> Obj:
    status: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": exc.message,
        "reason": exc.reason,
        "code": exc.code,
    }
    if exc.details is not None:
        status["details"] = exc.details
    return status


def _not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


@dataclass
class _Target:
    """A request path taken apart."""

    group: str
    version: str
    kind: Kind | None = None
    namespace: str = ""
    name: str | None = None
    sub: str | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


class Watcher:
    """One open watch: the events for its stream, filtered and in its version."""

    def __init__(
        self,
        server: FakeApiServer,
        kind: Kind,
        version: str,
        namespace: str | None,
        labels: list[Requirement],
        fields: list[FieldTerm],
        bookmarks: bool,
    ) -> None:
        self.server = server
        self.kind = kind
        self.version = version
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.bookmarks = bookmarks
        self._queue: deque[Obj] = deque()
        self._cond = threading.Condition()
        self.closed = False
        self.dropped = False

    def _matches(self, key: Key, obj: Obj) -> bool:
        return (
            key[0] == self.kind.group
            and key[1] == self.kind.plural
            and (self.namespace is None or key[2] == self.namespace)
            and labels_match(self.labels, obj)
            and fields_match(self.fields, obj, BOOL_FIELDS)
        )

    def offer(self, etype: str, key: Key, obj: Obj, old: Obj | None) -> None:
        now = etype != "DELETED" and self._matches(key, obj)
        before = old is not None and self._matches(key, old)
        if etype == "DELETED":
            if self._matches(key, obj):
                self.push("DELETED", obj)
        elif now:
            self.push("MODIFIED" if before and etype == "MODIFIED" else "ADDED", obj)
        elif before and old is not None:
            gone = copy.deepcopy(old)
            gone["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
            self.push("DELETED", gone)

    def push(self, etype: str, obj: Obj) -> None:
        event = {"type": etype, "object": self.server.out(self.kind, self.version, obj)}
        self.push_raw(event)

    def push_raw(self, event: Obj) -> None:
        with self._cond:
            if not self.closed:
                self._queue.append(event)
                self._cond.notify()

    def next(self, timeout: float) -> Obj | None:
        with self._cond:
            if not self._queue and not self.closed:
                self._cond.wait(max(0.0, timeout))
            return self._queue.popleft() if self._queue else None

    def close(self, *, dropped: bool = False) -> None:
        with self._cond:
            self.closed = True
            self.dropped = self.dropped or dropped
            self._cond.notify_all()


def _prune(obj: Obj, exc: Any) -> bool:
    """Drop the unknown fields a schema error names; False when there was nothing to drop."""
    target: Any = obj
    for part in exc.path:
        target = target[part]
    known = set((exc.schema or {}).get("properties") or {})
    unknown = [k for k in target if k not in known] if isinstance(target, dict) else []
    for k in unknown:
        del target[k]
    return bool(unknown)


def _token(rv: int, key: Key) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": list(key)})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _untoken(token: str) -> tuple[int, Key]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        start = data["start"]
        return int(data["rv"]), (str(start[0]), str(start[1]), str(start[2]), str(start[3]))
    except (ValueError, KeyError, TypeError, IndexError):
        raise ApiError(400, "BadRequest", f"continue key is not valid: {token!r}") from None


@dataclass
class FakeApiServer:
    """The API server's state and rules; :meth:`start` serves it over HTTP on 127.0.0.1."""

    token: str | None = None
    release: str = DEFAULT_RELEASE
    kinds: tuple[Kind, ...] = KINDS
    history: int = 1000
    bookmark_interval_s: float = 60.0
    validate: bool = True
    requests: list[Recorded] = field(default_factory=list)
    objects: dict[Key, Obj] = field(default_factory=dict)
    #: kube-apiserver's ``--feature-gates`` over the release's defaults (:mod:`kgpu.releases`);
    #: a gate that is off drops its fields on write (:mod:`.gates`)
    feature_gates: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kinds = kinds_for(self.release, self.kinds)
        if self.validate:
            try:
                import kubernetes_validate  # noqa: F401
            except ImportError as exc:
                raise RuntimeError(
                    "the API-server stand-in checks objects against the official schemas with "
                    "kubernetes-validate: pip install 'kgpu[test]', or pass validate=False"
                ) from exc
        self._rv_counter = itertools.count(1)
        self._rv = 0
        self._uid = itertools.count(1)
        self._lock = threading.RLock()
        self._history: deque[tuple[int, str, Key, Obj, Obj | None]] = deque()
        self._history_start = 0  # watches may resume from any version >= this
        self._snapshots: dict[tuple[int, str, str], list[tuple[Key, Obj]]] = {}
        self._owners: dict[Key, ssa.Owners] = {}
        self._watchers: list[Watcher] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self.on_request: Callable[[Recorded], None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def resource_version(self) -> int:
        """The last resourceVersion handed out."""
        return self._rv

    def start(self) -> FakeApiServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with fake._lock:
                    fake._connections.add(self.connection)

            def finish(self) -> None:
                with fake._lock:
                    fake._connections.discard(self.connection)
                with contextlib.suppress(OSError):  # the socket was cut (restart, dropped watch)
                    super().finish()

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
                if self.command == "GET" and query.get("watch") in ("1", "true"):
                    fake._serve_watch(self, self.path, headers)
                    return
                code, answer = fake.handle(self.command, self.path, raw, headers)
                self._send_json(code, answer)

            def _send_json(self, code: int, answer: Obj) -> None:
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        self._stopping.clear()
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._server.daemon_threads = True
        self._port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.02},
            name="fake-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: every connection is cut, open watches included."""
        self._stopping.set()
        with self._lock:
            watchers = list(self._watchers)
        for w in watchers:
            w.close(dropped=True)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def restart(self) -> None:
        """Stop and serve again on the same port with the same objects (etcd keeps them); the
        watch history is gone, as a restarted kube-apiserver's watch cache starts at the
        current version, so a watch resuming from before the restart gets 410."""
        self.stop()
        with self._lock:
            self._history.clear()
            self._history_start = self._rv
            self._snapshots.clear()
        self.start()

    def drop_watches(self) -> int:
        """Cut every open watch stream mid-way (no final chunk); how many were open."""
        with self._lock:
            watchers = list(self._watchers)
        for w in watchers:
            w.close(dropped=True)
        return len(watchers)

    def compact(self) -> None:
        """Forget the event history and list snapshots (etcd compaction): watches from an
        older resourceVersion and older continue tokens get 410 Expired."""
        with self._lock:
            self._history.clear()
            self._history_start = self._rv
            self._snapshots.clear()

    def open_watches(self) -> int:
        with self._lock:
            return len(self._watchers)

    # -- recording ---------------------------------------------------------------------------
    def calls(self, method: str | None = None) -> list[Recorded]:
        """Recorded requests, discovery included, optionally of one method."""
        return [r for r in self.requests if method is None or r.method == method]

    def rules(self, user_agent: str | None = None) -> set[tuple[str, str, str]]:
        """Every (API group, resource[/subresource], verb) requested, by clients whose
        ``User-Agent`` starts with ``user_agent`` (all when None): what RBAC must allow."""
        return {
            r.rule
            for r in list(self.requests)
            if r.rule is not None and (user_agent is None or r.user_agent.startswith(user_agent))
        }

    def _record(
        self, method: str, path: str, query: dict[str, str], body: Any, headers: dict[str, str]
    ) -> Recorded:
        info = request_info(method, path, query)
        rec = Recorded(
            method,
            path,
            query,
            body if isinstance(body, dict) else None,
            headers,
            info.verb,
            info.group,
            info.version,
            info.resource,
            info.subresource,
            info.namespace,
            info.name,
        )
        with self._lock:
            self.requests.append(rec)
        ledger.report(rec)
        if self.on_request is not None:
            self.on_request(rec)
        return rec

    # -- HTTP --------------------------------------------------------------------------------
    def _decode(self, raw: bytes, headers: dict[str, str]) -> Any:
        if not raw:
            return None
        if "yaml" in headers.get("content-type", ""):
            return yaml.safe_load(raw)
        return json.loads(raw)

    def _check_auth(self, headers: dict[str, str]) -> None:
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            raise ApiError(401, "Unauthorized", "Unauthorized")

    def handle(
        self, method: str, target: str, raw: bytes, headers: dict[str, str]
    ) -> tuple[int, Obj]:
        """Answer one (non-watch) request: (HTTP status, JSON body)."""
        parsed = urllib.parse.urlsplit(target)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        try:
            body = self._decode(raw, headers)
        except (ValueError, yaml.YAMLError):
            body = None
            self._record(method, parsed.path, query, None, headers)
            return 400, _status(
                ApiError(400, "BadRequest", "the body of the request is not valid JSON")
            )
        self._record(method, parsed.path, query, body, headers)
        try:
            self._check_auth(headers)
            with self._lock:
                answer = self._route(method, parsed.path, query, body, headers)
            return (201 if method == "POST" else 200), answer
        except ApiError as exc:
            return exc.code, _status(exc)

    def _serve_watch(
        self, handler: BaseHTTPRequestHandler, target: str, headers: dict[str, str]
    ) -> None:
        parsed = urllib.parse.urlsplit(target)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        self._record("GET", parsed.path, query, None, headers)
        try:
            self._check_auth(headers)
            t = self._parse(parsed.path)
            if t.kind is None or t.name is not None:
                raise _not_found_path()
            watcher = self.open_watch(t.kind, t.version, t.namespace or None, query)
        except ApiError as exc:
            data = json.dumps(_status(exc)).encode()
            handler.send_response(exc.code)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
            return
        timeout = float(query.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT_S)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        deadline = time.monotonic() + timeout
        next_bookmark = time.monotonic() + self.bookmark_interval_s
        try:
            while True:
                now = time.monotonic()
                event = watcher.next(min(deadline, next_bookmark) - now)
                if watcher.dropped or self._stopping.is_set():
                    handler.connection.shutdown(socket.SHUT_RDWR)  # cut, no final chunk
                    handler.close_connection = True
                    return
                now = time.monotonic()
                if event is None and watcher.bookmarks and now >= next_bookmark:
                    event = {
                        "type": "BOOKMARK",
                        "object": {
                            "kind": t.kind.kind,
                            "apiVersion": t.api_version,
                            "metadata": {"resourceVersion": str(self._rv)},
                        },
                    }
                    next_bookmark = now + self.bookmark_interval_s
                if event is not None:
                    data = json.dumps(event).encode() + b"\n"
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    if event["type"] == "ERROR":
                        break
                    continue
                if now >= deadline:
                    break
            handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            handler.close_connection = True
        finally:
            watcher.close()
            with self._lock:
                if watcher in self._watchers:
                    self._watchers.remove(watcher)

    # -- routing -----------------------------------------------------------------------------
    def _parse(self, path: str) -> _Target:
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _not_found_path()
        t = _Target(group, version)
        if not rest:
            return t
        served = [k for k in self.kinds if k.group == group and version in k.versions]
        if rest[0] == "namespaces" and len(rest) >= 3:
            nested = next((k for k in served if k.plural == rest[2] and k.namespaced), None)
            if nested is not None:
                t.namespace, rest = rest[1], rest[2:]
        kind = next((k for k in served if k.plural == rest[0]), None)
        if kind is None:
            raise _not_found_path()
        t.kind = kind
        t.name = rest[1] if len(rest) >= 2 else None
        t.sub = rest[2] if len(rest) >= 3 else None
        if len(rest) > 3 or (t.sub is not None and (t.sub != "status" or not kind.status)):
            raise _not_found_path()
        return t

    def _route(
        self, method: str, path: str, query: dict[str, str], body: Any, headers: dict[str, str]
    ) -> Obj:
        if path.rstrip("/") == "/version":
            return version_info(self.release)
        if path.rstrip("/") == "/api":
            return {"kind": "APIVersions", "versions": ["v1"]}
        if path.rstrip("/") == "/apis":
            return api_group_list(self.kinds)
        parts = path.strip("/").split("/")
        if parts[0] == "apis" and len(parts) == 2:
            group = api_group(self.kinds, parts[1])
            if group is None:
                raise _not_found_path()
            return group
        t = self._parse(path)
        if t.kind is None:
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method")
            listing = api_resource_list(self.kinds, t.group, t.version)
            if listing is None:
                raise _not_found_path()
            return listing
        kind = t.kind
        manager = query.get("fieldManager") or headers.get("user-agent", "unknown").split("/")[0]
        if t.sub == "status":  # a subresource's fields are managed apart from the object's
            manager += "/status"
        strict = query.get("fieldValidation") == "Strict"
        if t.name is None:
            if method == "GET":
                return self._list(kind, t.version, t.namespace or None, query)
            if method == "POST":
                return self._create(kind, t.version, t.namespace, body or {}, manager, strict)
        elif method == "GET":
            return self.out(kind, t.version, self._get(kind, t.namespace, t.name))
        elif method == "PUT":
            return self._update(
                kind, t.version, t.namespace, t.name, body or {}, t.sub == "status", manager, strict
            )
        elif method == "PATCH":
            ctype = headers.get("content-type", "").split(";")[0].strip()
            return self._patch(
                kind,
                t.version,
                t.namespace,
                t.name,
                body,
                ctype,
                t.sub == "status",
                manager,
                query,
                strict,
            )
        elif method == "DELETE":
            return self._delete(kind, t.version, t.namespace, t.name)
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    # -- versions and schemas ----------------------------------------------------------------
    def gate_on(self, name: str) -> bool:
        """Whether feature gate ``name`` is on in this server (``feature_gates``, else the
        release's default; a gate the release does not have is off)."""
        if name in self.feature_gates:
            return self.feature_gates[name]
        from kgpu import releases

        state = releases.release(releases.parse_minor(self.release)).gate(name)
        return state is not None and state.default

    def out(self, kind: Kind, version: str, stored: Obj) -> Obj:
        """A stored object as served in ``version`` (apiVersion and kind set)."""
        obj = copy.deepcopy(stored)
        obj["kind"] = kind.kind
        if kind.group == DRA_GROUP:
            obj["apiVersion"] = dra_versions.INTERNAL_API_VERSION
            obj = dra_versions.to_version(obj, version)
            self._check_schema(kind, obj, strict=True, answer=True)
        obj["apiVersion"] = kind.api_version(version)
        return obj

    def _store_form(self, kind: Kind, version: str, obj: Obj) -> Obj:
        out = copy.deepcopy(obj)
        if kind.group == DRA_GROUP:
            out = dra_versions.to_internal(
                {**out, "apiVersion": kind.api_version(version), "kind": kind.kind}
            )
        out.pop("apiVersion", None)
        out.pop("kind", None)
        return out

    def _check_schema(self, kind: Kind, obj: Obj, *, strict: bool, answer: bool = False) -> None:
        """422 (500 for an answer) when ``obj`` breaks the release's schema. Without
        ``strict`` (``fieldValidation`` other than Strict), unknown fields are first dropped
        from ``obj`` in place, as the API server drops them."""
        if not self.validate or kind.custom:
            return
        import kubernetes_validate

        for _ in range(1000):
            try:
                kubernetes_validate.validate(obj, f"{self.release}.0", strict=True)
                return
            except kubernetes_validate.SchemaNotFoundError:
                return
            except kubernetes_validate.ValidationError as exc:
                if not strict and exc.validator == "additionalProperties" and _prune(obj, exc):
                    continue
                raise self._invalid(kind, obj, exc, answer) from exc

    def _invalid(self, kind: Kind, obj: Obj, exc: Any, answer: bool) -> ApiError:
        where = ""
        for part in exc.path:
            where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
        name = (obj.get("metadata") or {}).get("name", "")
        message = (
            f'{kind.kind}.{kind.group or "core"} "{name}" is invalid: '
            f"{where or '<root>'}: Invalid value: {exc.message}"
        )
        if answer:
            return ApiError(500, "InternalError", f"stand-in served an invalid object: {message}")
        cause = {"reason": "FieldValueInvalid", "message": exc.message, "field": where}
        details = {"name": name, "group": kind.group, "kind": kind.kind, "causes": [cause]}
        return ApiError(422, "Invalid", message, details)

    def _check_type(self, kind: Kind, version: str, obj: Obj) -> None:
        api_version = kind.api_version(version)
        if (
            obj.get("kind", kind.kind) != kind.kind
            or obj.get("apiVersion", api_version) != api_version
        ):
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({obj.get('apiVersion')}) does not match the "
                f"expected API version ({api_version})",
            )

    # -- the registry rules ------------------------------------------------------------------
    @staticmethod
    def _qualified(kind: Kind) -> str:
        return f"{kind.plural}.{kind.group}" if kind.group else kind.plural

    def _details(self, kind: Kind, name: str) -> Obj:
        details: Obj = {"name": name, "kind": kind.plural}
        if kind.group:
            details["group"] = kind.group
        return details

    def _not_found(self, kind: Kind, name: str) -> ApiError:
        return ApiError(
            404,
            "NotFound",
            f'{self._qualified(kind)} "{name}" not found',
            self._details(kind, name),
        )

    def _conflict(self, kind: Kind, name: str) -> ApiError:
        return ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {self._qualified(kind)} "{name}": '
            "the object has been modified; please apply your changes to the latest version "
            "and try again",
            self._details(kind, name),
        )

    def _key(self, kind: Kind, namespace: str, name: str) -> Key:
        return (kind.group, kind.plural, namespace if kind.namespaced else "", name)

    def _get(self, kind: Kind, namespace: str, name: str) -> Obj:
        obj = self.objects.get(self._key(kind, namespace, name))
        if obj is None:
            raise self._not_found(kind, name)
        return obj

    def _selectors(
        self, kind: Kind, query: dict[str, str]
    ) -> tuple[list[Requirement], list[FieldTerm]]:
        try:
            return (
                parse_labels(query.get("labelSelector", "")),
                parse_fields(query.get("fieldSelector", ""), kind.selectable),
            )
        except SelectorError as exc:
            raise ApiError(400, "BadRequest", str(exc)) from None

    def _list(self, kind: Kind, version: str, namespace: str | None, query: dict[str, str]) -> Obj:
        labels, fields = self._selectors(kind, query)
        limit = int(query.get("limit") or 0)
        if query.get("resourceVersion") == "0":
            limit = 0  # served from the watch cache: limit is ignored
        token = query.get("continue")
        start: Key | None = None
        if token:
            rv, start = _untoken(token)
            snapshot = self._snapshots.get((rv, kind.group, kind.plural))
            if snapshot is None or rv < self._history_start:
                raise ApiError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
        else:
            rv = self._rv
            snapshot = sorted(
                (k, o)
                for k, o in self.objects.items()
                if k[0] == kind.group and k[1] == kind.plural
            )
        # the page starts after the continue key (the snapshot is sorted by key) and ends at
        # the limit: one page costs its own items, not the whole collection (55,000 pods)
        first = bisect.bisect_right(snapshot, start, key=lambda item: item[0]) if start else 0

        def matches(k: Key, o: Obj) -> bool:
            return (
                (namespace is None or k[2] == namespace)
                and labels_match(labels, o)
                and fields_match(fields, o, BOOL_FIELDS)
            )

        page: list[tuple[Key, Obj]] = []
        more = False
        for k, o in itertools.islice(snapshot, first, None):
            if matches(k, o):
                if limit and len(page) == limit:
                    more = True
                    break
                page.append((k, o))
        meta: Obj = {"resourceVersion": str(rv)}
        if more:
            meta["continue"] = _token(rv, page[-1][0])
            if not labels and not fields:
                left = (
                    len(snapshot) - first
                    if namespace is None
                    else sum(
                        1 for k, _ in itertools.islice(snapshot, first, None) if k[2] == namespace
                    )
                )
                meta["remainingItemCount"] = left - limit
            self._snapshots[(rv, kind.group, kind.plural)] = snapshot
            while len(self._snapshots) > _SNAPSHOTS:
                self._snapshots.pop(next(iter(self._snapshots)))
        items = []
        for _, obj in page:
            item = self.out(kind, version, obj)
            if not kind.custom:
                del item["apiVersion"], item["kind"]
            items.append(item)
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version(version),
            "metadata": meta,
            "items": items,
        }

    def open_watch(
        self, kind: Kind, version: str, namespace: str | None, query: dict[str, str]
    ) -> Watcher:
        labels, fields = self._selectors(kind, query)
        bookmarks = query.get("allowWatchBookmarks") in ("1", "true")
        w = Watcher(self, kind, version, namespace, labels, fields, bookmarks)
        rv = query.get("resourceVersion") or ""
        with self._lock:
            if rv in ("", "0"):
                for key, obj in sorted(self.objects.items()):
                    w.offer("ADDED", key, obj, None)
            else:
                try:
                    since = int(rv)
                except ValueError:
                    raise ApiError(400, "BadRequest", f'invalid resource version "{rv}"') from None
                if since < self._history_start:
                    expired = ApiError(
                        410,
                        "Expired",
                        f"too old resource version: {since} ({self._history_start + 1})",
                    )
                    w.push_raw({"type": "ERROR", "object": _status(expired)})
                else:
                    for erv, etype, key, obj, old in self._history:
                        if erv > since:
                            w.offer(etype, key, obj, old)
            self._watchers.append(w)
        return w

    def _commit(self, etype: str, key: Key, obj: Obj | None, old: Obj | None) -> Obj:
        """Store (or remove, for DELETED) one object at a new resourceVersion and tell the
        watches; returns what is stored."""
        self._rv = next(self._rv_counter)
        rv = self._rv
        if etype == "DELETED":
            assert old is not None
            obj = copy.deepcopy(old)
            obj["metadata"]["resourceVersion"] = str(rv)
            self.objects.pop(key, None)
            self._owners.pop(key, None)
        else:
            assert obj is not None
            obj["metadata"]["resourceVersion"] = str(rv)
            self.objects[key] = obj
        self._history.append((rv, etype, key, obj, old))
        while len(self._history) > self.history:
            self._history_start = self._history.popleft()[0]
        for w in list(self._watchers):
            w.offer(etype, key, obj, old)
        return obj

    def _create(
        self, kind: Kind, version: str, namespace: str, body: Obj, manager: str, strict: bool
    ) -> Obj:
        obj = copy.deepcopy(body)
        self._check_type(kind, version, obj)
        meta = obj.setdefault("metadata", {})
        if kind.namespaced:
            if meta.get("namespace") not in (None, namespace):
                raise ApiError(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the "
                    "request",
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self._uid):05x}"
        name = meta.get("name")
        if not name:
            raise ApiError(
                422,
                "Invalid",
                f'{kind.kind}.{kind.group or "core"} "" is invalid: metadata.name: Required value: '
                "name or generateName is required",
            )
        self._check_schema(
            kind, {**obj, "apiVersion": kind.api_version(version), "kind": kind.kind}, strict=strict
        )
        key = self._key(kind, namespace, name)
        if key in self.objects:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{self._qualified(kind)} "{name}" already exists',
                self._details(kind, name),
            )
        stored = self._store_form(kind, version, obj)
        stored = gates.drop_disabled(kind.kind, stored, None, self.gate_on)
        smeta = stored["metadata"]
        for server_set in ("resourceVersion", "uid", "deletionTimestamp"):
            smeta.pop(server_set, None)
        smeta["uid"] = f"00000000-0000-4000-8000-{next(self._uid):012x}"
        smeta["creationTimestamp"] = "2026-01-01T00:00:00Z"
        smeta["generation"] = 1
        if kind.status:
            stored.pop("status", None)
        owners: ssa.Owners = {}
        ssa.record_write(None, stored, manager, owners)
        self._owners[key] = owners
        return self.out(kind, version, self._commit("ADDED", key, stored, None))

    def _write(
        self,
        kind: Kind,
        version: str,
        key: Key,
        current: Obj,
        new: Obj,
        status_only: bool,
        manager: str,
    ) -> Obj:
        """Store ``new`` (store form) over ``current`` with the server's rules for metadata,
        generation, status and finalizers; a no-op keeps the version."""
        new = copy.deepcopy(new)
        if status_only:
            new = {**copy.deepcopy(current), "status": new.get("status")}
            if new["status"] is None:
                del new["status"]
        else:
            if kind.status:
                new.pop("status", None)
                if "status" in current:
                    new["status"] = copy.deepcopy(current["status"])
            new_meta = new.setdefault("metadata", {})
            for kept in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "generation",
                "namespace",
                "name",
            ):
                if kept in current["metadata"]:
                    new_meta[kept] = current["metadata"][kept]
                else:
                    new_meta.pop(kept, None)
            if new.get("spec") != current.get("spec"):
                new_meta["generation"] = int(current["metadata"]["generation"]) + 1
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if new == current:
            return self.out(kind, version, current)
        ssa.record_write(current, new, manager, self._owners.setdefault(key, {}))
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self._commit("DELETED", key, None, current)
            return self.out(kind, version, new)
        return self.out(kind, version, self._commit("MODIFIED", key, new, current))

    def _precondition(self, kind: Kind, name: str, current: Obj, rv: Any) -> None:
        if rv is not None and str(rv) != current["metadata"]["resourceVersion"]:
            raise self._conflict(kind, name)

    def _update(
        self,
        kind: Kind,
        version: str,
        namespace: str,
        name: str,
        body: Obj,
        status_only: bool,
        manager: str,
        strict: bool,
    ) -> Obj:
        self._check_type(kind, version, body)
        meta = body.get("metadata") or {}
        if meta.get("name") != name:
            raise ApiError(
                400, "BadRequest", "the name of the object does not match the name on the URL"
            )
        current = self._get(kind, namespace, name)
        rv = meta.get("resourceVersion")
        if rv is None and kind.custom:
            raise ApiError(
                422,
                "Invalid",
                f'{kind.kind}.{kind.group} "{name}" is invalid: '
                "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
            )
        self._precondition(kind, name, current, rv)
        self._check_schema(
            kind,
            {**body, "apiVersion": kind.api_version(version), "kind": kind.kind},
            strict=strict,
        )
        new = self._store_form(kind, version, body)
        new = gates.drop_disabled(kind.kind, new, current, self.gate_on)
        return self._write(
            kind, version, self._key(kind, namespace, name), current, new, status_only, manager
        )

    def _patch(
        self,
        kind: Kind,
        version: str,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        status_only: bool,
        manager: str,
        query: dict[str, str],
        strict: bool,
    ) -> Obj:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the patch must be a JSON object")
        key = self._key(kind, namespace, name)
        current = self.objects.get(key)
        served = self.out(kind, version, current) if current is not None else None
        if content_type == "application/merge-patch+json":
            if current is None or served is None:
                raise self._not_found(kind, name)
            self._precondition(
                kind, name, current, (body.get("metadata") or {}).get("resourceVersion")
            )
            result = merge_patch(served, body)
        elif content_type == "application/apply-patch+yaml":
            if not query.get("fieldManager"):
                raise ApiError(400, "BadRequest", "fieldManager is required for apply requests")
            self._check_type(kind, version, body)
            if (body.get("metadata") or {}).get("name") != name:
                raise ApiError(
                    400, "BadRequest", "the name of the object does not match the name on the URL"
                )
            config = copy.deepcopy(body)
            if kind.status and not status_only:
                config.pop("status", None)
            if status_only:
                config = {"metadata": {"name": name}, "status": config.get("status") or {}}
            if current is not None:
                self._precondition(
                    kind, name, current, (body.get("metadata") or {}).get("resourceVersion")
                )
            owners = self._owners.setdefault(key, {}) if current is not None else {}
            try:
                result = ssa.apply(served, config, manager, owners, query.get("force") == "true")
            except ssa.ApplyConflict as exc:
                raise ApiError(409, "Conflict", str(exc), self._details(kind, name)) from None
            result["apiVersion"], result["kind"] = kind.api_version(version), kind.kind
            if current is None:
                if status_only:
                    raise self._not_found(kind, name)
                result.setdefault("metadata", {})["name"] = name
                created = self._create(kind, version, namespace, result, manager, strict)
                self._owners[key] = owners
                return created
        else:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: application/merge-patch+json, application/apply-patch+yaml "
                f"(the stand-in does not implement {content_type or 'this type'})",
            )
        assert current is not None
        self._check_schema(kind, result, strict=strict)
        new = self._store_form(kind, version, result)
        new = gates.drop_disabled(kind.kind, new, current, self.gate_on)
        return self._write(kind, version, key, current, new, status_only, manager)

    def _delete(self, kind: Kind, version: str, namespace: str, name: str) -> Obj:
        current = self._get(kind, namespace, name)
        key = self._key(kind, namespace, name)
        if current["metadata"].get("finalizers"):
            if "deletionTimestamp" not in current["metadata"]:
                marked = copy.deepcopy(current)
                marked["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
                return self.out(kind, version, self._commit("MODIFIED", key, marked, current))
            return self.out(kind, version, current)
        self._commit("DELETED", key, None, current)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {**self._details(kind, name), "uid": current["metadata"]["uid"]},
        }
