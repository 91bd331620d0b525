"""The controller's picture of the cluster: informers on the kinds it reads, and indexes kept
by their event handlers, so one domain's sync reads what concerns that domain (its daemon
pods, its workload pods, what it owns) instead of scanning every pod of the cluster.

:class:`ClusterIndex` is a :class:`~kgpu.computedomain.view.ClusterView`. Each informer event
updates the indexes and returns the domains it concerns (:class:`Touched`), which the domain
controller queues:

- a ComputeDomain: itself;
- a Node: the domains it is labelled for or hosts daemons of, when its readiness, labels,
  addresses or schedulability changed; and, when its room changed, the domains whose pods
  wait for room (``room``);
- a Pod: the domain whose daemon it is, the domains whose channel it uses, and ``room`` when a
  bound pod appeared, went or finished;
- a claim template, DaemonSet or ComputeDomainClique labelled for a domain: that domain, or an
  orphan to remove when no such domain exists.

Memory: the informers hold every Node and Pod of the cluster (as kube-scheduler does), and the
indexes hold the copies their handlers were given, so Nodes and Pods are held twice. Reads from
the indexes are not copied again: the core's decisions never change their inputs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from kgpu.computedomain.api import (
    API_VERSION,
    DOMAIN_LABEL,
    KIND,
    WORKLOAD_LABEL,
    ComputeDomain,
)
from kgpu.computedomain.members import claim_templates, pod_alive
from kgpu.computedomain.view import (
    CLIQUE,
    DS,
    RCT,
    domain_template_key,
    index_pod,
    labelled_uids,
)
from kgpu.store import Informer, SharedInformers
from kgpu.store.objects import namespace_of

Obj = dict[str, Any]
PodKey = tuple[str, str]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _key(obj: Mapping[str, Any]) -> PodKey:
    return namespace_of(obj), str(_meta(obj).get("name", ""))


@dataclass
class Touched:
    """Which domains an event concerns: by uid, and whether room for waiting pods changed."""

    uids: set[str] = field(default_factory=set)
    domains: set[PodKey] = field(default_factory=set)  # (namespace, name) of ComputeDomains
    room: bool = False

    def merge(self, other: Touched) -> None:
        self.uids |= other.uids
        self.domains |= other.domains
        self.room = self.room or other.room


def _ready(node: Mapping[str, Any] | None) -> Any:
    for cond in ((node or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status")
    return None


def _node_facts(node: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """What of a Node a domain's daemons and status depend on."""
    n = node or {}
    return (
        _ready(n),
        dict(_meta(n).get("labels") or {}),
        (n.get("status") or {}).get("addresses"),
    )


def _node_room(node: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """What of a Node decides whether a pod fits there."""
    n = node or {}
    spec = n.get("spec") or {}
    return (
        _ready(n),
        spec.get("unschedulable"),
        spec.get("taints"),
        (n.get("status") or {}).get("allocatable"),
        dict(_meta(n).get("labels") or {}),
    )


class ClusterIndex:
    """Informers plus indexes; ``namespace`` is where the domains' daemon objects live."""

    def __init__(self, informers: SharedInformers, namespace: str) -> None:
        self.informers = informers
        self.namespace = namespace
        self._lock = threading.RLock()
        # pods: the index slots each pod is filed under, and the slots themselves
        self._slots: dict[PodKey, list[tuple[dict[Any, dict[PodKey, Obj]], Any]]] = {}
        self._daemons: dict[str, dict[PodKey, Obj]] = {}
        self._by_template: dict[tuple[str, str], dict[PodKey, Obj]] = {}
        self._by_label: dict[str, dict[PodKey, Obj]] = {}
        self._by_node: dict[str, dict[PodKey, Obj]] = {}
        self._template_uid: dict[tuple[str, str], str] = {}  # a domain's channel template
        self._owned: dict[tuple[str, str, str], dict[PodKey, Obj]] = {}
        self._labelled: dict[str, set[str]] = {}
        self._domains: dict[str, PodKey] = {}  # uid -> (namespace, name)
        self._nodes: dict[str, Obj] = {}  # the handlers' copies: read without copying again
        self.domain_informer: Informer | None = None
        self.node_informer: Informer | None = None
        self.pod_informer: Informer | None = None
        self._owned_informers: dict[tuple[str, str], Informer] = {}
        self._unsubscribe: list[Callable[[], None]] = []

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, on_touch: Callable[[Touched], None]) -> None:
        """Acquire the informers (waiting for their first lists) and route their events:
        the indexes change first, then ``on_touch`` hears which domains it concerns."""
        acquire = self.informers.acquire
        self.domain_informer = acquire(API_VERSION, KIND)
        self.node_informer = acquire("v1", "Node")
        self.pod_informer = acquire("v1", "Pod")
        self._owned_informers = {
            RCT: acquire(*RCT),
            DS: acquire(*DS, namespace=self.namespace),
            CLIQUE: acquire(*CLIQUE, namespace=self.namespace),
        }

        def routed(apply: Callable[..., Touched]) -> Callable[..., None]:
            def handler(*objs: Obj) -> None:
                on_touch(apply(*objs))

            return handler

        subscribe = self._unsubscribe.append
        subscribe(
            self.domain_informer.add_handler(
                on_add=routed(lambda o: self.domain_event(None, o)),
                on_update=routed(self.domain_event),
                on_delete=routed(lambda o: self.domain_event(o, None)),
            )
        )
        subscribe(
            self.node_informer.add_handler(
                on_add=routed(lambda o: self.node_event(None, o)),
                on_update=routed(self.node_event),
                on_delete=routed(lambda o: self.node_event(o, None)),
            )
        )
        subscribe(
            self.pod_informer.add_handler(
                on_add=routed(lambda o: self.pod_event(None, o)),
                on_update=routed(self.pod_event),
                on_delete=routed(lambda o: self.pod_event(o, None)),
            )
        )
        for (api, kind), informer in self._owned_informers.items():

            def owned_event(
                old: Obj | None, new: Obj | None, api: str = api, kind: str = kind
            ) -> Touched:
                return self.owned_event(api, kind, old, new)

            subscribe(
                informer.add_handler(
                    on_add=routed(lambda o, f=owned_event: f(None, o)),
                    on_update=routed(owned_event),
                    on_delete=routed(lambda o, f=owned_event: f(o, None)),
                )
            )

    def stop(self) -> None:
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        for informer in [
            self.domain_informer,
            self.node_informer,
            self.pod_informer,
            *self._owned_informers.values(),
        ]:
            if informer is not None:
                self.informers.release(informer)
        self.domain_informer = self.node_informer = self.pod_informer = None
        self._owned_informers = {}

    @property
    def synced(self) -> bool:
        informers = [self.domain_informer, self.node_informer, self.pod_informer]
        informers += list(self._owned_informers.values())
        return all(i is not None and i.synced for i in informers)

    # -- events ------------------------------------------------------------------------------
    def domain_event(self, old: Obj | None, new: Obj | None) -> Touched:
        touched = Touched()
        with self._lock:
            for obj, present in ((old, False), (new, True)):
                if obj is None:
                    continue
                uid = str(_meta(obj).get("uid") or "")
                touched.domains.add(_key(obj))
                if not uid:
                    continue
                touched.uids.add(uid)
                template = _template(obj)
                if present:
                    self._domains[uid] = _key(obj)
                    if template:
                        self._template_uid[template] = uid
                elif new is None or _template(new) != template:
                    if new is None:
                        self._domains.pop(uid, None)
                    if template and self._template_uid.get(template) == uid:
                        del self._template_uid[template]
        return touched

    def node_event(self, old: Obj | None, new: Obj | None) -> Touched:
        touched = Touched()
        name = str(_meta(new or old or {}).get("name", ""))
        with self._lock:
            if new is None:
                self._nodes.pop(name, None)
            else:
                self._nodes[name] = new
            for uid in labelled_uids(old or {}):
                self._labelled.get(uid, set()).discard(name)
            for uid in labelled_uids(new or {}):
                self._labelled.setdefault(uid, set()).add(name)
            if _node_facts(old) != _node_facts(new):
                touched.uids |= set(labelled_uids(old or {})) | set(labelled_uids(new or {}))
                touched.uids |= {
                    uid
                    for uid, pods in self._daemons.items()
                    if any((p.get("spec") or {}).get("nodeName") == name for p in pods.values())
                }
            touched.room = _node_room(old) != _node_room(new)
        return touched

    def pod_event(self, old: Obj | None, new: Obj | None) -> Touched:
        touched = Touched()
        key = _key(new or old or {})
        with self._lock:
            self._unfile(key)
            if new is not None:
                self._file(key, new)
            for obj in (old, new):
                if obj is None:
                    continue
                labels = _meta(obj).get("labels") or {}
                if namespace_of(obj) == self.namespace and labels.get(DOMAIN_LABEL):
                    touched.uids.add(str(labels[DOMAIN_LABEL]))
                touched.uids |= self._workload_uids(obj)
            touched.room = _placed(old) != _placed(new)
        return touched

    def owned_event(self, api: str, kind: str, old: Obj | None, new: Obj | None) -> Touched:
        touched = Touched()
        key = _key(new or old or {})
        with self._lock:
            for obj in (old, new):
                uid = (_meta(obj).get("labels") or {}).get(DOMAIN_LABEL) if obj else None
                if uid:
                    self._owned.get((api, kind, str(uid)), {}).pop(key, None)
                    touched.uids.add(str(uid))
            uid = (_meta(new).get("labels") or {}).get(DOMAIN_LABEL) if new else None
            if uid:
                self._owned.setdefault((api, kind, str(uid)), {})[key] = new  # type: ignore[assignment]
        return touched

    def _workload_uids(self, pod: Mapping[str, Any]) -> set[str]:
        """Domains whose channel the pod may use: by template name or the webhook's label."""
        ns = namespace_of(pod)
        uids = {
            self._template_uid[(ns, t)]
            for t in claim_templates(pod)
            if (ns, t) in self._template_uid
        }
        label = (_meta(pod).get("labels") or {}).get(WORKLOAD_LABEL)
        if label:
            uids.add(str(label))
        return uids

    def _file(self, key: PodKey, pod: Obj) -> None:
        daemons: dict[str, list[Obj]] = {}
        by_template: dict[tuple[str, str], list[Obj]] = {}
        by_label: dict[str, list[Obj]] = {}
        by_node: dict[str, list[Obj]] = {}
        index_pod(pod, self.namespace, daemons, by_template, by_label, by_node)
        slots: list[tuple[dict[Any, dict[PodKey, Obj]], Any]] = []
        pairs: list[tuple[dict[Any, dict[PodKey, Obj]], Mapping[Any, Any]]] = [
            (cast(dict[Any, dict[PodKey, Obj]], self._daemons), daemons),
            (cast(dict[Any, dict[PodKey, Obj]], self._by_template), by_template),
            (cast(dict[Any, dict[PodKey, Obj]], self._by_label), by_label),
            (cast(dict[Any, dict[PodKey, Obj]], self._by_node), by_node),
        ]
        for table, found in pairs:
            for slot in found:
                table.setdefault(slot, {})[key] = pod
                slots.append((table, slot))
        self._slots[key] = slots

    def _unfile(self, key: PodKey) -> None:
        for table, slot in self._slots.pop(key, []):
            pods = table.get(slot)
            if pods is not None:
                pods.pop(key, None)
                if not pods:
                    del table[slot]

    # -- ClusterView -------------------------------------------------------------------------
    def node(self, name: str) -> Obj | None:
        """A Node, shared with the index (the core's decisions never change their inputs)."""
        with self._lock:
            return self._nodes.get(name)

    def nodes(self) -> Sequence[Obj]:
        """Every Node, without a copy of each (a sync with pods waiting for room reads them)."""
        with self._lock:
            return list(self._nodes.values())

    def pods_by_node(self) -> Mapping[str, Sequence[Obj]]:
        with self._lock:
            return {node: list(pods.values()) for node, pods in self._by_node.items()}

    def daemon_pods(self, uid: str) -> Sequence[Obj]:
        with self._lock:
            return list(self._daemons.get(uid, {}).values())

    def workload_pods(self, domain: ComputeDomain) -> Sequence[Obj]:
        with self._lock:
            found = dict(self._by_template.get(domain_template_key(domain), {}))
            found.update(self._by_label.get(domain.uid, {}))
            return list(found.values())

    def owned(self, api_version: str, kind: str, uid: str) -> Sequence[Obj]:
        with self._lock:
            return list(self._owned.get((api_version, kind, uid), {}).values())

    def labelled_nodes(self, uid: str) -> Sequence[str]:
        with self._lock:
            return sorted(self._labelled.get(uid, set()))

    def owner_uids(self) -> set[str]:
        with self._lock:
            owned = {uid for (_, _, uid), objs in self._owned.items() if objs}
            return owned | {uid for uid, nodes in self._labelled.items() if nodes}

    # -- for the controller and the webhook ----------------------------------------------------
    def domain_key(self, uid: str) -> PodKey | None:
        with self._lock:
            return self._domains.get(uid)

    def domain(self, namespace: str, name: str) -> Obj | None:
        informer = self.domain_informer
        return informer.get(name, namespace) if informer is not None else None

    def domains(self, namespace: str | None = None) -> list[Obj]:
        informer = self.domain_informer
        return informer.list(namespace) if informer is not None else []


def _placed(pod: Mapping[str, Any] | None) -> str | None:
    """Where a pod takes room: its node while it is bound and alive, else nowhere."""
    if pod is None or not pod_alive(pod):
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    return str(node) if node else None


def _template(domain: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, channel template name) of a ComputeDomain object."""
    spec = domain.get("spec") or {}
    name = ((spec.get("channel") or {}).get("resourceClaimTemplate") or {}).get("name")
    return (namespace_of(domain), str(name)) if name else None
