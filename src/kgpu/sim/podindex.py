"""The bound pods as the inter-pod filters and preemption look them up.

kube-scheduler answers "which pods on which topology match this selector" from its snapshot
(``NodeInfo.Pods``, ``PodsWithRequiredAntiAffinity``) by walking every node. The simulator keeps
the same pods indexed instead, so that a pod with no affinity terms, in a cluster where no pod
has required anti-affinity, pays nothing, and a term that names a label value (``matchLabels``,
an ``In`` expression, the ComputeDomain clique term) looks only at the pods carrying it.

The index follows the scheduler's assume/forget: a pod is in it from the moment it is reserved
on a node (so later members of a gang see the earlier ones) until the kubelet releases it. The
label lookups are built the first time something asks for them (a pod with affinity terms or
spread constraints) and kept up to date from then on. A pod's labels count as they were when it
was bound (a label written onto a running pod afterwards is not seen).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from kgpu.node.selectors import LabelSelector
from kgpu.sim.podspec import AffinityTerm, PodRequirements

#: The label every namespace carries (the API server sets it), used when no Namespace object
#: says more.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

K = TypeVar("K")


@dataclass(frozen=True)
class IndexedPod:
    """One pod bound (or assumed) to a node."""

    key: str  # "namespace/name"
    namespace: str
    labels: Mapping[str, str]
    node: str
    priority: int
    anti_affinity_terms: tuple[AffinityTerm, ...]
    seq: int  # order in which pods were bound: the older pod is the more important one
    terminating: bool = False


def indexed(
    key: str, req: PodRequirements, node: str, seq: int, terminating: bool = False
) -> IndexedPod:
    return IndexedPod(
        key=key,
        namespace=req.namespace,
        labels=req.label_map,
        node=node,
        priority=req.priority,
        anti_affinity_terms=req.anti_affinity_terms,
        seq=seq,
        terminating=terminating,
    )


class PodIndex:
    """Bound pods by namespace and label, the ones with required anti-affinity, and how many
    pods run at each priority."""

    def __init__(self) -> None:
        self.pods: dict[str, IndexedPod] = {}
        self.by_namespace: dict[str, dict[str, IndexedPod]] = {}
        self.by_label: dict[tuple[str, str, str], dict[str, IndexedPod]] = {}
        #: (namespace, key, value) -> pods with that label per node
        self.label_nodes: dict[tuple[str, str, str], Counter[str]] = {}
        self.with_anti_affinity: dict[str, IndexedPod] = {}
        #: each distinct required anti-affinity term -> pods holding it per node (the pods of
        #: one workload share their terms: the incoming pod is matched once per term)
        self.anti_terms: dict[AffinityTerm, Counter[str]] = {}
        self.priorities: Counter[int] = Counter()
        self.terminating = 0  # pods with a deletionTimestamp (spread does not count them)
        self._labelled = False  # whether the label lookups above are built

    def _label(self, pod: IndexedPod) -> None:
        self.by_namespace.setdefault(pod.namespace, {})[pod.key] = pod
        for k, v in pod.labels.items():
            self.by_label.setdefault((pod.namespace, k, v), {})[pod.key] = pod
            self.label_nodes.setdefault((pod.namespace, k, v), Counter())[pod.node] += 1

    def _lookups(self) -> None:
        if not self._labelled:
            self._labelled = True
            for pod in self.pods.values():
                self._label(pod)

    def add(self, pod: IndexedPod) -> None:
        self.remove(pod.key)
        self.pods[pod.key] = pod
        if self._labelled:
            self._label(pod)
        if pod.anti_affinity_terms:
            self.with_anti_affinity[pod.key] = pod
            for term in pod.anti_affinity_terms:
                self.anti_terms.setdefault(term, Counter())[pod.node] += 1
        self.priorities[pod.priority] += 1
        self.terminating += pod.terminating

    def remove(self, key: str) -> None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return
        if self._labelled:
            self._drop(self.by_namespace, pod.namespace, key)
            for k, v in pod.labels.items():
                self._drop(self.by_label, (pod.namespace, k, v), key)
                self._uncount(self.label_nodes, (pod.namespace, k, v), pod.node)
        self.with_anti_affinity.pop(key, None)
        for term in pod.anti_affinity_terms:
            self._uncount(self.anti_terms, term, pod.node)
        self.terminating -= pod.terminating
        self.priorities[pod.priority] -= 1
        if not self.priorities[pod.priority]:
            del self.priorities[pod.priority]

    @staticmethod
    def _drop(index: dict[K, dict[str, IndexedPod]], at: K, key: str) -> None:
        bucket = index.get(at)
        if bucket is not None:
            bucket.pop(key, None)
            if not bucket:
                del index[at]

    @staticmethod
    def _uncount(index: dict[K, Counter[str]], at: K, node: str) -> None:
        counts = index.get(at)
        if counts is not None:
            counts[node] -= 1
            if counts[node] <= 0:
                del counts[node]
            if not counts:
                del index[at]

    def lowest_priority(self) -> int | None:
        return min(self.priorities) if self.priorities else None

    def namespaces(self) -> Iterable[str]:
        self._lookups()
        return self.by_namespace.keys()

    def nodes_with_label(self, namespace: str, key: str, value: str) -> Mapping[str, int]:
        """How many pods of ``namespace`` with label ``key=value`` run on each node."""
        self._lookups()
        return self.label_nodes.get((namespace, key, value), {})

    def matching(
        self,
        selector: LabelSelector,
        namespaces: Iterable[str],
    ) -> Iterator[IndexedPod]:
        """Pods in ``namespaces`` whose labels ``selector`` matches; looks up the first
        requirement that names values (``matchLabels`` or ``In``) instead of scanning."""
        if selector.nothing:
            return
        self._lookups()
        lookup = next((r for r in selector.requirements if r.operator == "In"), None)
        for ns in namespaces:
            if lookup is None:
                pool: Iterable[IndexedPod] = self.by_namespace.get(ns, {}).values()
            else:
                pool = (
                    p
                    for v in lookup.values
                    for p in self.by_label.get((ns, lookup.key, v), {}).values()
                )
            for pod in pool:
                if selector.matches(pod.labels):
                    yield pod


def simple_lookup(selector: LabelSelector) -> tuple[str, tuple[str, ...]] | None:
    """The (key, values) of a selector that is one ``In`` requirement (``matchLabels`` with one
    key): every pod the label index holds under those values matches it."""
    if selector.nothing or len(selector.requirements) != 1:
        return None
    (req,) = selector.requirements
    return (req.key, req.values) if req.operator == "In" else None


def term_namespaces(
    term: AffinityTerm, index: PodIndex, ns_labels: Callable[[str], Mapping[str, str]]
) -> set[str]:
    """The namespaces a term covers among those with bound pods (its ``namespaceSelector``
    resolved, as kube-scheduler merges it into the term's namespaces at PreFilter)."""
    names = set(term.namespaces)
    if not term.namespace_selector.nothing:
        chosen = term.namespace_selector
        names.update(ns for ns in index.namespaces() if chosen.matches(ns_labels(ns)))
    return names


__all__ = [
    "NAMESPACE_NAME_LABEL",
    "IndexedPod",
    "PodIndex",
    "indexed",
    "simple_lookup",
    "term_namespaces",
]
