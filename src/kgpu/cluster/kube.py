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
- Errors: HTTP 404 -> :class:`NotFound`; 409 with Status reason ``AlreadyExists`` ->
  :class:`AlreadyExists`, any other 409 -> :class:`Conflict`; everything else ->
  :class:`KubeApiError` (a :class:`StoreError` carrying the Status reason, code and message).
- ``status``: the API server ignores ``status`` on writes to the main resource of kinds with a
  status subresource (ResourceClaims, ComputeDomains, Pods, Nodes...). So that ``create`` and
  ``update`` carry ``status`` the way the in-memory store does, a write whose ``status`` did not
  land is followed by ``PUT .../status`` with the new ``resourceVersion``.
- ``update`` without ``metadata.resourceVersion`` is unconditional, as in the in-memory store:
  the current version is read first, because the API server refuses unconditional updates of
  custom resources.
- ``apply`` = get, then update with the current ``resourceVersion`` or create; a concurrent
  writer that wins the race makes it retry (a few times) rather than fail.
- Writes send ``fieldManager=kgpu`` so ``managedFields`` name kgpu as the writer.
- ``list`` items get ``apiVersion``/``kind`` filled in (the API server leaves them out of list
  items of built-in kinds) so they are whole objects like everywhere else in kgpu.
"""

from __future__ import annotations

import json
import os
import queue
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.errors import FieldError, FieldProblem, KgpuError
from kgpu.store import (
    CLUSTER_SCOPED,
    AlreadyExists,
    Conflict,
    Gone,
    NotFound,
    Obj,
    ObjectList,
    StoreError,
    WatchEvent,
    group_of,
)

Query = list[tuple[str, str]]
Items = list[Obj]

#: The field manager kgpu's writes are recorded under in ``metadata.managedFields``.
FIELD_MANAGER = "kgpu"

#: How many times ``apply`` retries when another writer wins a race between its read and write.
APPLY_ATTEMPTS = 5


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


class KubeWatch:
    """One watch stream (``?watch=1``) read by a background thread: the API server sends one
    JSON event per line; an ``ERROR`` event with code 410 ends it with :class:`Gone`."""

    def __init__(self, response: Any, api_version: str, kind: str) -> None:
        self._response = response
        self._api_version = api_version
        self._kind = kind
        self._events: queue.Queue[WatchEvent | BaseException | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._read, name=f"watch-{kind}", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buf = b""
        try:
            for chunk in self._response.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        self._events.put(self._event(json.loads(line)))
        except BaseException as exc:  # a closed or broken stream ends the watch
            if not self._closed:
                self._events.put(exc if isinstance(exc, StoreError) else None)
                return
        self._events.put(None)

    def _event(self, raw: Obj) -> WatchEvent | BaseException:
        etype = str(raw.get("type", ""))
        obj = raw.get("object") or {}
        if etype == "ERROR":
            code = int(obj.get("code") or 0)
            message = str(obj.get("message") or "watch error")
            return Gone(message) if code == 410 else KubeApiError(message, "InternalError", code)
        obj.setdefault("apiVersion", self._api_version)
        obj.setdefault("kind", self._kind)
        return WatchEvent(etype, obj)  # type: ignore[arg-type]

    def next(self, timeout: float | None = None) -> WatchEvent | None:
        if self._closed and self._events.empty():
            return None
        try:
            item = self._events.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is None:
            self._closed = True
            return None
        if isinstance(item, BaseException):
            self._closed = True
            raise item
        return item

    def __iter__(self) -> Iterator[WatchEvent]:
        while True:
            event = self.next(None)
            if event is None:
                return
            yield event

    @property
    def closed(self) -> bool:
        return self._closed

    def stop(self) -> None:
        self._closed = True
        try:
            self._response.release_conn()
            self._response.close()
        except Exception:  # already closed
            pass


class KubeStore:
    """An :class:`~kgpu.store.ObjectStore` backed by a Kubernetes API server.

    Build it with :meth:`from_config` (kubeconfig or in-cluster service account), or hand it a
    ready ``kubernetes.client.ApiClient``. Thread-safe: the client's connection pool is, and the
    discovery cache is locked.
    """

    def __init__(
        self,
        api_client: Any,
        *,
        field_manager: str = FIELD_MANAGER,
        timeout: float = 30.0,
    ) -> None:
        self._api = api_client
        self._field_manager = field_manager
        self._timeout = timeout
        self._discovered: dict[tuple[str, str], Resource] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_config(
        cls,
        kubeconfig: str | None = None,
        *,
        context: str | None = None,
        field_manager: str = FIELD_MANAGER,
        timeout: float = 30.0,
    ) -> KubeStore:
        """Connect the way ``kubectl`` would.

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
        except (ConfigException, OSError, ValueError, TypeError) as exc:
            raise FieldError(
                FieldProblem(
                    f"cannot use it to reach a Kubernetes API server: {exc}",
                    path=f"contexts[{context}]" if context else "",
                    file=source,
                )
            ) from exc
        return cls(client.ApiClient(configuration), field_manager=field_manager, timeout=timeout)

    @property
    def host(self) -> str:
        """The API server's URL, for logs: which cluster the agent talks to."""
        return str(self._api.configuration.host)

    def close(self) -> None:
        """Release the client's connections and thread pool."""
        self._api.close()

    # -- the ObjectStore protocol ------------------------------------------------------------
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj:
        return self._request("GET", self._item_path(api_version, kind, name, namespace))

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> ObjectList:
        path = _collection_path(api_version, self._resource(api_version, kind), namespace)
        answer = self._request("GET", path, query=_selectors(labels, fields))
        items: Items = []
        for item in answer.get("items") or []:
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
            items.append(item)
        rv = str((answer.get("metadata") or {}).get("resourceVersion") or "")
        return ObjectList(items, rv)

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
        path = _collection_path(api_version, self._resource(api_version, kind), namespace)
        query = [("watch", "1"), *_selectors(labels, fields)]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        if bookmarks:
            query.append(("allowWatchBookmarks", "true"))
        response = self._send("GET", path, query=query, timeout=(self._timeout, None))
        status = int(response.status)
        if not 200 <= status < 300:
            data = response.read()
            try:
                answer = json.loads(data) if data else {}
            except ValueError:
                answer = {}
            if status == 410:
                raise Gone(str(answer.get("message") or "resource version too old"))
            raise _error("GET", path, status, answer if isinstance(answer, dict) else {}, data)
        return KubeWatch(response.response, api_version, kind)

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Obj,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Obj:
        path = self._item_path(api_version, kind, name, namespace)
        if subresource:
            path += f"/{subresource}"
        return self._request(
            "PATCH",
            path,
            query=self._write_query(),
            raw=json.dumps(patch).encode(),
            content_type="application/merge-patch+json",
        )

    def create(self, obj: Obj) -> Obj:
        api_version, _kind, resource, namespace, _ = self._locate(obj)
        path = _collection_path(api_version, resource, namespace)
        body = _body(obj, resource, namespace)
        created = self._request("POST", path, body=body, query=self._write_query())
        return self._carry_status(obj, created, resource)

    def update(self, obj: Obj) -> Obj:
        meta = obj.get("metadata") or {}
        if meta.get("resourceVersion") is None:
            return self._replace(obj, must_exist=True)
        return self._put(obj)

    def apply(self, obj: Obj) -> Obj:
        return self._replace(obj, must_exist=False)

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> None:
        self._request("DELETE", self._item_path(api_version, kind, name, namespace))

    # -- writes ------------------------------------------------------------------------------
    def _replace(self, obj: Obj, *, must_exist: bool) -> Obj:
        """Write ``obj`` whatever the current ``resourceVersion``: read it, then write with it."""
        api_version, kind, _, namespace, name = self._locate(obj)
        for attempt in range(APPLY_ATTEMPTS):
            last = attempt == APPLY_ATTEMPTS - 1
            try:
                current = self.get(api_version, kind, name, namespace)
            except NotFound:
                if must_exist:
                    raise
                try:
                    return self.create(obj)
                except AlreadyExists:
                    if last:
                        raise
                    continue
            meta = {
                **(obj.get("metadata") or {}),
                "resourceVersion": current["metadata"]["resourceVersion"],
            }
            try:
                return self._put({**obj, "metadata": meta})
            except (Conflict, NotFound):
                if last:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _put(self, obj: Obj) -> Obj:
        api_version, kind, resource, namespace, name = self._locate(obj)
        path = self._item_path(api_version, kind, name, namespace)
        body = _body(obj, resource, namespace)
        updated = self._request("PUT", path, body=body, query=self._write_query())
        return self._carry_status(obj, updated, resource)

    def _carry_status(self, wanted: Obj, written: Obj, resource: Resource) -> Obj:
        """Write ``status`` through the status subresource when the main write dropped it."""
        if not resource.has_status or "status" not in wanted:
            return written
        if written.get("status") == wanted["status"]:
            return written
        meta = written["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return written  # that write removed the object; there is no status to write
        api_version = str(written.get("apiVersion") or wanted["apiVersion"])
        kind = str(written.get("kind") or wanted["kind"])
        path = self._item_path(api_version, kind, meta["name"], meta.get("namespace")) + "/status"
        body = {**written, "status": wanted["status"]}
        return self._request("PUT", path, body=body, query=self._write_query())

    def _write_query(self) -> Query:
        return [("fieldManager", self._field_manager)]

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
        raw: bytes | None = None,
        content_type: str = "application/json",
        timeout: Any = None,
    ) -> Any:
        """The raw response (its body not read yet), or :class:`KubeApiError` when the server
        cannot be reached."""
        headers = {"Accept": "application/json"}
        if body is not None or raw is not None:
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
                body=raw if raw is not None else body,
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
        raw: bytes | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        response = self._send(
            method, path, query=query, body=body, raw=raw, content_type=content_type
        )
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
    return KubeApiError(text, reason or "InternalError", status)
