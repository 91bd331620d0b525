"""Label and field selectors as kube-apiserver parses them (``labelSelector``/``fieldSelector``
query parameters).

Label selectors: ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``,
comma-separated, all must hold. Field selectors: ``path=v``, ``path==v``, ``path!=v``; a path the
kind does not support is refused, with the API server's wording.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kgpu.store.objects import field_value

_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SET = re.compile(r"^(\S+)\s+(in|notin)\s+\((.*)\)$")


class SelectorError(ValueError):
    """A selector the API server would answer with 400 BadRequest."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op == "exists":
            return present
        return not present


def _terms(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return [t.strip() for t in terms if t.strip()]


def _key(key: str, term: str) -> str:
    if not _KEY.fullmatch(key) or len(key.rsplit("/", 1)[-1]) > 63:
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r} in {term!r}")
    return key


def parse_labels(text: str) -> list[Requirement]:
    reqs = []
    for term in _terms(text):
        m = _SET.match(term)
        if m:
            values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append(Requirement(_key(m.group(1), term), m.group(2), values))
        elif term.startswith("!"):
            reqs.append(Requirement(_key(term[1:].strip(), term), "!"))
        elif "!=" in term:
            key, value = term.split("!=", 1)
            reqs.append(Requirement(_key(key.strip(), term), "!=", frozenset({value.strip()})))
        elif "=" in term:
            key, value = term.replace("==", "=", 1).split("=", 1)
            reqs.append(Requirement(_key(key.strip(), term), "=", frozenset({value.strip()})))
        else:
            reqs.append(Requirement(_key(term, term), "exists"))
    return reqs


def labels_match(reqs: list[Requirement], obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(r.matches(labels) for r in reqs)


@dataclass(frozen=True)
class FieldTerm:
    path: str
    equal: bool
    value: str


def parse_fields(text: str, selectable: tuple[str, ...]) -> list[FieldTerm]:
    terms = []
    for term in _terms(text):
        if "!=" in term:
            path, value = term.split("!=", 1)
            equal = False
        elif "=" in term:
            path, value = term.replace("==", "=", 1).split("=", 1)
            equal = True
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        path = path.strip()
        if path not in selectable:
            raise SelectorError(f"field label not supported: {path}")
        terms.append(FieldTerm(path, equal, value.strip()))
    return terms


def fields_match(terms: list[FieldTerm], obj: Mapping[str, Any], bools: frozenset[str]) -> bool:
    for t in terms:
        value = field_value(obj, t.path)
        if not value and t.path in bools:
            value = "false"
        if (value == t.value) != t.equal:
            return False
    return True
