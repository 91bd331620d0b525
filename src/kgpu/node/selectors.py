"""Which nodes may take a pod, an allocation or a ResourceSlice, judged by the node's labels,
name and taints, with Kubernetes' semantics (``k8s.io/component-helpers/scheduling/corev1``).

* A core/v1 ``NodeSelector`` (``nodeSelectorTerms``: a pod's required node affinity, a DRA
  allocation's ``nodeSelector``, a ResourceSlice's): terms are ORed, the requirements of a term
  ANDed, an empty term matches no node, ``matchFields`` reads ``metadata.name``.
* A pod's ``nodeSelector`` map: every pair must be a label of the node.
* Tolerations against taints: a taint with effect NoSchedule or NoExecute keeps off every pod
  without a toleration for it (PreferNoSchedule only weighs in scoring).

One implementation for kube-scheduler's filters in the simulator, the DRA allocator and
ComputeDomain placement. Selectors come in two forms: parsed once into frozen, hashable values
(the simulator caches verdicts per pod shape) or read from their wire form as they are (the
allocator matches a claim's ``nodeSelector`` once per node); both go through
:func:`operator_matches`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
#: ``matchFields`` allows only these, on ``metadata.name``.
FIELD_OPERATORS = ("In", "NotIn")
NAME_FIELD = "metadata.name"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")


def operator_matches(operator: object, values: Sequence[str], value: str | None) -> bool:
    """One requirement against the node's value for its key (None: the node has no such
    label). ``Gt``/``Lt`` compare integers; an unknown operator matches nothing."""
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None:
        try:
            have, want = int(value), int(values[0])
        except (ValueError, IndexError):
            return False
        return have > want if operator == "Gt" else have < want
    return False


@dataclass(frozen=True)
class Requirement:
    """One ``matchExpressions`` / ``matchFields`` entry."""

    key: str
    operator: str
    values: tuple[str, ...]

    def matches(self, value: str | None) -> bool:
        return operator_matches(self.operator, self.values, value)


@dataclass(frozen=True)
class SelectorTerm:
    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        """Every expression and field matches; an empty term matches no node."""
        if not self.expressions and not self.fields:
            return False
        return all(r.matches(labels.get(r.key)) for r in self.expressions) and all(
            r.matches(node_name if r.key == NAME_FIELD else None) for r in self.fields
        )


@dataclass(frozen=True)
class NodeSelector:
    """A core/v1 NodeSelector: any of its terms."""

    terms: tuple[SelectorTerm, ...]

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        return any(t.matches(labels, node_name) for t in self.terms)


def parse_requirements(raw: Iterable[Mapping[str, Any]] | None) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(str(e["key"]), str(e["operator"]), tuple(str(v) for v in e.get("values") or ()))
        for e in raw or ()
    )


def parse_node_selector(raw: Mapping[str, Any]) -> NodeSelector:
    """A validated ``{nodeSelectorTerms: [...]}`` as a :class:`NodeSelector`."""
    return NodeSelector(
        tuple(
            SelectorTerm(
                parse_requirements(term.get("matchExpressions")),
                parse_requirements(term.get("matchFields")),
            )
            for term in raw.get("nodeSelectorTerms") or ()
        )
    )


def _raw_requirement_matches(req: Mapping[str, Any], value: str | None) -> bool:
    return operator_matches(req.get("operator"), [str(v) for v in req.get("values") or ()], value)


def node_selector_matches(
    selector: Mapping[str, Any] | None, labels: Mapping[str, str], node_name: str
) -> bool:
    """A NodeSelector in wire form against a node; no selector (or no terms) matches nothing,
    as an allocation or slice with an empty selector reaches no node."""
    if not selector:
        return False
    for term in selector.get("nodeSelectorTerms") or ():
        exprs = term.get("matchExpressions") or ()
        fields = term.get("matchFields") or ()
        if not exprs and not fields:
            continue
        if all(_raw_requirement_matches(r, labels.get(str(r.get("key")))) for r in exprs) and all(
            _raw_requirement_matches(r, node_name if r.get("key") == NAME_FIELD else None)
            for r in fields
        ):
            return True
    return False


def labels_match(wanted: Iterable[tuple[str, str]], labels: Mapping[str, str]) -> bool:
    """A pod's ``nodeSelector``: every (key, value) is a label of the node."""
    return all(labels.get(k) == v for k, v in wanted)


# -- taints and tolerations ------------------------------------------------------------------


@dataclass(frozen=True)
class Toleration:
    key: str
    operator: str  # Equal | Exists
    value: str
    effect: str  # "" = every effect


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


def parse_taints(raw: object) -> tuple[Taint, ...]:
    if not isinstance(raw, Iterable):
        return ()
    return tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in raw
        if isinstance(t, Mapping)
    )


def parse_tolerations(raw: object) -> tuple[Toleration, ...]:
    if not isinstance(raw, Iterable):
        return ()
    return tuple(
        Toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in raw
        if isinstance(t, Mapping)
    )


def tolerates(tol: Toleration, taint: Taint) -> bool:
    """An empty key with ``Exists`` tolerates every taint; an empty effect every effect."""
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.key and tol.key != taint.key:
        return False
    if tol.operator == "Exists":
        return True
    return tol.value == taint.value


def first_untolerated(tolerations: Sequence[Toleration], taints: Sequence[Taint]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration covers (PreferNoSchedule only
    affects scoring)."""
    for taint in taints:
        if taint.effect == "PreferNoSchedule":
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


__all__ = [
    "FIELD_OPERATORS",
    "NAME_FIELD",
    "SELECTOR_OPERATORS",
    "TAINT_EFFECTS",
    "TOLERATION_OPERATORS",
    "NodeSelector",
    "Requirement",
    "SelectorTerm",
    "Taint",
    "Toleration",
    "first_untolerated",
    "labels_match",
    "node_selector_matches",
    "operator_matches",
    "parse_node_selector",
    "parse_requirements",
    "parse_taints",
    "parse_tolerations",
    "tolerates",
]
