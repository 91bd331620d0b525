"""The simulated API server's admission of pods, before a pod is stored.

A real API server runs every created pod through its admission chain: the built-in ``Priority``
plugin resolves ``priorityClassName`` into ``spec.priority`` and ``spec.preemptionPolicy``, then
mutating webhooks patch the pod. Pods reach ``kgpu sim``'s store the same ways (applied, made by
a workload controller, written by a plugin), and each passes through :class:`Admission` first:

* **Priority** (``plugin/pkg/admission/priority``): the named PriorityClass (or the built-in
  ``system-cluster-critical`` / ``system-node-critical``) gives the value and the preemption
  policy; a pod without a class gets the class marked ``globalDefault`` (the lowest-valued one
  if several are), else priority 0. An unknown class, or a ``priority`` or ``preemptionPolicy``
  in the pod that differs from the class's, is refused with the API server's message.
* **kgpu's clique placement webhook** (served by ``kgpu controller`` in a cluster): the mutation
  of :func:`kgpu.computedomain.admission.mutate_pod` for pods that use a ComputeDomain's channel,
  so the stock scheduler's InterPodAffinity keeps a domain in one NVLink clique.

ResourceClaims and ResourceClaimTemplates pass one policy: with GPU memory shares on (the
scenario's ``draDriver: {consumableShares: memory}``), the ValidatingAdmissionPolicy kgpu's
chart renders (``templates/dra-share-admission-policy.yaml``) refuses a ``gpu.nvidia.com``
memory request below the share minimum or off the step grid, which kube-scheduler would
otherwise round up without a word. Its CEL is :func:`kgpu.dra.sharecheck.share_problems`
(tests/deploy/test_share_admission_policy.py runs both on one table), and the refusal reads as
the API server writes a policy denial.

Lookups are cached per change of the kinds they read (``MemoryStore.kind_revision``), so a pod
that names no class and uses no claim costs two dictionary reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kgpu.computedomain.admission import apply_patch, mutate_pod
from kgpu.computedomain.api import API_VERSION as CD_API_VERSION
from kgpu.computedomain.api import KIND as CD_KIND
from kgpu.computedomain.api import WORKLOAD_LABEL, ComputeDomain, parse_compute_domain
from kgpu.dra.api import RESOURCE_API
from kgpu.dra.sharecheck import admission_message, share_problems
from kgpu.dra.shares import DISABLED_POLICY, SharePolicy
from kgpu.errors import FieldError, KgpuError
from kgpu.store import MemoryStore, NotFound, ObjectStore, namespace_of

Obj = dict[str, Any]
SCHEDULING_API = "scheduling.k8s.io/v1"
PREEMPT_LOWER = "PreemptLowerPriority"
#: The PriorityClasses every API server creates at start.
SYSTEM_CLASSES: dict[str, tuple[int, str]] = {
    "system-node-critical": (2000001000, PREEMPT_LOWER),
    "system-cluster-critical": (2000000000, PREEMPT_LOWER),
}
#: The chart's memory-share ValidatingAdmissionPolicy and its binding, as release ``kgpu``
#: names them (``<fullname>-memory-shares``).
SHARE_POLICY = "kgpu-memory-shares"
#: kind -> resource, of the kinds that policy matches
SHARE_POLICY_RESOURCES = {
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
}


def share_policy_of(scenario: object) -> SharePolicy:
    """The share policy of a scenario's DRA driver: its ``share_policy`` (the top-level
    ``draDriver: {consumableShares: ...}``), disabled when it has none or no DRA driver."""
    policy = getattr(scenario, "share_policy", DISABLED_POLICY)
    if not getattr(scenario, "dra_driver", True) or not isinstance(policy, SharePolicy):
        return DISABLED_POLICY
    return policy


class AdmissionDenied(KgpuError):
    """The API server refused the object (``pods "x" is forbidden: ...``)."""


def _revision(store: ObjectStore, api_version: str, kind: str) -> int:
    """The store's revision of a kind (-1, never cached, for a store that does not keep one)."""
    if isinstance(store, MemoryStore):
        return store.kind_revision(api_version, kind)
    return -1


class Admission:
    """The admission chain for pods created in one simulated cluster."""

    def __init__(
        self, store: ObjectStore, webhook: bool = True, shares: SharePolicy = DISABLED_POLICY
    ) -> None:
        self.store = store
        self.webhook = webhook  # kgpu controller's clique placement webhook is installed
        self.shares = shares  # the chart's consumableShares and memory grid
        self._classes: tuple[int, dict[str, tuple[int, str]], tuple[str, int, str] | None] = (
            -2,
            {},
            None,
        )
        self._domains: tuple[int, dict[str, list[ComputeDomain]]] = (-2, {})

    # -- Priority ----------------------------------------------------------------------------
    def _priority_classes(self) -> tuple[dict[str, tuple[int, str]], tuple[str, int, str] | None]:
        revision = _revision(self.store, SCHEDULING_API, "PriorityClass")
        seen, classes, default = self._classes
        if seen != revision or revision < 0:
            classes = dict(SYSTEM_CLASSES)
            defaults: list[tuple[int, str, str]] = []
            for obj in self.store.list(SCHEDULING_API, "PriorityClass"):
                name = str((obj.get("metadata") or {}).get("name"))
                value = obj.get("value")
                if isinstance(value, bool) or not isinstance(value, int):
                    continue
                policy = str(obj.get("preemptionPolicy") or PREEMPT_LOWER)
                classes[name] = (value, policy)
                if obj.get("globalDefault") is True:
                    defaults.append((value, name, policy))
            low = min(defaults) if defaults else None
            default = (low[1], low[0], low[2]) if low else None
            self._classes = (revision, classes, default)
        return classes, default

    def _priority(self, pod: Obj) -> Obj:
        spec = pod.setdefault("spec", {})
        classes, default = self._priority_classes()
        name = spec.get("priorityClassName")
        policy: str | None
        if name:
            if name not in classes:
                raise self._denied(pod, f"no PriorityClass with name {name} was found")
            value, policy = classes[name]
        elif default is not None:
            spec["priorityClassName"], value, policy = default
        else:
            value, policy = 0, None
        given = spec.get("priority")
        if given is not None and given != value:
            raise self._denied(
                pod,
                f"the integer value of priority ({given}) must not be provided in pod spec; "
                f"priority admission controller computed {value} from the given PriorityClass "
                "name",
            )
        spec["priority"] = value
        if policy is not None:
            mine = spec.get("preemptionPolicy")
            if mine is not None and mine != policy:
                raise self._denied(
                    pod,
                    f"the string value of PreemptionPolicy ({mine}) must not be provided in pod "
                    f"spec; priority admission controller computed {policy} from the given "
                    "PriorityClass name",
                )
            spec["preemptionPolicy"] = policy
        return pod

    @staticmethod
    def _denied(pod: Obj, why: str) -> AdmissionDenied:
        name = (pod.get("metadata") or {}).get("name", "")
        return AdmissionDenied(f'pods "{name}" is forbidden: {why}')

    # -- kgpu's clique placement webhook -----------------------------------------------------
    def _domains_in(self, namespace: str) -> list[ComputeDomain]:
        revision = _revision(self.store, CD_API_VERSION, CD_KIND)
        seen, by_ns = self._domains
        if seen != revision or revision < 0:
            by_ns = {}
            for obj in self.store.list(CD_API_VERSION, CD_KIND):
                try:
                    domain = parse_compute_domain(obj)
                except FieldError:
                    continue  # the controller reports a bad domain; admission ignores it
                by_ns.setdefault(domain.namespace, []).append(domain)
            self._domains = (revision, by_ns)
        return by_ns.get(namespace, [])

    def _pods_by_node(self) -> dict[str, list[Obj]]:
        out: dict[str, list[Obj]] = {}
        for pod in self.store.list("v1", "Pod"):
            node = (pod.get("spec") or {}).get("nodeName")
            if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                out.setdefault(str(node), []).append(pod)
        return out

    def _clique_placement(self, pod: Obj) -> Obj:
        if not (pod.get("spec") or {}).get("resourceClaims"):
            return pod
        namespace = namespace_of(pod)
        domains = self._domains_in(namespace)
        if not domains:
            return pod

        def claim(name: str) -> Mapping[str, Any] | None:
            try:
                return self.store.get(RESOURCE_API, "ResourceClaim", name, namespace)
            except NotFound:
                return None

        def siblings(domain: ComputeDomain) -> Sequence[Mapping[str, Any]]:
            return self.store.list(
                "v1", "Pod", namespace=namespace, labels={WORKLOAD_LABEL: domain.uid}
            )

        mutation = mutate_pod(
            pod,
            namespace,
            domains,
            claim=claim,
            siblings=siblings,
            nodes=lambda: self.store.list("v1", "Node"),
            pods_by_node=self._pods_by_node,
        )
        return apply_patch(pod, mutation.patch) if mutation.patch else pod

    # -- kgpu's memory-share admission policy ------------------------------------------------
    def admit_object(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> None:
        """A create (``old`` None) or update of any object but a pod;
        :class:`AdmissionDenied` when the chart's memory-share policy refuses it. An update
        that keeps the spec is not checked (the policy's match condition), so a claim stored
        before shares were turned on can still lose its finalizers."""
        resource = SHARE_POLICY_RESOURCES.get(str(obj.get("kind")))
        if resource is None or not self.shares.enforced:
            return
        if old is not None and old.get("spec") == obj.get("spec"):
            return
        message = admission_message(share_problems(obj, self.shares))
        if message is not None:
            name = (obj.get("metadata") or {}).get("name", "")
            raise AdmissionDenied(
                f'{resource}.resource.k8s.io "{name}" is forbidden: ValidatingAdmissionPolicy '
                f"'{SHARE_POLICY}' with binding '{SHARE_POLICY}' denied request: {message}"
            )

    # -- the chain ---------------------------------------------------------------------------
    def admit_pod(self, pod: Obj) -> Obj:
        """The pod as it will be stored; :class:`AdmissionDenied` when refused."""
        pod = self._priority(pod)
        if self.webhook:
            pod = self._clique_placement(pod)
        return pod


__all__ = ["SHARE_POLICY", "SYSTEM_CLASSES", "Admission", "AdmissionDenied", "share_policy_of"]
