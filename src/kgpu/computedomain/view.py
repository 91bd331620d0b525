"""How a ComputeDomain sync sees the cluster: the :class:`ClusterView` protocol, and
:class:`StoreView`, one list of each kind (the simulator's full pass; the ``kgpu controller``
process answers the same questions from its informers' indexes instead).

Domains own objects labelled ``resource.nvidia.com/computeDomain=<uid>`` (claim templates, the
IMEX DaemonSet, ComputeDomainCliques); nodes hosting a domain's pods carry
``resource.nvidia.com/computeDomain.<uid>``; daemon pods live in the driver namespace with the
domain label; workload pods are found by the channel template they reference or the label the
admission webhook sets (:mod:`kgpu.computedomain.members` decides which of them count).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kgpu.computedomain.api import (
    API_VERSION,
    CLIQUE_KIND,
    DOMAIN_LABEL,
    WORKLOAD_LABEL,
    ComputeDomain,
    node_label,
)
from kgpu.computedomain.members import claim_templates, pod_alive
from kgpu.dra.api import RESOURCE_API
from kgpu.store import ObjectStore

Obj = dict[str, Any]
RCT = (RESOURCE_API, "ResourceClaimTemplate")
DS = ("apps/v1", "DaemonSet")
CLIQUE = (API_VERSION, CLIQUE_KIND)
#: What a domain owns, found by its ``resource.nvidia.com/computeDomain=<uid>`` label.
OWNED = (RCT, DS, CLIQUE)
NODE_LABEL_PREFIX = node_label("")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


class ClusterView(Protocol):
    """The cluster as one domain's sync reads it."""

    def node(self, name: str) -> Obj | None:
        """A Node by name, None when it does not exist."""
        ...

    def nodes(self) -> Sequence[Obj]:
        """Every Node (read only when a domain has pods waiting for room)."""
        ...

    def pods_by_node(self) -> Mapping[str, Sequence[Obj]]:
        """The live pods bound to each node (room; only when pods are waiting)."""
        ...

    def daemon_pods(self, uid: str) -> Sequence[Obj]:
        """The domain's IMEX daemon pods (driver namespace, labelled with the uid)."""
        ...

    def workload_pods(self, domain: ComputeDomain) -> Sequence[Obj]:
        """Pods that may hold the domain's channel (a superset: :func:`holds_channel` decides)."""
        ...

    def owned(self, api_version: str, kind: str, uid: str) -> Sequence[Obj]:
        """Objects of one kind labelled for the domain."""
        ...

    def labelled_nodes(self, uid: str) -> Sequence[str]:
        """Nodes carrying the domain's node label."""
        ...

    def owner_uids(self) -> set[str]:
        """Every domain uid some owned object or node label names (to find orphans)."""
        ...


class StoreView:
    """A :class:`ClusterView` from one list of each kind (the simulator's full pass, and any
    caller without informers). Pods are listed on first use only, so a cluster without
    domains costs no pod list."""

    def __init__(self, store: ObjectStore, namespace: str) -> None:
        self._store = store
        self._namespace = namespace
        self._nodes = {str(_meta(n).get("name")): n for n in store.list("v1", "Node")}
        self._pods: (
            tuple[
                dict[str, list[Obj]],
                dict[tuple[str, str], list[Obj]],
                dict[str, list[Obj]],
                dict[str, list[Obj]],
            ]
            | None
        ) = None
        self._owned: dict[tuple[str, str, str], list[Obj]] = {}
        for api, kind in OWNED:
            for obj in store.list(api, kind):
                uid = _labels(obj).get(DOMAIN_LABEL)
                if uid:
                    self._owned.setdefault((api, kind, uid), []).append(obj)
        self._labelled: dict[str, list[str]] = {}
        for name, node in self._nodes.items():
            for uid in labelled_uids(node):
                self._labelled.setdefault(uid, []).append(name)

    def _indexes(
        self,
    ) -> tuple[
        dict[str, list[Obj]],
        dict[tuple[str, str], list[Obj]],
        dict[str, list[Obj]],
        dict[str, list[Obj]],
    ]:
        if self._pods is None:
            daemons: dict[str, list[Obj]] = {}
            by_template: dict[tuple[str, str], list[Obj]] = {}
            by_label: dict[str, list[Obj]] = {}
            by_node: dict[str, list[Obj]] = {}
            for pod in self._store.list("v1", "Pod"):
                index_pod(pod, self._namespace, daemons, by_template, by_label, by_node)
            self._pods = (daemons, by_template, by_label, by_node)
        return self._pods

    def node(self, name: str) -> Obj | None:
        return self._nodes.get(name)

    def nodes(self) -> Sequence[Obj]:
        return list(self._nodes.values())

    def pods_by_node(self) -> Mapping[str, Sequence[Obj]]:
        return self._indexes()[3]

    def daemon_pods(self, uid: str) -> Sequence[Obj]:
        return self._indexes()[0].get(uid, [])

    def workload_pods(self, domain: ComputeDomain) -> Sequence[Obj]:
        _, by_template, by_label, _ = self._indexes()
        found = {id(p): p for p in by_template.get(domain_template_key(domain), [])}
        found.update({id(p): p for p in by_label.get(domain.uid, [])})
        return list(found.values())

    def owned(self, api_version: str, kind: str, uid: str) -> Sequence[Obj]:
        return self._owned.get((api_version, kind, uid), [])

    def labelled_nodes(self, uid: str) -> Sequence[str]:
        return self._labelled.get(uid, [])

    def owner_uids(self) -> set[str]:
        return {uid for _, _, uid in self._owned} | set(self._labelled)


def domain_template_key(domain: ComputeDomain) -> tuple[str, str]:
    return (domain.namespace, domain.spec.channel_template)


def labelled_uids(node: Mapping[str, Any]) -> list[str]:
    """The domains a node is labelled for (``resource.nvidia.com/computeDomain.<uid>``)."""
    return [
        key[len(NODE_LABEL_PREFIX) :]
        for key in _labels(node)
        if key.startswith(NODE_LABEL_PREFIX) and len(key) > len(NODE_LABEL_PREFIX)
    ]


def index_pod(
    pod: Obj,
    namespace: str,
    daemons: dict[str, list[Obj]],
    by_template: dict[tuple[str, str], list[Obj]],
    by_label: dict[str, list[Obj]],
    by_node: dict[str, list[Obj]],
) -> None:
    """File one pod under the indexes a domain sync reads (shared by both views)."""
    meta = _meta(pod)
    ns = str(meta.get("namespace") or "default")
    labels = _labels(pod)
    if ns == namespace and labels.get(DOMAIN_LABEL):
        daemons.setdefault(str(labels[DOMAIN_LABEL]), []).append(pod)
    for template in claim_templates(pod):
        by_template.setdefault((ns, template), []).append(pod)
    if labels.get(WORKLOAD_LABEL):
        by_label.setdefault(str(labels[WORKLOAD_LABEL]), []).append(pod)
    node = (pod.get("spec") or {}).get("nodeName")
    if node and pod_alive(pod):
        by_node.setdefault(str(node), []).append(pod)
