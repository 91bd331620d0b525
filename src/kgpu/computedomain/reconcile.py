"""The ComputeDomain controller's decisions and writes, one domain at a time.

:func:`sync_domain` brings one domain's owned objects, node labels, ComputeDomainCliques and
status to what the domain asks for; it reads the cluster through a :class:`ClusterView` (the
``kgpu controller`` process answers from its informers' indexes, the simulator from one list of
each kind per pass, :class:`StoreView`), so a domain costs what it owns, not the whole
cluster. It is level-triggered and stateless (everything it needs is in the view), so running
it once or a hundred times gives the same result, and a crash between two writes is repaired
by the next sync. Per domain:

- add the finalizer; create the workload channel claim template, the daemon claim template and
  the IMEX DaemonSet (:mod:`kgpu.computedomain.objects`), repairing drift;
- drop the domain's label from failed nodes so their daemons go;
- list the daemons (one per daemon pod: node, pod IP or else the node's address, clique,
  stable per-clique index, Ready when the pod runs Ready on a healthy node) in one
  ComputeDomainClique per clique, named ``<uid>.<cliqueID>``, as upstream;
- compute ``status`` from them (Ready when every daemon is Ready, they share one clique, and
  there are at least ``numNodes`` of them, at least one when ``numNodes`` is 0), with kgpu's
  ``Ready`` condition saying why not, including why pending pods have no room;
- on delete remove everything the domain owns, then the finalizer.

Writes are patches of what changed: status through the status subresource, the finalizer with
a ``resourceVersion`` precondition, node labels as merge patches of one key; nothing is written
when nothing changed. :func:`reconcile` is one pass over every domain (the simulator's
controller loop).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kgpu.computedomain.api import (
    API_VERSION,
    CLIQUE_KIND,
    DOMAIN_LABEL,
    FINALIZER,
    KIND,
    ComputeDomain,
    DomainNode,
    node_label,
    parse_compute_domain,
)
from kgpu.computedomain.members import pending_pods
from kgpu.computedomain.objects import (
    DAEMON_IMAGE,
    DRIVER_NAMESPACE,
    channel_claim_template,
    clique_object,
    covers,
    daemon_claim_template,
    daemon_set,
)
from kgpu.computedomain.placement import node_healthy
from kgpu.computedomain.status import (
    DomainStatus,
    daemon_entries,
    decide_status,
    domain_status,
    pending_reason,
    previous_daemons,
)
from kgpu.computedomain.view import CLIQUE, OWNED, ClusterView, StoreView
from kgpu.errors import FieldError
from kgpu.store import AlreadyExists, Conflict, NotFound, ObjectStore

Obj = dict[str, Any]

__all__ = [
    "ClusterView",
    "DomainEvent",
    "DomainStatus",
    "StoreView",
    "SyncResult",
    "domain_status",
    "reconcile",
    "remove_owned",
    "sync_domain",
]


@dataclass(frozen=True)
class DomainEvent:
    """An event about a domain or one of its nodes (``type`` Normal|Warning)."""

    type: str
    reason: str
    object: str
    message: str


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def _status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> Obj:
    """A merge patch turning ``old`` status into ``new``: keys ``new`` lacks are removed."""
    patch: Obj = {k: None for k in old if k not in new}
    patch.update(new)
    return patch


# -- writes -------------------------------------------------------------------------------------


def _ref(domain: ComputeDomain) -> str:
    return f"ComputeDomain/{domain.ref}"


def _ensure(
    store: ObjectStore, desired: Obj, uid: str, existing: Sequence[Obj], ref: str
) -> list[DomainEvent]:
    """Create ``desired`` or repair what differs: a DaemonSet by a merge patch; a claim
    template (whose spec the API server keeps immutable) by deleting and creating it."""
    api, kind = desired["apiVersion"], desired["kind"]
    meta = desired["metadata"]
    current = next(
        (
            o
            for o in existing
            if _meta(o).get("name") == meta["name"]
            and (_meta(o).get("namespace") or "default") == meta["namespace"]
        ),
        None,
    )
    if current is None:
        try:
            store.create(desired)
        except AlreadyExists:
            try:
                current = store.get(api, kind, meta["name"], meta["namespace"])
            except NotFound:
                return []
        else:
            return [
                DomainEvent(
                    "Normal", "Created", ref, f"created {kind} {meta['namespace']}/{meta['name']}"
                )
            ]
    if _labels(current).get(DOMAIN_LABEL) != uid:
        return [
            DomainEvent(
                "Warning",
                "NameConflict",
                ref,
                f"{kind} {meta['namespace']}/{meta['name']} exists and does not belong to this "
                "ComputeDomain; it was left alone",
            )
        ]
    if covers(current.get("spec"), desired.get("spec")) and covers(
        _labels(current), meta["labels"]
    ):
        return []
    if kind == "ResourceClaimTemplate":
        with contextlib.suppress(NotFound):
            store.delete(api, kind, meta["name"], meta["namespace"])
        with contextlib.suppress(AlreadyExists):
            store.create(desired)
    else:
        store.patch(
            api,
            kind,
            meta["name"],
            {"metadata": {"labels": meta["labels"]}, "spec": desired["spec"]},
            meta["namespace"],
        )
    return [
        DomainEvent(
            "Normal", "Repaired", ref, f"{kind} {meta['namespace']}/{meta['name']} was restored"
        )
    ]


def drop_node_label(store: ObjectStore, node_name: str, key: str) -> None:
    """Remove one label from a Node: a merge patch of that key alone, no read first."""
    with contextlib.suppress(NotFound):
        store.patch("v1", "Node", node_name, {"metadata": {"labels": {key: None}}})


def _set_finalizers(store: ObjectStore, raw: Obj, finalizers: list[str]) -> Obj:
    meta = _meta(raw)
    return store.patch(
        API_VERSION,
        KIND,
        str(meta.get("name")),
        {"metadata": {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}},
        str(meta.get("namespace") or "default"),
    )


@dataclass
class SyncResult:
    """What one domain sync did: events, and whether pods of it wait for room (the caller
    then re-syncs the domain when room may have appeared)."""

    events: list[DomainEvent] = field(default_factory=list)
    waiting: bool = False
    #: the ComputeDomain as this sync last wrote it (None: not written), newer than what a
    #: watch may have delivered yet
    domain: Obj | None = None


def sync_domain(
    store: ObjectStore,
    raw: Obj,
    view: ClusterView,
    namespace: str = DRIVER_NAMESPACE,
    daemon_image: str = DAEMON_IMAGE,
) -> SyncResult:
    """Bring one domain (its stored object ``raw``) to what it asks for; its IMEX DaemonSet
    runs ``daemon_image``. Raises the store's errors (:class:`Conflict` when someone wrote in
    between): the caller retries later."""
    result = SyncResult()
    meta = _meta(raw)
    try:
        domain = parse_compute_domain(raw)
    except FieldError as exc:
        ref = f"ComputeDomain/{meta.get('namespace', 'default')}/{meta.get('name')}"
        result.events.append(DomainEvent("Warning", "InvalidSpec", ref, str(exc)))
        return result
    if domain.deleting:
        result.events += _cleanup(store, domain, raw, view, namespace)
        return result
    ref = _ref(domain)
    if FINALIZER not in domain.finalizers:
        raw = result.domain = _set_finalizers(store, raw, [*domain.finalizers, FINALIZER])
    for desired in (
        channel_claim_template(domain),
        daemon_claim_template(domain, namespace),
        daemon_set(domain, namespace, daemon_image),
    ):
        api, kind = desired["apiVersion"], desired["kind"]
        result.events += _ensure(store, desired, domain.uid, view.owned(api, kind, domain.uid), ref)

    # A failed node keeps no daemon of the domain: dropping its label lets the DaemonSet go.
    key = node_label(domain.uid)
    for name in sorted(view.labelled_nodes(domain.uid)):
        if not node_healthy(view.node(name)):
            drop_node_label(store, name, key)
            result.events.append(
                DomainEvent(
                    "Warning",
                    "NodeNotReady",
                    ref,
                    f"node {name} is NotReady; its IMEX daemon leaves the domain",
                )
            )

    cliques = view.owned(*CLIQUE, domain.uid)
    listed, failed = daemon_entries(
        view.daemon_pods(domain.uid), view.node, previous_daemons(domain, cliques)
    )
    _write_cliques(store, domain, listed, cliques, namespace)

    reason = pending_reason(domain, view)
    result.waiting = bool(pending_pods(domain, view.workload_pods(domain)))
    status = decide_status(domain, listed, failed, reason)
    new = status.to_obj()
    old = raw.get("status") or {}
    if new != old:
        result.domain = store.patch(
            API_VERSION,
            KIND,
            domain.name,
            {"status": _status_patch(old, new)},
            domain.namespace,
            subresource="status",
        )
        if old.get("status") != new["status"]:
            if new["status"] == "Ready":
                result.events.append(
                    DomainEvent("Normal", "ComputeDomainReady", ref, status.message)
                )
            elif old.get("status") == "Ready":
                result.events.append(
                    DomainEvent("Warning", "ComputeDomainNotReady", ref, status.message)
                )
        old_message = ((old.get("conditions") or [{}])[0]).get("message")
        if status.reason == "Unschedulable" and old_message != status.message:
            result.events.append(DomainEvent("Warning", "NoRoomInClique", ref, status.message))
    return result


def _write_cliques(
    store: ObjectStore,
    domain: ComputeDomain,
    listed: Sequence[DomainNode],
    existing: Sequence[Obj],
    namespace: str,
) -> None:
    """One ComputeDomainClique per clique holding the domain's daemons there; cliques left
    without daemons are deleted."""
    by_clique: dict[str, list[DomainNode]] = {}
    for entry in listed:
        if entry.clique_id:
            by_clique.setdefault(entry.clique_id, []).append(entry)
    current = {str(_meta(o).get("name")): o for o in existing}
    wanted = {
        obj["metadata"]["name"]: obj
        for obj in (clique_object(domain, c, d, namespace) for c, d in sorted(by_clique.items()))
    }
    for name, obj in wanted.items():
        have = current.get(name)
        if have is None:
            try:
                store.create(obj)
            except AlreadyExists:
                store.patch(API_VERSION, CLIQUE_KIND, name, {"daemons": obj["daemons"]}, namespace)
        elif have.get("daemons") != obj["daemons"] or not covers(
            _labels(have), obj["metadata"]["labels"]
        ):
            store.patch(
                API_VERSION,
                CLIQUE_KIND,
                name,
                {"metadata": {"labels": obj["metadata"]["labels"]}, "daemons": obj["daemons"]},
                namespace,
            )
    for name, obj in current.items():
        if name not in wanted:
            _delete_quietly(store, API_VERSION, CLIQUE_KIND, name, _meta(obj).get("namespace"))


def _delete_quietly(store: ObjectStore, api: str, kind: str, name: str, ns: str | None) -> bool:
    try:
        store.delete(api, kind, name, ns)
    except NotFound:
        return False
    return True


def _cleanup(
    store: ObjectStore, domain: ComputeDomain, raw: Obj, view: ClusterView, namespace: str
) -> list[DomainEvent]:
    removed = remove_owned(store, domain.uid, view, namespace)
    if FINALIZER in domain.finalizers:
        with contextlib.suppress(NotFound):
            _set_finalizers(store, raw, [f for f in domain.finalizers if f != FINALIZER])
    return [
        DomainEvent(
            "Normal",
            "Deleted",
            _ref(domain),
            f"removed {removed} object(s) and node label(s) the domain owned",
        )
    ]


def remove_owned(store: ObjectStore, uid: str, view: ClusterView, namespace: str) -> int:
    """Delete every object labelled for the domain, its daemon pods (what garbage collection
    of the DaemonSet would do) and its node labels; how many went."""
    removed = 0
    for api, kind in OWNED:
        for obj in view.owned(api, kind, uid):
            m = _meta(obj)
            removed += _delete_quietly(store, api, kind, str(m.get("name")), m.get("namespace"))
    for pod in view.daemon_pods(uid):
        removed += _delete_quietly(store, "v1", "Pod", str(_meta(pod).get("name")), namespace)
    key = node_label(uid)
    for name in view.labelled_nodes(uid):
        drop_node_label(store, name, key)
        removed += 1
    return removed


# -- the simulator's full pass ----------------------------------------------------------------


def reconcile(store: ObjectStore, *, namespace: str = DRIVER_NAMESPACE) -> list[DomainEvent]:
    """One pass over every ComputeDomain in the store: one list of each kind, then
    :func:`sync_domain` per domain and the removal of orphans (objects and node labels of
    domains deleted while no controller ran). Returns what happened as events."""
    events: list[DomainEvent] = []
    domains = store.list(API_VERSION, KIND)
    view = StoreView(store, namespace)
    if not domains and not view.owner_uids():
        return events
    live: set[str] = set()
    for raw in domains:
        uid = str(_meta(raw).get("uid") or "")
        live.add(uid)
        try:
            events += sync_domain(store, raw, view, namespace).events
        except Conflict:
            continue  # someone wrote in between: the next pass sees the newer object
    for uid in sorted(view.owner_uids() - live):
        remove_owned(store, uid, view, namespace)
    return events
