"""A small Kubernetes API server on loopback, for testing :class:`kgpu.cluster.kube.KubeStore`.

Why not ``kmock``: its emulator (0.8) keeps objects but merges PUTs like patches, never sets or
checks ``resourceVersion`` (so no 409 Conflict), ignores ``labelSelector`` and answers duplicates
with reason ``Object Already Exists`` instead of ``AlreadyExists`` — exactly the behaviour the
store has to map. So this fake follows the real API server (kube-apiserver, generic registry)
where a client can tell:

- URLs: ``/api/v1/...`` for the core group, ``/apis/<group>/<version>/...`` otherwise;
  ``namespaces/<ns>/`` for namespaced kinds; every version of a group serves the same objects.
- Discovery: ``GET /api/v1`` and ``GET /apis/<group>/<version>`` return APIResourceLists with
  ``name``, ``kind``, ``namespaced`` and ``<plural>/status`` entries.
- Writes: ``resourceVersion`` is one cluster-wide counter bumped on every write (a no-op update
  keeps it); a PUT with a stale one is 409 reason ``Conflict``; a PUT without one is accepted for
  built-in kinds and refused (422 ``Invalid``) for custom resources; POST of a taken name is 409
  ``AlreadyExists``; ``generateName`` gets a suffix; ``uid``, ``creationTimestamp`` and
  ``generation`` (bumped when ``spec`` changes) are set by the server.
- Status subresource: for kinds that have one, writes to the main resource keep the stored
  ``status`` and ``PUT .../status`` changes only ``status``.
- Deletion: an object with finalizers gets ``deletionTimestamp`` and stays until an update
  empties its finalizers.
- Lists: ``labelSelector`` with ``k=v``/``k==v``/``k!=v``/``k``/``!k`` terms; items of built-in
  kinds carry no ``apiVersion``/``kind`` (custom resources do), as the real server sends them.
- Errors: ``Status`` bodies with the real ``reason``, ``code``, ``details`` and message wording
  (``configmaps "x" not found``, ``Operation cannot be fulfilled on ...``).
- Auth: with ``token`` set, requests without ``Authorization: Bearer <token>`` get 401.

Every request is recorded (method, path, query, body) so tests can assert the real wire traffic.
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Kind:
    group: str
    versions: tuple[str, ...]
    kind: str
    plural: str
    namespaced: bool
    status: bool
    custom: bool = False


KINDS = (
    Kind("", ("v1",), "Node", "nodes", False, True),
    Kind("", ("v1",), "Pod", "pods", True, True),
    Kind("", ("v1",), "ConfigMap", "configmaps", True, False),
    Kind("", ("v1",), "Namespace", "namespaces", False, True),
    Kind("apps", ("v1",), "DaemonSet", "daemonsets", True, True),
    Kind(
        "resource.k8s.io",
        ("v1", "v1beta1", "v1beta2"),
        "ResourceSlice",
        "resourceslices",
        False,
        False,
    ),
    Kind(
        "resource.k8s.io",
        ("v1", "v1beta1", "v1beta2"),
        "ResourceClaim",
        "resourceclaims",
        True,
        True,
    ),
    Kind(
        "resource.k8s.io",
        ("v1", "v1beta1", "v1beta2"),
        "DeviceClass",
        "deviceclasses",
        False,
        False,
    ),
    Kind("resource.nvidia.com", ("v1beta1",), "ComputeDomain", "computedomains", True, True, True),
    Kind("example.com", ("v1",), "Widget", "widgets", True, False, True),
)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Obj | None
    headers: dict[str, str]


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details


@dataclass
class FakeApiServer:
    """The API server's state and rules; :meth:`start` serves it over HTTP on 127.0.0.1."""

    token: str | None = None
    kinds: tuple[Kind, ...] = KINDS
    requests: list[Recorded] = field(default_factory=list)
    objects: dict[tuple[str, str, str, str], Obj] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rv = itertools.count(1)
        self._uid = itertools.count(1)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeApiServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                code, answer = fake.handle(
                    self.command, self.path, raw, {k.lower(): v for k, v in self.headers.items()}
                )
                data = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def calls(self, method: str | None = None) -> list[Recorded]:
        """Recorded requests, discovery included, optionally of one method."""
        return [r for r in self.requests if method is None or r.method == method]

    # -- HTTP --------------------------------------------------------------------------------
    def handle(
        self, method: str, target: str, raw: bytes, headers: dict[str, str]
    ) -> tuple[int, Obj]:
        parsed = urllib.parse.urlsplit(target)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        body = json.loads(raw) if raw else None
        with self._lock:
            self.requests.append(Recorded(method, parsed.path, query, body, headers))
        try:
            if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            with self._lock:
                return 200 if method != "POST" else 201, self._route(
                    method, parsed.path, query, body
                )
        except ApiError as exc:
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
            return exc.code, status

    def _route(self, method: str, path: str, query: dict[str, str], body: Obj | None) -> Obj:
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method")
            return self._discovery(group, version)
        namespace = ""
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        kind = next(
            (
                k
                for k in self.kinds
                if k.group == group and version in k.versions and k.plural == rest[0]
            ),
            None,
        )
        if kind is None or (namespace and not kind.namespaced):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        api_version = f"{group}/{version}" if group else version
        name = rest[1] if len(rest) >= 2 else None
        sub = rest[2] if len(rest) >= 3 else None
        if sub is not None and (sub != "status" or not kind.status):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if name is None:
            if method == "GET":
                return self._list(
                    kind, api_version, namespace or None, query.get("labelSelector", "")
                )
            if method == "POST":
                return self._create(kind, api_version, namespace, body or {})
        elif method == "GET":
            return self._out(kind, api_version, self._get(kind, namespace, name))
        elif method == "PUT":
            return self._update(kind, api_version, namespace, name, body or {}, sub == "status")
        elif method == "DELETE":
            return self._delete(kind, api_version, namespace, name)
        raise ApiError(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )

    # -- the registry rules ------------------------------------------------------------------
    def _discovery(self, group: str, version: str) -> Obj:
        served = [k for k in self.kinds if k.group == group and version in k.versions]
        if not served:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        resources: list[Obj] = []
        for k in served:
            verbs = ["create", "delete", "get", "list", "update", "watch"]
            resources.append(
                {"name": k.plural, "kind": k.kind, "namespaced": k.namespaced, "verbs": verbs}
            )
            if k.status:
                resources.append(
                    {
                        "name": f"{k.plural}/status",
                        "kind": k.kind,
                        "namespaced": k.namespaced,
                        "verbs": ["get", "update"],
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

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

    def _get(self, kind: Kind, namespace: str, name: str) -> Obj:
        obj = self.objects.get((kind.group, kind.plural, namespace, name))
        if obj is None:
            raise self._not_found(kind, name)
        return obj

    def _out(self, kind: Kind, api_version: str, obj: Obj) -> Obj:
        out = copy.deepcopy(obj)
        out["apiVersion"] = api_version
        out["kind"] = kind.kind
        return out

    def _list(self, kind: Kind, api_version: str, namespace: str | None, selector: str) -> Obj:
        items = []
        for (g, plural, ns, _), obj in sorted(self.objects.items()):
            if (
                g != kind.group
                or plural != kind.plural
                or (namespace is not None and ns != namespace)
            ):
                continue
            if not _selects(selector, (obj["metadata"].get("labels") or {})):
                continue
            item = self._out(kind, api_version, obj)
            if not kind.custom:
                del item["apiVersion"], item["kind"]
            items.append(item)
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": api_version,
            "metadata": {"resourceVersion": str(self._last_rv())},
            "items": items,
        }

    def _last_rv(self) -> int:
        return max(
            (int(o["metadata"]["resourceVersion"]) for o in self.objects.values()), default=0
        )

    def _create(self, kind: Kind, api_version: str, namespace: str, body: Obj) -> Obj:
        obj = copy.deepcopy(body)
        self._check_type(kind, api_version, obj)
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
        key = (kind.group, kind.plural, namespace if kind.namespaced else "", name)
        if key in self.objects:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{self._qualified(kind)} "{name}" already exists',
                self._details(kind, name),
            )
        for server_set in ("resourceVersion", "uid", "deletionTimestamp"):
            meta.pop(server_set, None)
        meta["uid"] = f"00000000-0000-4000-8000-{next(self._uid):012x}"
        meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
        meta["generation"] = 1
        if kind.status:
            obj.pop("status", None)
        meta["resourceVersion"] = str(next(self._rv))
        obj.pop("apiVersion", None)
        obj.pop("kind", None)
        self.objects[key] = obj
        return self._out(kind, api_version, obj)

    def _check_type(self, kind: Kind, api_version: str, obj: Obj) -> None:
        if (
            obj.get("kind", kind.kind) != kind.kind
            or obj.get("apiVersion", api_version).split("/")[0] != api_version.split("/")[0]
        ):
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({obj.get('apiVersion')}) does not match the "
                f"expected API version ({api_version})",
            )

    def _update(
        self, kind: Kind, api_version: str, namespace: str, name: str, body: Obj, status_only: bool
    ) -> Obj:
        self._check_type(kind, api_version, body)
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
        if rv is not None and rv != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {self._qualified(kind)} "{name}": '
                "the object has been modified; please apply your changes to the latest version "
                "and try again",
                self._details(kind, name),
            )
        new = copy.deepcopy(body)
        new.pop("apiVersion", None)
        new.pop("kind", None)
        if status_only:
            new = {**copy.deepcopy(current), "status": new.get("status")}
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
            ):
                if kept in current["metadata"]:
                    new_meta[kept] = current["metadata"][kept]
                else:
                    new_meta.pop(kept, None)
            if new.get("spec") != current.get("spec"):
                new_meta["generation"] = int(current["metadata"]["generation"]) + 1
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if new == current:
            return self._out(kind, api_version, current)
        key = (kind.group, kind.plural, namespace, name)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            del self.objects[key]
            return self._out(kind, api_version, new)
        new["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[key] = new
        return self._out(kind, api_version, new)

    def _delete(self, kind: Kind, api_version: str, namespace: str, name: str) -> Obj:
        current = self._get(kind, namespace, name)
        key = (kind.group, kind.plural, namespace, name)
        if current["metadata"].get("finalizers"):
            if "deletionTimestamp" not in current["metadata"]:
                current["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
                current["metadata"]["resourceVersion"] = str(next(self._rv))
            return self._out(kind, api_version, current)
        del self.objects[key]
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {**self._details(kind, name), "uid": current["metadata"]["uid"]},
        }


def _selects(selector: str, labels: dict[str, str]) -> bool:
    """The API server's label selector terms (not the set-based ``in``/``notin``)."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True
