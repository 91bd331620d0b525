"""Which nodes may take a pod, an allocation or a ResourceSlice, judged by the node's labels,
name and taints, with Kubernetes' semantics (``k8s.io/component-helpers/scheduling/corev1``).

* A core/v1 ``NodeSelector`` (``nodeSelectorTerms``: a pod's required node affinity, a DRA
  allocation's ``nodeSelector``, a ResourceSlice's): terms are ORed, the requirements of a term
  ANDed, an empty term matches no node, ``matchFields`` reads ``metadata.name``.
* A pod's ``nodeSelector`` map: every pair must be a label of the node.
* Tolerations against taints: a taint with effect NoSchedule or NoExecute keeps off every pod
  without a toleration for it (PreferNoSchedule only weighs in scoring).

* A metav1 ``LabelSelector`` (``matchLabels`` and ``matchExpressions`` with In, NotIn, Exists,
  DoesNotExist; all ANDed): a pod affinity term's ``labelSelector`` and ``namespaceSelector``, a
  topology spread constraint's. An empty selector matches everything, a missing one nothing.

A requirement kube-scheduler cannot turn into a selector (a value that is not a valid label
value, a key that is not a valid label key, ``Gt``/``Lt`` without one integer, ``matchFields``
without exactly one value) makes its term match no node, as ``nodeaffinity.LazyErrorNodeSelector``
does; the API server does not check those values, so such a pod is created and stays Pending.

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

from kgpu.node.labels import is_valid_label_key, is_valid_label_value

SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
#: ``matchFields`` allows only these, on ``metadata.name``.
FIELD_OPERATORS = ("In", "NotIn")
NAME_FIELD = "metadata.name"
#: A LabelSelector's ``matchExpressions`` operators (no Gt/Lt there).
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
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


def requirement_valid(key: str, operator: object, values: Sequence[str]) -> bool:
    """Whether ``labels.NewRequirement`` accepts a node-label requirement: a valid key, values
    that are valid label values, and as many values as the operator takes."""
    if not is_valid_label_key(key):
        return False
    if operator in ("In", "NotIn"):
        return bool(values) and all(is_valid_label_value(v) for v in values)
    if operator in ("Exists", "DoesNotExist"):
        return not values
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            return False
        try:
            int(values[0])
        except ValueError:
            return False
        return True
    return False


def field_requirement_valid(key: str, operator: object, values: Sequence[str]) -> bool:
    """A ``matchFields`` requirement: ``metadata.name`` with In/NotIn and exactly one value."""
    return key == NAME_FIELD and operator in FIELD_OPERATORS and len(values) == 1


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
    valid: bool = True  # False: a requirement kube-scheduler cannot parse; matches no node

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        """Every expression and field matches; an empty or unparsable term matches no node."""
        if not self.valid or (not self.expressions and not self.fields):
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
    terms = []
    for term in raw.get("nodeSelectorTerms") or ():
        exprs = parse_requirements(term.get("matchExpressions"))
        fields = parse_requirements(term.get("matchFields"))
        valid = all(requirement_valid(r.key, r.operator, r.values) for r in exprs) and all(
            field_requirement_valid(r.key, r.operator, r.values) for r in fields
        )
        terms.append(SelectorTerm(exprs, fields, valid))
    return NodeSelector(tuple(terms))


def _values(req: Mapping[str, Any]) -> list[str]:
    return [str(v) for v in req.get("values") or ()]


def _raw_requirement_matches(req: Mapping[str, Any], value: str | None) -> bool:
    return operator_matches(req.get("operator"), _values(req), value)


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
        if not all(
            requirement_valid(str(r.get("key")), r.get("operator"), _values(r)) for r in exprs
        ) or not all(
            field_requirement_valid(str(r.get("key")), r.get("operator"), _values(r))
            for r in fields
        ):
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


# -- label selectors (metav1.LabelSelector) --------------------------------------------------


@dataclass(frozen=True)
class LabelSelector:
    """A parsed ``metav1.LabelSelector``; ``nothing`` stands for a missing selector (or one
    that cannot be parsed), which matches no object."""

    requirements: tuple[Requirement, ...] = ()
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        return all(r.matches(labels.get(r.key)) for r in self.requirements)

    @property
    def everything(self) -> bool:
        return not self.nothing and not self.requirements

    def with_requirements(self, extra: Iterable[Requirement]) -> LabelSelector:
        """This selector ANDed with more requirements (``matchLabelKeys`` merged in)."""
        if self.nothing:
            return self
        return LabelSelector((*self.requirements, *extra))


NOTHING = LabelSelector(nothing=True)
EVERYTHING = LabelSelector()


def parse_label_selector(raw: object) -> LabelSelector:
    """``metav1.LabelSelectorAsSelector``: matchLabels as ``In`` requirements, then the
    expressions. None (no selector) matches nothing; an unparsable one too (the API server
    refuses those on create, so only objects made outside it carry them)."""
    if not isinstance(raw, Mapping):
        return NOTHING
    reqs: list[Requirement] = []
    labels = raw.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        return NOTHING
    for k, v in sorted(labels.items(), key=lambda kv: str(kv[0])):
        reqs.append(Requirement(str(k), "In", (str(v),)))
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, list):
        return NOTHING
    for e in exprs:
        if not isinstance(e, Mapping) or e.get("operator") not in LABEL_SELECTOR_OPERATORS:
            return NOTHING
        reqs.append(Requirement(str(e.get("key")), str(e["operator"]), tuple(_values(e))))
    if not all(requirement_valid(r.key, r.operator, r.values) for r in reqs):
        return NOTHING
    return LabelSelector(tuple(reqs))


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
    "EVERYTHING",
    "FIELD_OPERATORS",
    "LABEL_SELECTOR_OPERATORS",
    "NAME_FIELD",
    "NOTHING",
    "SELECTOR_OPERATORS",
    "TAINT_EFFECTS",
    "TOLERATION_OPERATORS",
    "LabelSelector",
    "NodeSelector",
    "Requirement",
    "SelectorTerm",
    "Taint",
    "Toleration",
    "field_requirement_valid",
    "first_untolerated",
    "labels_match",
    "node_selector_matches",
    "operator_matches",
    "parse_label_selector",
    "parse_node_selector",
    "parse_requirements",
    "parse_taints",
    "parse_tolerations",
    "requirement_valid",
    "tolerates",
]
