"""The bound pods as the inter-pod filters and preemption look them up.

kube-scheduler answers "which pods on which topology match this selector" from its snapshot
(``NodeInfo.Pods``, ``PodsWithRequiredAntiAffinity``) by walking every node. The simulator keeps
the same pods indexed instead, so that a pod with no affinity terms, in a cluster where no pod
has required anti-affinity, pays nothing, and a term that names a label value (``matchLabels``,
an ``In`` expression, the ComputeDomain clique term) looks only at the pods carrying it.

The index follows the scheduler's assume/forget: a pod is in it from the moment it is reserved
on a node (so later members of a gang see the earlier ones) until the kubelet releases it.
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
        self.with_anti_affinity: dict[str, IndexedPod] = {}
        self.priorities: Counter[int] = Counter()

    def add(self, pod: IndexedPod) -> None:
        self.remove(pod.key)
        self.pods[pod.key] = pod
        self.by_namespace.setdefault(pod.namespace, {})[pod.key] = pod
        for k, v in pod.labels.items():
            self.by_label.setdefault((pod.namespace, k, v), {})[pod.key] = pod
        if pod.anti_affinity_terms:
            self.with_anti_affinity[pod.key] = pod
        self.priorities[pod.priority] += 1

    def remove(self, key: str) -> None:
        pod = self.pods.pop(key, None)
        if pod is None:
            return
        self._drop(self.by_namespace, pod.namespace, key)
        for k, v in pod.labels.items():
            self._drop(self.by_label, (pod.namespace, k, v), key)
        self.with_anti_affinity.pop(key, None)
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

    def lowest_priority(self) -> int | None:
        return min(self.priorities) if self.priorities else None

    def namespaces(self) -> Iterable[str]:
        return self.by_namespace.keys()

    def matching(
        self,
        selector: LabelSelector,
        namespaces: Iterable[str],
    ) -> Iterator[IndexedPod]:
        """Pods in ``namespaces`` whose labels ``selector`` matches; looks up the first
        requirement that names values (``matchLabels`` or ``In``) instead of scanning."""
        if selector.nothing:
            return
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


__all__ = ["NAMESPACE_NAME_LABEL", "IndexedPod", "PodIndex", "indexed", "term_namespaces"]
