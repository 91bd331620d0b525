"""The :class:`~kgpu.store.ObjectStore` protocol against a real Kubernetes API server.

Why the official ``kubernetes`` client and not lightkube: its config loader already handles every
way a kubeconfig can authenticate (client certificates, static and exec-plugin tokens, OIDC) and
the in-cluster service-account token that the kubelet rotates, and its ``ApiClient`` gives raw
REST (``param_serialize`` + ``call_api``) with that authentication applied. kgpu's objects are
already wire-form dicts, so no generated model classes are used: every group/version/kind goes
through the same few URLs, including CRDs such as ``resource.nvidia.com/v1beta1``
ComputeDomains. The client is imported only when a store is built, so the agent pays nothing
for it when it runs without a cluster.

How the API server's rules map onto the store protocol:

- kind -> URL: a table of the kinds kgpu uses (plural, namespaced, status subresource), and API
  discovery (``GET /api/v1``, ``GET /apis/<group>/<version>``) for any other kind, cached.
- ``resource.k8s.io`` versions: kgpu's internal form is ``v1``; the first request of the group
  discovers what the server serves (``GET /apis/resource.k8s.io``) and the store speaks the
  newest of ``v1``, ``v1beta2``, ``v1beta1``, converting every object at this edge
  (:mod:`kgpu.dra.versions`). Kubernetes 1.32 (``v1beta1``) to 1.35 work unchanged.
- Lists are paginated (``limit``/``continue``); a continue token that expired mid-way (410)
  restarts the list in one piece, as client-go's pager does. Watches ask for bookmarks and a
  server-side timeout of 5-10 minutes (client-go's reflector), so an idle watch costs one
  request per several minutes.
- Writes: ``apply`` is server-side apply (``PATCH`` ``application/apply-patch+yaml``, field
  manager ``kgpu``, ``force``): one request, and fields other managers own stay theirs; ``patch``
  is a JSON merge patch (labels, annotations, status); ``create``/``update`` are POST/PUT. All
  send ``fieldManager`` and ``fieldValidation=Strict`` (a field the server does not know is an
  error, not silently dropped).
- Errors: HTTP 404 -> :class:`NotFound`; 409 with Status reason ``AlreadyExists`` ->
  :class:`AlreadyExists`, any other 409 -> :class:`Conflict`; 410 -> :class:`Gone`; 422 ->
  :class:`Invalid`; everything else -> :class:`KubeApiError` (a :class:`StoreError` carrying the
  Status reason, code and message).
- ``status``: the API server ignores ``status`` on writes to the main resource of kinds with a
  status subresource (ResourceClaims, ComputeDomains, Pods, Nodes...). So that writes carry
  ``status`` the way the in-memory store does, a write whose ``status`` did not land is followed
  by a write of ``.../status``.
- ``update`` without ``metadata.resourceVersion`` is unconditional, as in the in-memory store:
  the current version is read first, because the API server refuses unconditional updates of
  custom resources.
- A client-side rate limit (token bucket, client-go's 5 QPS / burst 10 by default) paces every
  request, watches included.
- ``list`` items get ``apiVersion``/``kind`` filled in (the API server leaves them out of list
  items of built-in kinds) so they are whole objects like everywhere else in kgpu.
"""

from __future__ import annotations

import json
import os
import random
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kgpu import __version__
from kgpu.cluster.ratelimit import DEFAULT_BURST, DEFAULT_QPS, TokenBucket
from kgpu.cluster.watch import KubeWatch
from kgpu.dra import versions as dra_versions
from kgpu.errors import FieldError, FieldProblem, KgpuError
from kgpu.store import (
    CLUSTER_SCOPED,
    AlreadyExists,
    Conflict,
    Gone,
    Invalid,
    NotFound,
    Obj,
    ObjectList,
    StoreError,
    group_of,
)

Query = list[tuple[str, str]]
APPLY_PATCH = "application/apply-patch+yaml"
Items = list[Obj]

#: The field manager kgpu's writes are recorded under in ``metadata.managedFields``.
FIELD_MANAGER = "kgpu"

#: How many times an unconditional ``update`` retries when another writer wins a race between
#: its read and its write.
UPDATE_ATTEMPTS = 5
#: Objects per page of a list (client-go's informers ask for 500).
PAGE_SIZE = 500
#: A watch asks the server to end it after this many seconds times (1 + a random fraction), as
#: client-go's reflector does, so idle watches renew rarely and not all at once.
MIN_WATCH_TIMEOUT_S = 300.0
#: Metadata the server sets: never part of an apply configuration.
_SERVER_METADATA = (
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
)


class KubeApiError(StoreError):
    """An API server answer that is neither 404 nor 409: forbidden, invalid, unavailable...

    ``reason`` and ``code`` come from the server's Status object (``Forbidden``/403,
    ``Invalid``/422, ...); ``code`` is 0 when the server could not be reached at all.
    """

    def __init__(self, message: str, reason: str = "InternalError", code: int = 0) -> None:
        super().__init__(message)
        self.reason = reason
        self.code = code


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the REST API."""

    plural: str
    namespaced: bool
    has_status: bool


#: (group, kind) -> resource, for the kinds kgpu reads and writes; other kinds use discovery.
KNOWN_RESOURCES: Mapping[tuple[str, str], Resource] = {
    ("", "Node"): Resource("nodes", False, True),
    ("", "Pod"): Resource("pods", True, True),
    ("", "Namespace"): Resource("namespaces", False, True),
    ("", "Event"): Resource("events", True, False),
    ("apps", "DaemonSet"): Resource("daemonsets", True, True),
    ("resource.k8s.io", "ResourceSlice"): Resource("resourceslices", False, False),
    ("resource.k8s.io", "ResourceClaim"): Resource("resourceclaims", True, True),
    ("resource.k8s.io", "ResourceClaimTemplate"): Resource("resourceclaimtemplates", True, False),
    ("resource.k8s.io", "DeviceClass"): Resource("deviceclasses", False, False),
    ("resource.nvidia.com", "ComputeDomain"): Resource("computedomains", True, True),
    ("resource.nvidia.com", "ComputeDomainClique"): Resource("computedomaincliques", True, False),
    ("coordination.k8s.io", "Lease"): Resource("leases", True, False),
}


def _base_path(api_version: str) -> str:
    return f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"


def _quote(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _collection_path(api_version: str, resource: Resource, namespace: str | None) -> str:
    """``.../<plural>`` of a kind: within one namespace for a namespaced kind given one, else
    across the cluster."""
    path = _base_path(api_version)
    if resource.namespaced and namespace is not None:
        path += f"/namespaces/{_quote(namespace)}"
    return f"{path}/{resource.plural}"


def _body(obj: Obj, resource: Resource, namespace: str) -> Obj:
    """What is sent for ``obj``: a namespaced object names its (defaulted) namespace."""
    if not resource.namespaced:
        return dict(obj)
    return {**obj, "metadata": {**(obj.get("metadata") or {}), "namespace": namespace}}


def _label_selector(labels: Mapping[str, str]) -> str:
    """Equality-based selector in the API's syntax: ``k1=v1,k2=v2`` (all must match)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _selectors(labels: Mapping[str, str] | None, fields: Mapping[str, str] | None) -> Query:
    query: Query = []
    if labels:
        query.append(("labelSelector", _label_selector(labels)))
    if fields:
        query.append(("fieldSelector", _label_selector(fields)))
    return query


def connection_problems(kubeconfig: Path | None, in_cluster: bool) -> list[FieldProblem]:
    """What is wrong with a process's ``--kubeconfig``/``--in-cluster`` choice, each problem
    naming its flag; [] when :meth:`KubeStore.from_config` can be tried. The agent and the
    controller take the same two flags and check them here, before any request."""
    if kubeconfig is not None and in_cluster:
        return [FieldProblem("give --kubeconfig or --in-cluster, not both", "--in-cluster")]
    if in_cluster and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return [
            FieldProblem(
                "not running in a pod (KUBERNETES_SERVICE_HOST is unset); use --kubeconfig",
                "--in-cluster",
            )
        ]
    if kubeconfig is not None and not kubeconfig.is_file():
        return [FieldProblem(f"{kubeconfig}: no such file", "--kubeconfig")]
    return []


class KubeStore:
    """An :class:`~kgpu.store.ObjectStore` backed by a Kubernetes API server.

    Build it with :meth:`from_config` (kubeconfig or in-cluster service account), or hand it a
    ready ``kubernetes.client.ApiClient``. ``qps``/``burst`` set the client-side rate limit
    (None: unlimited), ``page_size`` the list page, ``user_agent`` names the process to the
    server (its audit log, and RBAC tests). Thread-safe: the client's connection pool is, and
    the discovery caches are locked.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        field_manager: str = FIELD_MANAGER,
        timeout: float = 30.0,
        qps: float | None = DEFAULT_QPS,
        burst: int = DEFAULT_BURST,
        page_size: int = PAGE_SIZE,
        user_agent: str | None = None,
        min_watch_timeout_s: float = MIN_WATCH_TIMEOUT_S,
    ) -> None:
        self._api = api_client
        self._field_manager = field_manager
        self._timeout = timeout
        self._limiter = TokenBucket(qps, burst) if qps is not None else None
        self._page_size = page_size
        self._min_watch_timeout_s = min_watch_timeout_s
        self._discovered: dict[tuple[str, str], Resource] = {}
        self._dra_version: str | None = None
        self._lock = threading.Lock()
        self._api.user_agent = user_agent or f"kgpu/{__version__}"

    @classmethod
    def from_config(
        cls,
        kubeconfig: str | None = None,
        *,
        context: str | None = None,
        **options: Any,
    ) -> KubeStore:
        """Connect the way ``kubectl`` would; ``options`` are the constructor's.

        ``kubeconfig`` names a kubeconfig file. Without one: the pod's service account when
        running in a cluster (``KUBERNETES_SERVICE_HOST`` set), else ``$KUBECONFIG`` or
        ``~/.kube/config``. A file that cannot be used is a :class:`FieldError` naming it.
        """
        try:
            from kubernetes import client
            from kubernetes import config as kube_config
            from kubernetes.config.config_exception import ConfigException
        except ImportError as exc:  # the client is needed only to talk to a real cluster
            raise KgpuError(
                "talking to a Kubernetes API server needs the 'kubernetes' package: "
                "pip install 'kubernetes>=30'"
            ) from exc

        config: Any = kube_config  # untyped package

        import yaml

        configuration = client.Configuration()
        source = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        try:
            if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
                source = "in-cluster service account"
                config.load_incluster_config(client_configuration=configuration)
            else:
                config.load_kube_config(
                    config_file=kubeconfig,
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
        # the client's loader is untyped: a malformed file surfaces as any of these (a YAML
        # syntax error, `context: 7` as AttributeError); each is the file's fault, said once
        except (
            ConfigException,
            OSError,
            ValueError,
            TypeError,
            AttributeError,
            KeyError,
            yaml.YAMLError,
        ) as exc:
            raise FieldError(
                FieldProblem(
                    f"cannot use it to reach a Kubernetes API server: {exc}",
                    path=f"contexts[{context}]" if context else "",
                    file=source,
                )
            ) from exc
        return cls(client.ApiClient(configuration), **options)

    @property
    def host(self) -> str:
        """The API server's URL, for logs: which cluster the agent talks to."""
        return str(self._api.configuration.host)

    @property
    def throttled_s(self) -> float:
        """Total time requests waited for the client-side rate limit."""
        return self._limiter.waited_s if self._limiter is not None else 0.0

    def close(self) -> None:
        """Release the client's connections and thread pool."""
        self._api.close()

    def server_version(self) -> str:
        """The API server's ``gitVersion`` (``v1.35.2``), from ``GET /version`` (readable by
        every client, no RBAC rule needed); "" when it does not say."""
        return str(self._request("GET", "/version").get("gitVersion") or "")

    # -- resource.k8s.io versions ------------------------------------------------------------
    def resource_api_version(self) -> str:
        """The ``resource.k8s.io`` version this server is spoken to in (discovered once):
        the newest of v1, v1beta2, v1beta1 it serves. A :class:`KubeApiError` when it serves
        none of them (DRA off, or Kubernetes older than 1.32)."""
        with self._lock:
            if self._dra_version is not None:
                return self._dra_version
        group = dra_versions.GROUP
        try:
            answer = self._request("GET", f"/apis/{group}")
        except NotFound:
            answer = {}
        served = [str(v.get("version")) for v in answer.get("versions") or []]
        version = dra_versions.newest(served)
        if version is None:
            raise KubeApiError(
                f"the API server serves {group} {', '.join(served) or 'in no version'}; kgpu "
                f"speaks {', '.join(dra_versions.VERSIONS)}: Kubernetes 1.32 or newer with "
                "dynamic resource allocation enabled (on by default from 1.34)",
                "NotFound",
                404,
            )
        with self._lock:
            self._dra_version = version
        return version

    def _edge(self, api_version: str) -> str:
        """The apiVersion on the wire for a caller's one (internal v1 -> the served one)."""
        if api_version != dra_versions.INTERNAL_API_VERSION:
            return api_version
        return f"{dra_versions.GROUP}/{self.resource_api_version()}"

    @staticmethod
    def _to_wire(obj: Obj, wire: str, kind: str) -> Obj:
        if wire == obj.get("apiVersion", wire) or group_of(wire) != dra_versions.GROUP:
            return {**obj, "apiVersion": wire} if "apiVersion" in obj else dict(obj)
        return dra_versions.to_version(obj, wire.rsplit("/", 1)[1], kind)

    @staticmethod
    def _from_wire(obj: Obj, api_version: str, wire: str, kind: str) -> Obj:
        """A served object in the caller's form: apiVersion/kind filled in, converted back."""
        obj.setdefault("apiVersion", wire)
        obj.setdefault("kind", kind)
        if wire != api_version and obj.get("apiVersion") == wire:
            obj = dra_versions.to_internal(obj, wire, kind)
        return obj

    # -- the ObjectStore protocol ------------------------------------------------------------
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        wire = self._edge(api_version)
        answer = self._request("GET", self._item_path(wire, kind, name, namespace))
        return self._from_wire(answer, api_version, wire, kind)

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> ObjectList:
        wire = self._edge(api_version)
        path = _collection_path(wire, self._resource(wire, kind), namespace)
        selectors = _selectors(labels, fields)
        items: Items = []
        rv = ""
        token = ""
        while True:
            query = [*selectors, ("limit", str(self._page_size))]
            if token:
                query.append(("continue", token))
            try:
                answer = self._request("GET", path, query=query)
            except Gone:
                if not token:
                    raise
                # the snapshot expired between pages: take the list again in one piece
                items, token = [], ""
                answer = self._request("GET", path, query=selectors)
            meta = answer.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion") or "")
            items.extend(answer.get("items") or [])
            token = str(meta.get("continue") or "")
            if not token:
                break
        out = [self._from_wire(item, api_version, wire, kind) for item in items]
        return ObjectList(out, rv)

    def watch(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        resource_version: str | None = None,
        bookmarks: bool = False,
    ) -> KubeWatch:
        wire = self._edge(api_version)
        path = _collection_path(wire, self._resource(wire, kind), namespace)
        seconds = int(self._min_watch_timeout_s * (1.0 + random.random()))
        query = [("watch", "1"), *_selectors(labels, fields), ("timeoutSeconds", str(seconds))]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        # read timeout: the server ends the stream at `seconds`; a silent dead connection
        # must not hang the watch forever
        response = self._send("GET", path, query=query, timeout=(self._timeout, seconds + 30))
        status = int(response.status)
        if not 200 <= status < 300:
            data = response.read()
            try:
                answer = json.loads(data) if data else {}
            except ValueError:
                answer = {}
            raise _error("GET", path, status, answer if isinstance(answer, dict) else {}, data)

        def convert(obj: Obj) -> Obj:
            return self._from_wire(obj, api_version, wire, kind)

        return KubeWatch(response.response, convert, name=kind)

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        wire = self._edge(api_version)
        path = self._item_path(wire, kind, name, namespace)
        if subresource:
            path += f"/{subresource}"
        body = patch
        if wire != api_version and group_of(wire) == dra_versions.GROUP:
            body = dra_versions.to_version(patch, wire.rsplit("/", 1)[1], kind)
        answer = self._request(
            "PATCH",
            path,
            query=self._write_query(),
            body=body,
            content_type="application/merge-patch+json",
        )
        return self._from_wire(answer, api_version, wire, kind)

    def create(self, obj: Obj) -> Obj:
        api_version, kind, resource, namespace, _ = self._locate(obj)
        wire = self._edge(api_version)
        body = _body(self._to_wire(obj, wire, kind), resource, namespace)
        path = _collection_path(wire, resource, namespace)
        created = self._request("POST", path, body=body, query=self._write_query())
        written = self._carry_status(body, created, resource, wire, kind)
        return self._from_wire(written, api_version, wire, kind)

    def update(self, obj: Obj) -> Obj:
        meta = obj.get("metadata") or {}
        if meta.get("resourceVersion") is None:
            return self._unconditional(obj)
        return self._put(obj)

    def apply(self, obj: Obj) -> Obj:
        """Server-side apply with field manager ``kgpu`` (forced): creates the object or sets
        the fields ``obj`` has, whatever its ``resourceVersion``; fields kgpu applied before
        and ``obj`` lacks are removed, fields other managers own are kept."""
        api_version, kind, resource, namespace, name = self._locate(obj)
        wire = self._edge(api_version)
        config = _body(self._to_wire(obj, wire, kind), resource, namespace)
        meta = {k: v for k, v in (config.get("metadata") or {}).items()}
        for server_set in _SERVER_METADATA:
            meta.pop(server_set, None)
        config["metadata"] = meta
        status = config.pop("status", None) if resource.has_status else None
        path = self._item_path(wire, kind, name, namespace)
        query = [*self._write_query(), ("force", "true")]
        applied = self._request("PATCH", path, query=query, body=config, content_type=APPLY_PATCH)
        if status is not None and applied.get("status") != status:
            ident = {k: meta[k] for k in ("name", "namespace") if k in meta}
            body = {"apiVersion": wire, "kind": kind, "metadata": ident, "status": status}
            applied = self._request(
                "PATCH", path + "/status", query=query, body=body, content_type=APPLY_PATCH
            )
        return self._from_wire(applied, api_version, wire, kind)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        wire = self._edge(api_version)
        self._request("DELETE", self._item_path(wire, kind, name, namespace))

    # -- writes ------------------------------------------------------------------------------
    def _unconditional(self, obj: Obj) -> Obj:
        """Update ``obj`` whatever the current ``resourceVersion``: read it, then PUT with it."""
        api_version, kind, _, namespace, name = self._locate(obj)
        for attempt in range(UPDATE_ATTEMPTS):
            current = self.get(api_version, kind, name, namespace)
            meta = {
                **(obj.get("metadata") or {}),
                "resourceVersion": current["metadata"]["resourceVersion"],
            }
            try:
                return self._put({**obj, "metadata": meta})
            except Conflict:
                if attempt == UPDATE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _put(self, obj: Obj) -> Obj:
        api_version, kind, resource, namespace, name = self._locate(obj)
        wire = self._edge(api_version)
        path = self._item_path(wire, kind, name, namespace)
        body = _body(self._to_wire(obj, wire, kind), resource, namespace)
        updated = self._request("PUT", path, body=body, query=self._write_query())
        written = self._carry_status(body, updated, resource, wire, kind)
        return self._from_wire(written, api_version, wire, kind)

    def _carry_status(
        self, wanted: Obj, written: Obj, resource: Resource, wire: str, kind: str
    ) -> Obj:
        """Write ``status`` through the status subresource when the main write dropped it
        (both in wire form)."""
        if not resource.has_status or "status" not in wanted:
            return written
        if written.get("status") == wanted["status"]:
            return written
        meta = written["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return written  # that write removed the object; there is no status to write
        path = self._item_path(wire, kind, meta["name"], meta.get("namespace")) + "/status"
        body = {**written, "apiVersion": wire, "kind": kind, "status": wanted["status"]}
        return self._request("PUT", path, body=body, query=self._write_query())

    def _write_query(self) -> Query:
        return [("fieldManager", self._field_manager), ("fieldValidation", "Strict")]

    # -- addressing --------------------------------------------------------------------------
    def _locate(self, obj: Obj) -> tuple[str, str, Resource, str, str]:
        """(apiVersion, kind, resource, namespace, name) of a wire-form object."""
        api_version = str(obj.get("apiVersion") or "")
        kind = str(obj.get("kind") or "")
        if not api_version or not kind:
            raise KubeApiError("object has no apiVersion or kind", "BadRequest", 400)
        resource = self._resource(api_version, kind)
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default") if resource.namespaced else ""
        return api_version, kind, resource, namespace, str(meta.get("name") or "")

    def _item_path(self, api_version: str, kind: str, name: str, namespace: str | None) -> str:
        resource = self._resource(api_version, kind)
        return f"{_collection_path(api_version, resource, namespace or 'default')}/{_quote(name)}"

    def _resource(self, api_version: str, kind: str) -> Resource:
        known = KNOWN_RESOURCES.get((group_of(api_version), kind))
        if known is not None:
            return known
        with self._lock:
            found = self._discovered.get((api_version, kind))
        if found is not None:
            return found
        listing = self._request("GET", _base_path(api_version))
        names = {str(r.get("name", "")) for r in listing.get("resources") or []}
        discovered: dict[tuple[str, str], Resource] = {}
        for entry in listing.get("resources") or []:
            plural = str(entry.get("name", ""))
            if "/" in plural:
                continue
            discovered[(api_version, str(entry.get("kind", "")))] = Resource(
                plural,
                bool(entry.get("namespaced", kind not in CLUSTER_SCOPED)),
                f"{plural}/status" in names,
            )
        with self._lock:
            self._discovered.update(discovered)
        if (api_version, kind) not in discovered:
            raise KubeApiError(
                f"the API server does not serve kind {kind!r} in {api_version}", "NotFound", 404
            )
        return discovered[(api_version, kind)]

    # -- transport ---------------------------------------------------------------------------
    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Obj | None = None,
        content_type: str = "application/json",
        timeout: Any = None,
    ) -> Any:
        """The raw response (its body not read yet), or :class:`KubeApiError` when the server
        cannot be reached. Waits for the rate limit first."""
        if self._limiter is not None:
            self._limiter.acquire()
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        method, url, headers, body, _ = self._api.param_serialize(
            method,
            path,
            query_params=query or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            return self._api.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                _request_timeout=timeout if timeout is not None else self._timeout,
            )
        except Exception as exc:  # urllib3 and ApiException(status=0): no answer at all
            if isinstance(exc, StoreError):
                raise
            raise KubeApiError(
                f"{method} {path}: cannot reach the API server: {exc}", "ServiceUnavailable", 0
            ) from exc

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Obj | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        response = self._send(method, path, query=query, body=body, content_type=content_type)
        try:
            data = response.read()
        except Exception as exc:  # the connection broke while the answer was read
            raise KubeApiError(
                f"{method} {path}: cannot reach the API server: {exc}", "ServiceUnavailable", 0
            ) from exc
        try:
            decoded: Any = json.loads(data) if data else {}
        except ValueError:
            decoded = {}
        answer: Obj = decoded if isinstance(decoded, dict) else {}
        status = int(response.status)
        if 200 <= status < 300:
            return answer
        raise _error(method, path, status, answer, data)


def _error(method: str, path: str, status: int, answer: Obj, data: bytes) -> StoreError:
    """The store error for a failed request, from the Status object the API server returned."""
    reason = str(answer.get("reason") or "")
    message = str(answer.get("message") or data.decode("utf-8", "replace").strip())
    text = message or f"{method} {path}: HTTP {status}"
    if status == 404:
        return NotFound(text)
    if status == 409:
        return AlreadyExists(text) if reason == "AlreadyExists" else Conflict(text)
    if status == 410:
        return Gone(text)
    if status == 422:
        return Invalid(text)
    return KubeApiError(text, reason or "InternalError", status)
