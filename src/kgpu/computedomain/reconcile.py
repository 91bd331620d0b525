"""The ComputeDomain controller: one pass over the object store brings every domain's owned
objects, node labels and status to what the domain asks for.

It is level-triggered and stateless (everything it needs is in the store), so running it once
or a hundred times gives the same result, and a crash between two writes is repaired by the
next pass. Per domain: add the finalizer; create the workload channel claim template, the
daemon claim template and the IMEX DaemonSet (:mod:`kgpu.computedomain.objects`); drop the
domain's label from failed nodes so their daemons go; compute ``status`` from the daemon pods
(Ready when ``numNodes`` daemons run Ready in one clique); and on delete remove everything the
domain owns, then the finalizer. The decisions are pure functions (:func:`domain_status`,
:func:`kgpu.computedomain.placement.place`); :func:`reconcile` only reads and writes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kgpu.computedomain.api import (
    API_VERSION,
    DOMAIN_LABEL,
    FINALIZER,
    KIND,
    ComputeDomain,
    DomainNode,
    node_label,
    parse_compute_domain,
)
from kgpu.computedomain.imex import node_ip
from kgpu.computedomain.objects import (
    DRIVER_NAMESPACE,
    channel_claim_template,
    daemon_claim_template,
    daemon_set,
)
from kgpu.computedomain.placement import node_clique, node_healthy, place, room_view
from kgpu.dra.api import RESOURCE_API
from kgpu.errors import FieldError
from kgpu.store import AlreadyExists, Conflict, NotFound, ObjectStore

Obj = dict[str, Any]
RCT = (RESOURCE_API, "ResourceClaimTemplate")
DS = ("apps/v1", "DaemonSet")


@dataclass(frozen=True)
class DomainEvent:
    """An event about a domain or one of its nodes (``type`` Normal|Warning)."""

    type: str
    reason: str
    object: str
    message: str


@dataclass(frozen=True)
class DomainStatus:
    status: str
    nodes: tuple[DomainNode, ...]
    reason: str
    message: str

    def to_obj(self) -> Obj:
        return {
            "status": self.status,
            "nodes": [n.to_obj() for n in self.nodes],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if self.status == "Ready" else "False",
                    "reason": self.reason,
                    "message": self.message,
                }
            ],
        }


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def pod_domain_templates(pod: Mapping[str, Any]) -> list[str]:
    """Names of the claim templates a pod references."""
    return [
        str(rc["resourceClaimTemplateName"])
        for rc in (pod.get("spec") or {}).get("resourceClaims") or []
        if rc.get("resourceClaimTemplateName")
    ]


def workload_pods(domain: ComputeDomain, pods: Sequence[Mapping[str, Any]]) -> list[Obj]:
    """Pods that hold the domain's channel claim (through its claim template)."""
    return [
        dict(p)
        for p in pods
        if (_meta(p).get("namespace") or "default") == domain.namespace
        and domain.spec.channel_template in pod_domain_templates(p)
        and not _meta(p).get("deletionTimestamp")
    ]


def _assign_indexes(
    entries: list[tuple[str, str, str, str]], previous: Mapping[str, Mapping[str, Any]]
) -> list[DomainNode]:
    """Stable per-clique indexes: a node keeps its index; newcomers take the lowest free one."""
    taken: dict[str, set[int]] = {}
    index: dict[str, int] = {}
    for name, _ip, clique, _st in entries:
        prev = previous.get(name)
        used = taken.setdefault(clique, set())
        if (
            prev
            and prev.get("cliqueID") == clique
            and isinstance(prev.get("index"), int)
            and prev["index"] not in used
        ):
            index[name] = int(prev["index"])
            used.add(index[name])
    out = []
    for name, ip, clique, st in entries:
        if name not in index:
            used = taken.setdefault(clique, set())
            i = 0
            while i in used:
                i += 1
            used.add(i)
            index[name] = i
        out.append(DomainNode(name, ip, clique, index[name], st))
    return out


def domain_status(
    domain: ComputeDomain,
    daemon_pods: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    pending_reason: str | None = None,
) -> DomainStatus:
    """The domain's status from its IMEX daemon pods and their nodes (pure).

    A daemon is Ready when its pod runs on a healthy node. The domain is Ready when every
    listed daemon is Ready, they share one clique, and there are at least ``numNodes`` of them
    (at least one when ``numNodes`` is 0). ``pending_reason`` explains workload pods that
    cannot be placed (no room in the clique) and wins over the generic waiting message.
    """
    entries: list[tuple[str, str, str, str]] = []
    seen: set[str] = set()
    failed: list[str] = []
    for pod in sorted(daemon_pods, key=lambda p: str((p.get("spec") or {}).get("nodeName"))):
        name = str((pod.get("spec") or {}).get("nodeName") or "")
        if not name or name in seen:
            continue
        seen.add(name)
        node = nodes.get(name)
        healthy = node_healthy(node)
        running = (pod.get("status") or {}).get("phase") == "Running"
        if not healthy:
            failed.append(name if node is not None else f"{name} (gone)")
        clique = node_clique(node) or ""
        entries.append(
            (name, node_ip(node, name), clique, "Ready" if healthy and running else "NotReady")
        )
    previous = {
        str(n.get("name")): n for n in (domain.status.get("nodes") or []) if isinstance(n, Mapping)
    }
    listed = _assign_indexes(entries, previous)
    ready = [n for n in listed if n.status == "Ready"]
    cliques = sorted({n.clique_id for n in listed})
    want = max(domain.spec.num_nodes, 1)
    if failed:
        return DomainStatus(
            "NotReady",
            tuple(listed),
            "NodeNotReady",
            f"node {', '.join(failed)} of the domain is NotReady"
            + (f"; {pending_reason}" if pending_reason else ""),
        )
    if len(cliques) > 1:
        return DomainStatus(
            "NotReady",
            tuple(listed),
            "CliqueMismatch",
            f"IMEX daemons run in more than one NVLink clique: {', '.join(cliques)}",
        )
    if pending_reason and len(ready) < want:
        return DomainStatus("NotReady", tuple(listed), "Unschedulable", pending_reason)
    if listed and len(ready) == len(listed) and len(ready) >= want:
        return DomainStatus(
            "Ready",
            tuple(listed),
            "DaemonsReady",
            f"{len(ready)} of {want} IMEX daemon(s) Ready in clique {cliques[0]}",
        )
    return DomainStatus(
        "NotReady",
        tuple(listed),
        "WaitingForDaemons",
        f"{len(ready)} of {want} IMEX daemon(s) Ready",
    )


def reconcile(store: ObjectStore, *, namespace: str = DRIVER_NAMESPACE) -> list[DomainEvent]:
    """One pass over every ComputeDomain in the store; returns what happened as events."""
    events: list[DomainEvent] = []
    domains = store.list(API_VERSION, KIND)
    if not domains and not _owned_objects_exist(store):
        return events  # a cluster without domains costs two small lists, not every pod
    nodes = {str(_meta(n).get("name")): n for n in store.list("v1", "Node")}
    pods = store.list("v1", "Pod") if domains else []
    live: set[str] = set()
    for raw in domains:
        ref = f"ComputeDomain/{_meta(raw).get('namespace', 'default')}/{_meta(raw).get('name')}"
        try:
            domain = parse_compute_domain(raw)
        except FieldError as exc:
            events.append(DomainEvent("Warning", "InvalidSpec", ref, str(exc)))
            continue
        live.add(domain.uid)
        try:
            if domain.deleting:
                events += _cleanup(store, domain, raw, nodes, pods, namespace)
            else:
                events += _sync(store, domain, raw, nodes, pods, namespace)
        except Conflict:
            continue  # someone wrote in between: the next pass sees the newer object
    _collect_orphans(store, live, nodes, namespace)
    return events


def _ensure(store: ObjectStore, desired: Obj, uid: str, ref: str) -> list[DomainEvent]:
    api, kind = desired["apiVersion"], desired["kind"]
    meta = desired["metadata"]
    try:
        current = store.get(api, kind, meta["name"], meta.get("namespace"))
    except NotFound:
        with contextlib.suppress(AlreadyExists):
            store.create(desired)
        return [
            DomainEvent(
                "Normal", "Created", ref, f"created {kind} {meta['namespace']}/{meta['name']}"
            )
        ]
    owner = (_meta(current).get("labels") or {}).get(DOMAIN_LABEL)
    if owner != uid:
        return [
            DomainEvent(
                "Warning",
                "NameConflict",
                ref,
                f"{kind} {meta['namespace']}/{meta['name']} exists and does not belong to this "
                "ComputeDomain; it was left alone",
            )
        ]
    if (
        current.get("spec") != desired.get("spec")
        or (_meta(current).get("labels") or {}) != meta["labels"]
    ):
        updated = dict(current)
        updated["spec"] = desired["spec"]
        updated["metadata"] = {**current["metadata"], "labels": meta["labels"]}
        store.update(updated)
    return []


def _sync(
    store: ObjectStore,
    domain: ComputeDomain,
    raw: Obj,
    nodes: Mapping[str, Obj],
    pods: Sequence[Obj],
    namespace: str,
) -> list[DomainEvent]:
    ref = f"ComputeDomain/{domain.ref}"
    events: list[DomainEvent] = []
    if FINALIZER not in domain.finalizers:
        raw["metadata"]["finalizers"] = [*domain.finalizers, FINALIZER]
        raw = store.update(raw)
    for desired in (
        channel_claim_template(domain),
        daemon_claim_template(domain, namespace),
        daemon_set(domain, namespace),
    ):
        events += _ensure(store, desired, domain.uid, ref)

    # A failed node keeps no daemon of the domain: dropping its label lets the DaemonSet go.
    key = node_label(domain.uid)
    for name, node in nodes.items():
        labels = _meta(node).get("labels") or {}
        if labels.get(key) == "true" and not node_healthy(node):
            _drop_label(store, name, key)
            events.append(
                DomainEvent(
                    "Warning",
                    "NodeNotReady",
                    ref,
                    f"node {name} is NotReady; its IMEX daemon leaves the domain",
                )
            )

    daemons = [
        p
        for p in pods
        if (_meta(p).get("namespace") or "default") == namespace
        and (_meta(p).get("labels") or {}).get(DOMAIN_LABEL) == domain.uid
        and not _meta(p).get("deletionTimestamp")
    ]
    status = domain_status(domain, daemons, nodes, _pending_reason(domain, nodes, pods))
    new = status.to_obj()
    old = raw.get("status") or {}
    if new != old:
        raw["status"] = new
        store.update(raw)
        if old.get("status") != new["status"]:
            if new["status"] == "Ready":
                events.append(DomainEvent("Normal", "ComputeDomainReady", ref, status.message))
            elif old.get("status") == "Ready":
                events.append(DomainEvent("Warning", "ComputeDomainNotReady", ref, status.message))
        old_reason = ((old.get("conditions") or [{}])[0]).get("message")
        if status.reason == "Unschedulable" and old_reason != status.message:
            events.append(DomainEvent("Warning", "NoRoomInClique", ref, status.message))
    return events


def _pending_reason(
    domain: ComputeDomain, nodes: Mapping[str, Obj], pods: Sequence[Obj]
) -> str | None:
    """Why the domain's unplaced workload pods cannot go anywhere, if clique room is the cause."""
    mine = workload_pods(domain, pods)
    pending = [p for p in mine if not (p.get("spec") or {}).get("nodeName")]
    if not pending:
        return None
    members: dict[str, str | None] = {}
    for p in mine:
        name = (p.get("spec") or {}).get("nodeName")
        if name and node_healthy(nodes.get(name)):
            members[name] = node_clique(nodes[name])
    by_node: dict[str, list[Obj]] = {}
    for p in pods:
        name = (p.get("spec") or {}).get("nodeName")
        if name and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            by_node.setdefault(str(name), []).append(p)
    rooms = room_view(pending[0], list(nodes.values()), by_node)
    return place(domain.ref, domain.spec.num_nodes, members, rooms).reason


def _drop_label(store: ObjectStore, node_name: str, key: str) -> None:
    for _ in range(5):
        try:
            node = store.get("v1", "Node", node_name)
        except NotFound:
            return
        labels = node["metadata"].get("labels") or {}
        if key not in labels:
            return
        labels.pop(key)
        node["metadata"]["labels"] = labels
        with contextlib.suppress(Conflict):
            store.update(node)
            return


def _delete_quietly(store: ObjectStore, api: str, kind: str, name: str, ns: str | None) -> bool:
    try:
        store.delete(api, kind, name, ns)
    except NotFound:
        return False
    return True


def _owned(store: ObjectStore, api: str, kind: str, uid: str) -> list[Obj]:
    return store.list(api, kind, labels={DOMAIN_LABEL: uid})


def _cleanup(
    store: ObjectStore,
    domain: ComputeDomain,
    raw: Obj,
    nodes: Mapping[str, Obj],
    pods: Sequence[Obj],
    namespace: str,
) -> list[DomainEvent]:
    ref = f"ComputeDomain/{domain.ref}"
    removed = _remove_owned(store, domain.uid, nodes, namespace)
    if FINALIZER in domain.finalizers:
        raw["metadata"]["finalizers"] = [f for f in domain.finalizers if f != FINALIZER]
        with contextlib.suppress(NotFound):
            store.update(raw)
    return [
        DomainEvent(
            "Normal",
            "Deleted",
            ref,
            f"removed {removed} object(s) and node label(s) the domain owned",
        )
    ]


def _remove_owned(store: ObjectStore, uid: str, nodes: Mapping[str, Obj], namespace: str) -> int:
    removed = 0
    for api, kind in (RCT, DS):
        for obj in _owned(store, api, kind, uid):
            m = obj["metadata"]
            removed += _delete_quietly(store, api, kind, m["name"], m.get("namespace"))
    # What the DaemonSet controller's garbage collection would remove with the DaemonSet.
    for pod in store.list("v1", "Pod", namespace=namespace, labels={DOMAIN_LABEL: uid}):
        removed += _delete_quietly(store, "v1", "Pod", pod["metadata"]["name"], namespace)
    key = node_label(uid)
    for name, node in nodes.items():
        if key in (_meta(node).get("labels") or {}):
            _drop_label(store, name, key)
            removed += 1
    return removed


def _owned_objects_exist(store: ObjectStore) -> bool:
    return any(
        DOMAIN_LABEL in (_meta(obj).get("labels") or {})
        for api, kind in (RCT, DS)
        for obj in store.list(api, kind)
    )


def _collect_orphans(
    store: ObjectStore, live: set[str], nodes: Mapping[str, Obj], namespace: str
) -> None:
    """Objects labelled for a domain that no longer exists (deleted while no controller ran)."""
    stale: set[str] = set()
    for api, kind in (RCT, DS):
        for obj in store.list(api, kind):
            uid = (_meta(obj).get("labels") or {}).get(DOMAIN_LABEL)
            if uid and uid not in live:
                stale.add(uid)
    prefix = node_label("")
    for node in nodes.values():
        for key in _meta(node).get("labels") or {}:
            if key.startswith(prefix) and key[len(prefix) :] not in live:
                stale.add(key[len(prefix) :])
    for uid in stale:
        _remove_owned(store, uid, nodes, namespace)
