"""What RBAC sees of a request: verb, API group, resource, subresource, namespace, name.

kube-apiserver decides these from the URL alone, before it knows whether the resource exists
(k8s.io/apiserver ``RequestInfoFactory``): a request for a kind the server does not serve is
still authorized first, so a client without the grant gets 403 where one with it gets 404.
The stand-in records requests this way, not from its own routing, so a request for an API the
test's server does not serve is still a request RBAC must allow. Reproduced: the ``api`` /
``apis`` prefixes, ``namespaces/<ns>/`` (and the namespace subresources ``status`` and
``finalize``), the ``watch``/``proxy`` path verbs, ``?watch=`` (any value but ``0``/``false``),
``deletecollection``, ``HEAD`` as ``get``, a list's or watch's ``metadata.name`` field selector
as its name, and ``PATCH /namespaces/<name>`` (a namespace server-side applied) in no
namespace. Checked against upstream's table (tests/rbac/data/requestinfo.yaml).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

_SPECIAL_VERBS = ("proxy", "watch")
_NAMESPACE_SUBRESOURCES = ("status", "finalize")
_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}


@dataclass(frozen=True)
class RequestInfo:
    """A request as an authorizer sees it; ``resource`` is empty for a non-resource URL
    (discovery, ``/version``), whose ``verb`` is then the lower-case HTTP method."""

    verb: str
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


def _name_from_field_selector(selector: str) -> str:
    """The name a valid field selector pins with ``metadata.name=`` (or ``==``); "" when it
    pins none or does not parse (upstream then drops the selector too)."""
    name = ""
    for term in (t for t in selector.split(",") if t):
        for op in ("!=", "==", "="):
            key, sep, value = term.partition(op)
            if sep:
                break
        else:
            return ""  # not a term: the whole selector is invalid
        if key.strip() == "metadata.name" and op != "!=":
            name = value.strip()
    if name in (".", "..") or "/" in name or "%" in name:
        return ""  # not a valid path segment
    return name


def request_info(method: str, path: str, query: Mapping[str, str] | None = None) -> RequestInfo:
    """Classify one request by its method, URL path and query (``query`` defaults to the
    path's own query string)."""
    split = urllib.parse.urlsplit(path)
    if query is None:
        query = dict(urllib.parse.parse_qsl(split.query))
    method = method.upper()
    plain = RequestInfo(method.lower())
    parts = [urllib.parse.unquote(p) for p in split.path.strip("/").split("/") if p]
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return plain
    group = ""
    rest = parts[1:]
    if parts[0] == "apis":
        if len(rest) < 3:
            return plain
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    if rest[0] in _SPECIAL_VERBS:
        if len(rest) < 2:
            return RequestInfo(rest[0], group, version)
        verb, rest = rest[0], rest[1:]
    else:
        verb = _VERBS.get(method, "")
    namespace = ""
    if rest[0] == "namespaces" and len(rest) == 2 and verb == "patch":
        pass  # server-side apply creating a namespace: PATCH /namespaces/<new> is no namespace's
    elif rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 and verb != "proxy" else ""
    if not name and verb == "get":
        watch = query.get("watch")
        verb = "list" if watch is None or watch.lower() in ("0", "false") else "watch"
    if not name and verb in ("list", "watch"):
        name = _name_from_field_selector(query.get("fieldSelector", ""))
    elif not name and verb == "delete":
        verb = "deletecollection"
    return RequestInfo(verb, group, version, resource, subresource, namespace, name)
